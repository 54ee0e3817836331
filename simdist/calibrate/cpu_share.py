"""CPU-share calibration: how ``k`` co-running ranks on ``c`` cores slow each other down.

The simulator shares a node's cores among its CPU ranks by processor sharing
(:mod:`simdist.platform.compute`): alone a rank takes ``t``; ``k`` ranks on ``c`` cores each
take ``t · max(1, k/c)``. Real cores also share caches and memory bandwidth, and the
scheduler switches contexts, so this module measures it:

* ``k`` worker processes (forked once, one torch thread each) are pinned to the same ``c``
  cores (``os.sched_setaffinity``) and run the real forward/backward/optimizer step of a zoo
  model, or of one scenario's workload (``--scenario``: its model, dataset shape, optimizer and
  batch size, what the ranks of that job will run), for ``duration_s`` together, started at
  one instant;
* a rank's time per step is its wall time over the steps it finished (throughput, the
  quantity processor sharing predicts — a single step may run uninterrupted while another
  waits a whole time slice);
* every configuration is repeated ``rounds`` times, interleaved, and the median is kept; a
  run during which other processes used the pinned cores (``/proc/stat`` busy time minus the
  workers' own CPU time) is repeated, and that foreign load is recorded.

:class:`~simdist.fitting.ContentionFit` turns the table into one contention factor
``φ``: ``t(k, c) = t(1, c) · max(1, k/c) · φ`` for ``k ≥ 2``. Other processes on the machine
add to the measurement; run it on a quiet machine.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import statistics
import sys
import time
from typing import Any, Sequence

import numpy as np
import torch

from ..training.optim import OptimizerConfig
from ..training.workload import build_workload
from .compute_profile import ZOO, cpu_model_name, cpu_training_step, steady_allocator
from ..fitting import ContentionFit
from .provenance import make_provenance
from .time_slice import mean_run_s, schedstat

__all__ = ["available_cores", "measure_contention", "contention_document", "stepped_workload"]


def available_cores() -> list[int]:
    """The CPU ids this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return list(range(os.cpu_count() or 1))


def _busy_s(cores: Sequence[int]) -> float:
    """CPU-seconds the given cores have been busy since boot (``/proc/stat``; nan elsewhere)."""
    try:
        lines = {line.split()[0]: line.split()[1:] for line in open("/proc/stat") if line.startswith("cpu")}
    except OSError:
        return float("nan")
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for core in cores:
        values = [int(v) for v in lines.get(f"cpu{core}", [])]
        total += sum(values) - (values[3] + values[4] if len(values) > 4 else 0)
    return total / ticks


def stepped_workload(model: str, seed: int, scenario: str | None) -> Any:
    """The workload a worker steps: a zoo model's, or a scenario's own (its model, dataset shape,
    optimizer and seed, as the simulator builds them). The host benchmarks step the same."""
    if scenario is not None:
        from .compute_scenario import plan_scenario

        return plan_scenario(scenario, "cpu").workload
    dataset, options = ZOO[model]
    return build_workload(model, options, dataset, {}, OptimizerConfig(), seed)


def _worker(conn, model: str, batch_size: int, seed: int, scenario: str | None = None) -> None:
    """Child process: wait for (cores, start, duration) and report (steps, elapsed_s, cpu_s, its
    mean run between the scheduler's switches: :mod:`.time_slice`)."""
    torch.set_num_threads(1)
    steady_allocator()
    step = cpu_training_step(stepped_workload(model, seed, scenario), batch_size)
    for _ in range(3):
        step()
    conn.send("ready")
    while True:
        message = conn.recv()
        if message is None:
            return
        cores, start, duration = message
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, cores)
        while time.monotonic() < start:
            time.sleep(0.0005)
        steps, begin, cpu, runs = 0, time.monotonic(), time.process_time(), schedstat()
        while time.monotonic() - begin < duration:
            step()
            steps += 1
        conn.send((steps, time.monotonic() - begin, time.process_time() - cpu, mean_run_s(runs, schedstat())))


class _Pool:
    """``size`` forked workers that stay alive across configurations."""

    def __init__(self, size: int, model: str, batch_size: int, seed: int, scenario: str | None = None):
        method = "fork" if "fork" in mp.get_all_start_methods() and sys.platform.startswith("linux") else "spawn"
        ctx = mp.get_context(method)
        self.conns, self.procs = [], []
        for _ in range(size):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, model, batch_size, seed, scenario), daemon=True)
            proc.start()
            self.conns.append(parent)
            self.procs.append(proc)
        for conn in self.conns:  # every worker has built its model: configurations start together
            if conn.recv() != "ready":
                raise RuntimeError("a CPU-share worker failed to start")

    def run(self, k: int, cores: list[int], duration_s: float) -> tuple[list[float], float, float | None]:
        """Per-rank seconds per step, the share of ``cores`` other processes used meanwhile, and the
        ranks' mean run between switches (None where the kernel does not count them)."""
        start = time.monotonic() + 0.05
        for conn in self.conns[:k]:
            conn.send((cores, start, duration_s))
        before = _busy_s(cores)
        results = [conn.recv() for conn in self.conns[:k]]
        busy = _busy_s(cores) - before
        wall = max(elapsed for _, elapsed, _, _ in results)
        own = sum(cpu for _, _, cpu, _ in results)
        foreign = 0.0 if math.isnan(busy) else max(0.0, busy - own) / (len(cores) * wall)
        runs = [run for _, _, _, run in results if run is not None]
        return ([elapsed / max(steps, 1) for steps, elapsed, _, _ in results], foreign,
                statistics.mean(runs) if runs else None)

    def close(self) -> None:
        for conn in self.conns:
            conn.send(None)
        for proc in self.procs:
            proc.join(timeout=10)


