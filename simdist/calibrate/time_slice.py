"""How long the scheduler lets one of two busy processes on a core run before switching.

Where ranks outnumber their cores, a core runs one of them at a time and switches at the
scheduler's tick; the simulator models that as ``node.co_run.slice_s``
(:mod:`simdist.runtime.time_slices`). This microbenchmark measures it: two processes pinned
to one core spin, each reading the clock, and a jump of the clock longer than
:data:`GAP_S` between two reads is the other one's run. The slice is the median length of
the runs between such jumps. On this project's 2-core host (Linux 6.18, 250 Hz tick):
3.97 ms, the p10 1.2–2.6 ms (runs cut short by interrupts and other tasks).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import time
from typing import Any

__all__ = ["GAP_S", "measure_runs", "time_slice_fields"]

GAP_S = 200e-6  # a clock jump longer than this is another task's run (interrupts take microseconds)


def _spin_and_time(core: int, duration_s: float, start: Any, out: Any) -> None:
    os.sched_setaffinity(0, {core})
    start.wait()
    runs: list[float] = []
    first = last = run_from = time.perf_counter()
    while last - first < duration_s:
        now = time.perf_counter()
        if now - last > GAP_S:
            runs.append(last - run_from)
            run_from = now
        last = now
    out.put(runs[1:])  # the first run began before both were spinning


def measure_runs(core: int, duration_s: float = 1.0) -> list[float]:
    """The runs (seconds) of two processes spinning side by side on ``core`` for ``duration_s``."""
    context = mp.get_context("fork")
    start, out = context.Event(), context.Queue()
    spinners = [context.Process(target=_spin_and_time, args=(core, duration_s, start, out), daemon=True)
                for _ in range(2)]
    for spinner in spinners:
        spinner.start()
    start.set()
    runs = [run for _ in spinners for run in out.get(timeout=60.0 + 4 * duration_s)]
    for spinner in spinners:
        spinner.join(timeout=5.0)
    return runs


def time_slice_fields(core: int, duration_s: float = 1.0) -> dict[str, Any]:
    """The measurement on ``core`` as fields of the CPU-share file: ``slice_s`` (the median run; 0
    where the processes never took turns, as when the core is not shared), its spread, the method."""
    runs = sorted(measure_runs(core, duration_s))
    if len(runs) < 3:
        return {"slice_s": 0.0, "slice_runs": len(runs),
                "slice_method": f"two processes spinning on core {core} for {duration_s:g} s took turns "
                                f"{len(runs)} times: too few to time a slice; processor sharing kept"}
    return {"slice_s": statistics.median(runs), "slice_runs": len(runs),
            "slice_p10_s": runs[len(runs) // 10], "slice_p90_s": runs[(9 * len(runs)) // 10],
            "slice_method": f"two processes spinning on core {core} for {duration_s:g} s; the median run between "
                            f"clock jumps over {GAP_S * 1e6:g} us (the other one's run)"}
