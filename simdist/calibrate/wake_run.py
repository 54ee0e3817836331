"""How long a process woken from sleep runs ahead of a busy one on the same core.

Processor sharing gives two processes on one core half of it each from the first instant.
The Linux scheduler does not: a task that wakes is placed ahead of the ones that kept running,
so its first stretch of work runs alone while they pause. The simulator models that stretch
as ``node.co_run.wake_run_s`` (:mod:`simdist.runtime.wake_runs`); this microbenchmark
measures it.

Two processes are pinned to one core: one spins without pause (a forward/backward), the
other sleeps ``gap_s``, then does ``burst_s`` of CPU work, over and over. Each burst's wall
time over its CPU time is 1 when it ran alone and about 2 when it shared the core. The wake run
is the longest burst whose median ratio stays below :data:`ALONE_RATIO` (every shorter one
too): up to it the woken process had the core to itself. On this project's 2-core host:
1 ms (1.00 at 0.25–1 ms, 1.0–2.5 at 1.5 ms, 1.7–2.0 from 2.5 ms, after 0.3–20 ms of sleep).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import time
from typing import Any, Sequence

__all__ = ["ALONE_RATIO", "BURSTS_S", "measure_wake_run", "wake_run_s", "wake_run_fields"]

ALONE_RATIO = 1.25  # a burst's wall / CPU below which it ran alone (sharing gives about 2)
BURSTS_S = (0.25e-3, 0.5e-3, 1e-3, 1.5e-3, 2e-3, 3e-3)


def _spin(core: int, stop: Any) -> None:
    os.sched_setaffinity(0, {core})
    while not stop.is_set():
        for _ in range(10_000):
            pass


def _bursts(core: int, bursts_s: Sequence[float], gap_s: float, repeats: int, out: Any) -> None:
    os.sched_setaffinity(0, {core})
    ratios = {}
    for burst_s in bursts_s:
        samples = []
        for _ in range(repeats):
            time.sleep(gap_s)
            wall, cpu = time.perf_counter(), time.thread_time()
            while time.thread_time() - cpu < burst_s:
                pass
            samples.append((time.perf_counter() - wall) / (time.thread_time() - cpu))
        ratios[burst_s] = statistics.median(samples)
    out.put(ratios)


GAP_S = 3e-3  # the sleep before each burst


def measure_wake_run(core: int, bursts_s: Sequence[float] = BURSTS_S, gap_s: float = GAP_S,
                     repeats: int = 40) -> dict[float, float]:
    """Per burst length, the median wall / CPU time of a burst woken beside a spinning process on ``core``."""
    context = mp.get_context("fork")
    stop, out = context.Event(), context.Queue()
    spinner = context.Process(target=_spin, args=(core, stop), daemon=True)
    spinner.start()
    try:
        time.sleep(0.1)  # the spinner is running when the first burst wakes
        burster = context.Process(target=_bursts, args=(core, list(bursts_s), gap_s, repeats, out), daemon=True)
        burster.start()
        ratios = out.get(timeout=60.0 + len(bursts_s) * repeats * (gap_s + 3 * max(bursts_s)))
        burster.join()
    finally:
        stop.set()
        spinner.join(timeout=5.0)
    return ratios


def wake_run_s(ratios: dict[float, float]) -> float:
    """The longest burst that ran alone, every shorter one alone too (0: none did)."""
    longest = 0.0
    for burst_s in sorted(ratios):
        if ratios[burst_s] >= ALONE_RATIO:
            break
        longest = burst_s
    return longest


def wake_run_fields(core: int) -> dict[str, Any]:
    """The measurement on ``core`` as fields of the CPU-share file: ``wake_run_s``, every burst's ratio, the method."""
    ratios = measure_wake_run(core)
    return {"wake_run_s": wake_run_s(ratios),
            "wake_run_ratios": [{"burst_s": b, "ratio": r} for b, r in sorted(ratios.items())],
            "wake_run_method": f"a process sleeping {GAP_S * 1e3:g} ms then working a burst, beside a spinning one "
                               f"on core {core}; the longest burst whose median wall/CPU stays below {ALONE_RATIO}"}