def measure_contention(ranks: Sequence[int] = (1, 2, 4), cores: Sequence[int] | None = None,
                       duration_s: float = 1.0, rounds: int = 3, model: str = "mlp", batch_size: int = 64,
                       seed: int = 0, max_foreign: float = 0.1, retries: int = 2,
                       scenario: str | None = None) -> list[dict[str, Any]]:
    """Mean step time per (ranks, cores) configuration; ``k = 1`` is always measured. The
    workers step the zoo ``model``, or with ``scenario`` (a scenario file) that scenario's workload.

    A run during which other processes used more than ``max_foreign`` of the pinned cores is
    repeated (at most ``retries`` times); the share they used is kept per sample
    (``foreign_load``).
    """
    allowed = available_cores()
    cores = sorted(set(cores or [1, len(allowed)]))
    if max(cores) > len(allowed) or min(cores) < 1:
        raise ValueError(f"cores must be between 1 and {len(allowed)} (the CPUs this process may use)")
    ks = sorted(set(ranks) | {1})
    configs = [(k, c) for c in cores for k in ks]
    samples: dict[tuple[int, int], list[float]] = {cfg: [] for cfg in configs}
    foreign: dict[tuple[int, int], list[float]] = {cfg: [] for cfg in configs}
    runs: dict[tuple[int, int], list[float]] = {cfg: [] for cfg in configs}
    pool = _Pool(max(ks), model, batch_size, seed, scenario)
    try:
        for _ in range(rounds):
            for k, c in configs:
                for _try in range(retries + 1):  # other processes on our cores spoil a run: repeat it
                    times, other, run = pool.run(k, allowed[:c], duration_s)
                    if other <= max_foreign:
                        break
                samples[(k, c)].append(statistics.mean(times))
                foreign[(k, c)].append(other)
                if run is not None:
                    runs[(k, c)].append(run)
    finally:
        pool.close()
    rows = []
    for k, c in configs:
        t, alone = float(np.median(samples[(k, c)])), float(np.median(samples[(1, c)]))
        rows.append({"ranks": k, "cores": c, "step_s": t, "alone_s": alone, "slowdown": t / alone,
                     "processor_sharing": max(1.0, k / c), "ratio": t / alone / max(1.0, k / c),
                     "samples_s": samples[(k, c)], "foreign_load": foreign[(k, c)],
                     "mean_run_s": float(np.median(runs[(k, c)])) if runs[(k, c)] else None})
    return rows


def contention_document(rows: list[dict[str, Any]], *, model: str, batch_size: int, duration_s: float,
                        rounds: int, command: str) -> tuple[dict[str, Any], ContentionFit]:
    """The CPU-share file's content and the fit behind it."""
    fit = ContentionFit().fit([r["ranks"] for r in rows], [r["cores"] for r in rows],
                              [r["step_s"] for r in rows], [r["alone_s"] for r in rows])
    document = {
        "device": "host-cpu",
        "description": f"{cpu_model_name()} ({os.cpu_count()} logical CPUs), one torch thread per rank",
        "model": model, "batch_size": batch_size,
        "model_of_the_world": "t(k ranks, c cores) = t(1, c) * max(1, k/c) * contention_factor (k >= 2); "
                              "contention_factor 1 = processor sharing holds",
        **fit.export(),
        "measurements": [{k: v for k, v in r.items()} for r in rows],
        "provenance": make_provenance(command, (), {"r2": fit.r2_, "processor_sharing_r2": fit.processor_sharing_r2_},
                                      method=f"{duration_s} s of steps per configuration, {rounds} interleaved "
                                             "rounds, median; step time = wall time / steps finished"),
    }
    return document, fit


def co_run_overlay(document: dict[str, Any], path: str) -> dict[str, Any]:
    """The platform overlay of a contention document: ``node.co_run`` with its factors (1 where a
    regime was not measured: no slow-down is claimed without a measurement), the woken rank's
    run alone and the scheduler's time slice (0 where not measured: processor sharing), and the
    provenance."""
    def factor(key: str) -> float:
        value = document.get(key)
        return max(1.0, float(value)) if value is not None and math.isfinite(float(value)) else 1.0

    source = (f"{path}: {document.get('model')} at batch {document.get('batch_size')}, "
              f"{document.get('description', 'this host')}")
    wake, turns = document.get("wake_run_s"), document.get("slice_s")
    return {"node": {"co_run": {"undersubscribed_factor": factor("undersubscribed_factor"),
                                "oversubscribed_factor": factor("oversubscribed_factor"),
                                "wake_run_s": float(wake) if wake is not None else 0.0,
                                "slice_s": float(turns) if turns is not None else 0.0, "source": source}},
            "provenance": document["provenance"]}

