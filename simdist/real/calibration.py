"""Calibrating a simulation from the real run it is compared with: what each step really costs.

Four figures, each measured on the run's own ranks, written with how they were obtained:

* **forward/backward** (:func:`measure_compute`): before the run's clock starts and again
  after the run (the host's speed drifts by several % within seconds), every worker rank times
  the real forward/backward of its model at a few batch sizes, in *thread CPU seconds*. All
  workers measure at once, so cores shared with the other ranks (caches, memory bandwidth)
  are in the figure, while time slices lost to other ranks are not: that sharing is the
  simulator's processor sharing (``platform.node.cores``), which must not be counted twice.
  :func:`fit_compute` fits ``t0 + t1 · batch`` to the per-size medians of all workers.
* **host work per step** (:func:`host_cpu_per_step`): the real run's spans carry each rank's
  CPU time spent neither computing nor waiting nor in the algorithm's own timed work
  (:class:`~.runtime.CpuClock`; optimizer steps, averaging and copies go through ``rt.busy``,
  are timed as ledger parts and charged apart by the simulator): payload handling, the
  driver's bookkeeping, whatever an algorithm does between runtime calls. Its median
  per worker iteration (between consecutive forward/backwards, the first left out) is added to
  the profile's ``t0``: the simulator charges a worker's step as one compute span, and this
  work needs the same cores.
* **server work per message** (:func:`server_cpu_per_message`): a parameter server's host CPU
  over the messages it handled, charged by the simulator as ``apply_time_per_param`` busy time.
* **the network as the runtime sees it** (:func:`measure_network`): after the run's clock has
  been set up and before it restarts, messages through the runtime's own point-to-point path
  (payload packing, buffered send, matched probe, the waiting policy) each way between the
  first worker and the last rank, and allreduces through its collective path among the
  workers, each at a tiny and at the model's gradient size, timed from send (from the last
  member's arrival) to receipt (to the end) as the run's ``comm`` spans are; a message is sent
  once its receiver has been waiting 2 ms (asleep), an allreduce's last member comes 0.1 ms
  after the others (peers in lockstep). :func:`fit_link`
  turns them into the latency and bandwidth of the simulator's intra-node link (a message
  costs ``latency + S/bandwidth``; a ring allreduce of ``S`` bytes on ``n`` ranks
  ``2(n−1)·(latency + S/(n·bandwidth))``).
  Raw MPI is several times faster than what an algorithm pays through the runtime; the
  simulation must charge the latter.

:func:`write_profile` writes the resulting profile (``host-cpu`` device key) for
``compute.profiles``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from ..tracefile import span_events

__all__ = ["calibration_sizes", "measure_compute", "fit_compute", "fit_run_compute", "compute_cpu", "host_cpu_per_step",
           "other_threads_cpu_per_step", "server_cpu_per_message", "write_profile", "measure_network", "fit_link"]

_ROUNDS = 4
_WARMUP = 2
_IDLE_S = 1e-3  # idle time between two timed forward/backwards (a rank waiting for its peers)
_NETWORK_REPEATS = 15
_LATE_S = 2e-3  # how late a message comes: its receiver (asleep by then) waits on its answer, as in a server loop
_SKEW_S = 0.1e-3  # how late the last member of an allreduce comes: peers that compute alike arrive together
_TAG_PING = 9001  # tag of the calibration messages; algorithm messages start later on a fresh clock


def calibration_sizes(batch_size: int) -> list[int]:
    """Batch sizes timed around the scenario's: partial batches at epoch ends are smaller."""
    return sorted({max(1, batch_size // 4), max(2, batch_size // 2), batch_size, batch_size * 2})


def _batch(workload: Any, size: int, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A fresh training batch of ``size`` random samples, gathered as a run's batches are."""
    n = workload.dataset.train_size
    index = torch.from_numpy(rng.choice(n, size=size, replace=size > n).astype(np.int64))
    return workload.dataset.train_x[index], workload.dataset.train_y[index]


def measure_compute(workload: Any, sizes: Sequence[int], repeats: int, seed: int = 0) -> dict[str, Any]:
    """Thread CPU seconds (and wall seconds) of forward/backward at each size, interleaved over sizes.

    Between two timed forward/backwards the rest of a step happens as in a run — a fresh batch
    is gathered, the gradient goes through an optimizer step, the rank idles a moment as it does
    waiting for its peers — so caches and clocks are in the state a run's steps start from
    (timed back to back, the same forward/backward is several % faster).
    """
    replica = workload.new_replica()
    rng = np.random.default_rng([seed, len(sizes)])
    for size in sizes:
        for _ in range(_WARMUP):
            workload.evaluator.gradient(replica.params, *_batch(workload, size, rng))
    cpu: dict[int, list[float]] = {size: [] for size in sizes}
    wall: dict[int, list[float]] = {size: [] for size in sizes}
    per_round = max(1, -(-repeats // _ROUNDS))
    for _ in range(_ROUNDS):
        for size in sizes:
            for _ in range(per_round):
                x, y = _batch(workload, size, rng)
                c, w = time.thread_time(), time.perf_counter()
                grad, _loss = workload.evaluator.gradient(replica.params, x, y)
                cpu[size].append(time.thread_time() - c)
                wall[size].append(time.perf_counter() - w)
                replica.apply_gradient(grad)
                time.sleep(_IDLE_S)
    return {"sizes": list(sizes), "cpu_s": {str(s): v for s, v in cpu.items()},
            "wall_s": {str(s): v for s, v in wall.items()}}


def fit_compute(measurements: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``t0_s``, ``t1_s`` fitted to the median CPU time per size over every worker's samples (before and after)."""
    from ..calibrate.compute_profile import fit_linear

    sizes = [int(s) for s in measurements[0]["sizes"]]
    pooled = {s: np.concatenate([m[key][str(s)] for m in measurements for key in ("cpu_s", "cpu_after_s") if key in m])
              for s in sizes}
    walls = {s: np.concatenate([m[key][str(s)] for m in measurements for key in ("wall_s", "wall_after_s") if key in m])
             for s in sizes}
    medians = [float(np.median(pooled[s])) for s in sizes]
    fit = fit_linear(sizes, medians)
    spread = [float((np.percentile(pooled[s], 75) - np.percentile(pooled[s], 25)) / np.median(pooled[s]))
              for s in sizes]
    return {"t0_s": float(fit["t0_s"]), "t1_s": max(float(fit["t1_s"]), 1e-12), "r2": fit["r2"],
            "max_relative_error": fit["max_relative_error"], "batch_sizes": sizes, "median_cpu_s": medians,
            "median_wall_s": [float(np.median(walls[s])) for s in sizes], "relative_iqr": spread,
            "samples": [int(len(pooled[s])) for s in sizes], "workers": len(measurements)}


def fit_run_compute(result_dir: str | Path, fallback: dict[str, Any], skip_first: int = 0) -> dict[str, Any]:
    """``t0 + t1 · batch`` fitted to the CPU time of a run's own forward/backwards (for a replay).

    Per batch size the median; with fewer than two sizes seen at least three times each, the
    slope of ``fallback`` (an isolated fit) is kept and ``t0`` matches the median. The first
    ``skip_first`` forward/backwards of every rank are left out (warm-up).
    """
    from ..calibrate.compute_profile import fit_linear

    frame = compute_cpu(result_dir, skip_first)
    counts = frame.groupby("batch")["cpu_s"].agg(["median", "size"])
    counts = counts[counts["size"] >= 3]
    if len(counts) >= 2:
        fit = fit_linear(list(counts.index), list(counts["median"]))
        t0, t1 = float(fit["t0_s"]), max(float(fit["t1_s"]), 1e-12)
    elif len(counts) == 1:
        t1 = fallback["t1_s"]
        t0 = max(0.0, float(counts["median"].iloc[0]) - t1 * float(counts.index[0]))
    else:
        return dict(fallback)
    return {**fallback, "t0_s": t0, "t1_s": t1, "batch_sizes": [int(b) for b in counts.index],
            "median_cpu_s": [float(v) for v in counts["median"]], "source": "the run's forward/backward spans"}


def compute_cpu(result_dir: str | Path, skip_first: int = 0, workers: Sequence[int] | None = None) -> pd.DataFrame:
    """A run's forward/backwards with their thread CPU time and wall time: ``rank, ts, batch,
    cpu_s, wall_s, other_threads_cpu_s`` (0 where not recorded), in order per rank, the first
    ``skip_first`` of each rank left out (only ``workers``' if given)."""
    rows = [(e["tid"], e["ts"], e["args"]["batch_size"], e["args"]["cpu_s"], e.get("dur", 0.0) * 1e-6,
             e["args"].get("other_threads_cpu_s", 0.0))
            for e in span_events(result_dir)
            if e.get("cat") == "compute" and (e.get("args") or {}).get("cpu_s")
            and (workers is None or e["tid"] in workers)]
    frame = pd.DataFrame(rows, columns=["rank", "ts", "batch", "cpu_s", "wall_s", "other_threads_cpu_s"])
    frame = frame.sort_values(["rank", "ts"], kind="stable")
    return frame[frame.groupby("rank").cumcount() >= skip_first]


def _trace_spans(result_dir: Path) -> pd.DataFrame:
    rows = [(e["tid"], e.get("cat", ""), e.get("name", ""), (e["ts"] + e.get("dur", 0.0)) * 1e-6,
             (e.get("args") or {}).get("host_cpu_s"))
            for e in span_events(result_dir)]
    spans = pd.DataFrame(rows, columns=["rank", "kind", "name", "end_s", "host_cpu_s"]).dropna(subset=["host_cpu_s"])
    return spans.sort_values(["rank", "end_s"], kind="stable")


def host_cpu_per_step(result_dir: str | Path, workers: Sequence[int], skip_first: int = 1) -> dict[str, Any]:
    """Median host CPU seconds per worker iteration (between forward/backwards; the first ``skip_first`` left out)."""
    spans = _trace_spans(Path(result_dir))
    per_worker = {}
    for rank in workers:
        computes = spans[(spans["rank"] == rank) & (spans["kind"] == "compute") & (spans["name"] == "forward/backward")]
        steps = np.diff(computes["host_cpu_s"].to_numpy(dtype=float))[skip_first:]
        if len(steps):
            per_worker[int(rank)] = float(np.median(steps))
    value = float(np.median(list(per_worker.values()))) if per_worker else 0.0
    return {"host_cpu_s": value, "per_worker": per_worker}


def other_threads_cpu_per_step(result_dir: str | Path, workers: Sequence[int], skip_first: int = 1) -> float:
    """Median CPU seconds a worker's other threads took during one of its forward/backwards.

    The thread that progresses a non-blocking collective while the rank computes (and MPI's
    copies in it): on a core the rank shares, that CPU is taken from the computing ranks. The
    median per worker, then over workers; 0 for a run that recorded none.
    """
    frame = compute_cpu(result_dir, skip_first, workers)  # 0 where a trace did not record it
    return float(frame.groupby("rank")["other_threads_cpu_s"].median().median()) if not frame.empty else 0.0


def server_cpu_per_message(result_dir: str | Path, server: int, messages: int) -> float | None:
    """A server's host CPU seconds over the ``messages`` it handled (None without data)."""
    spans = _trace_spans(Path(result_dir))
    mine = spans[spans["rank"] == server]
    if mine.empty or messages <= 0:
        return None
    return float(mine["host_cpu_s"].iloc[-1]) / messages


def write_profile(path: str | Path, workload: Any, fit: dict[str, Any], host_cpu_s: float, threads: int,
                  source: str) -> Path:
    """A ``host-cpu`` compute profile of the workload's model: the fit with ``host_cpu_s`` added to ``t0``."""
    from ..calibrate.compute_profile import profile_document, write_profile as write

    entry = {**fit, "t0_s": fit["t0_s"] + host_cpu_s, "forward_flops_per_sample": workload.forward_flops_per_sample,
             "statistic": "median", "dataset": workload.dataset.name,
             "options": workload.model_config.model_dump(mode="json")}
    document = profile_document({workload.model_name: entry}, threads, "host-cpu")
    # the algorithms' own updates are timed apart in the run (``rt.busy``) and charged apart by the
    # simulator: the host work added here holds no optimizer step to take out again
    document["models"][workload.model_name].update(
        includes_optimizer_step=False, forward_backward_t0_s=fit["t0_s"], host_cpu_per_step_s=host_cpu_s, median_cpu_s=fit["median_cpu_s"],
        median_wall_s=fit["median_wall_s"], relative_iqr=fit["relative_iqr"])
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write(path, document, source)
    return path


def _busy(seconds: float) -> None:
    """Keep the core busy for ``seconds``, as a computing rank does."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def _messages(world: Any, driver: Any, pair: tuple[int, int], payload: Any) -> list[float]:
    """Send-to-receive seconds of ``payload``, each way in turn, sent once the receiver has been waiting a while."""
    from .requests import RecvRequest

    rank, times = world.rank, []
    for i in range(2 * (_NETWORK_REPEATS + _WARMUP)):
        sender, receiver = (pair if i % 2 == 0 else pair[::-1])
        if rank == sender:
            _busy(_LATE_S)
            world.send(receiver, payload, _TAG_PING, record=False)  # not part of the run's trace
        else:
            message = driver.wait(RecvRequest(world, rank, sender, _TAG_PING))
            if i >= 2 * _WARMUP:
                times.append(message.arrived_s - message.sent_s)
    return times


def _allreduces(world: Any, driver: Any, group: Any, tensor: torch.Tensor) -> list[float]:
    """Seconds from the last member's arrival to this rank's end of each allreduce (one arrives a bit late)."""
    times = []
    for i in range(_NETWORK_REPEATS + _WARMUP):
        world.comm_for(group).Barrier()
        if world.rank == group.ranks[i % group.size]:
            _busy(_SKEW_S)
        request = world.collective("allreduce", group, tensor)
        driver.wait(request)
        if i >= _WARMUP:
            times.append(world.now() - request.started_s)
    return times


def measure_network(world: Any, driver: Any, workers: Sequence[int], numel: int) -> dict[str, Any]:
    """Median message and allreduce seconds at a tiny size and at ``numel`` float32 (see the module doc).

    Each as the algorithms use them: a message's receiver has been waiting for a while when
    it is sent (a worker for its server's reply, a server for the next push), so the waiting
    rank's wake-up is in the figure; the members of an allreduce compute alike and arrive
    within a fraction of a millisecond of each other.
    """
    from ..runtime.base import Group
    from ..training.replica import payload_nbytes

    rank, payloads = world.rank, [{"tiny": torch.zeros(1)}, {"grad": torch.zeros(numel)}]
    result: dict[str, Any] = {"p2p": None, "allreduce": None}
    pair = (workers[0], world.size - 1)
    if pair[0] != pair[1] and rank in pair:
        times = [_messages(world, driver, pair, p) for p in payloads]
        if times[0]:
            result["p2p"] = {"ranks": list(pair), "bytes": [payload_nbytes(p) for p in payloads],
                             "one_way_s": [float(np.median(t)) for t in times]}
    if len(workers) > 1 and rank in workers:
        group = Group(tuple(workers), "calibration")
        times = [_allreduces(world, driver, group, t) for t in (torch.zeros(1), torch.zeros(numel))]
        if rank == workers[0]:
            result["allreduce"] = {"ranks": len(workers), "bytes": [4, 4 * numel],
                                   "time_s": [float(np.median(t)) for t in times]}
    return result


def fit_link(network: dict[str, Any], kind: str) -> dict[str, float] | None:
    """``latency_s`` and ``bandwidth_Bps`` of one link from the ``p2p`` or ``allreduce`` figures.

    The line through the tiny and the full size; when noise makes the full size no slower than
    the tiny one, the size-dependent part is below what the figures resolve: the latency is the
    smaller time and the bandwidth what the full size allows beside it (at least 1 TB/s).
    """
    figures = network.get(kind)
    if not figures:
        return None
    s0, s1 = figures["bytes"]
    t0, t1 = figures["one_way_s"] if kind == "p2p" else figures["time_s"]
    steps, share = (1, 1.0) if kind == "p2p" else (2 * (figures["ranks"] - 1), 1.0 / figures["ranks"])
    latency = min(t0, t1) / steps
    spread = (t1 - t0) / steps if t1 > t0 else 0.0
    bandwidth = (s1 - s0) * share / spread if spread > 0 else 1e12
    return {"latency_s": latency, "bandwidth_Bps": min(bandwidth, 1e12), "from": kind}
