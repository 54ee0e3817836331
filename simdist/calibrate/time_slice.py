"""How long the scheduler lets a rank run before it switches to another on the same core.

Where ranks outnumber their cores, a core runs one of them at a time and switches at the
scheduler's tick; the simulator models that as ``node.co_run.slice_s``
(:mod:`simdist.runtime.time_slices`). ``simdist calibrate cpu-share`` measures it on the ranks'
own work: while its workers step the workload together, each reads ``/proc/self/schedstat``
(CPU time run, and how many times it was switched in) before and after, and its mean run is
the one over the other. The workers never sleep while they step, so each run ends when the
scheduler switches; the slice is the median mean run over the configurations with more ranks
than cores.

What a rank does matters: on this project's 2-core host (Linux 6.18, 250 Hz tick) the 256x256
MLP's training step runs 3.99 ms at a time, as does a pure spin loop; a loop that makes a system
call per iteration runs 1.40 ms at a time. That is why the slice is taken from the workload.
"""

from __future__ import annotations

import statistics
from typing import Any, Sequence

__all__ = ["schedstat", "mean_run_s", "time_slice_fields"]


def schedstat() -> tuple[int, int] | None:
    """This thread's (nanoseconds run on a CPU, times switched in) from ``/proc/self/schedstat``;
    None where the kernel does not provide it."""
    try:
        with open("/proc/self/schedstat") as f:
            run_ns, _waited_ns, switched_in = f.read().split()[:3]
        return int(run_ns), int(switched_in)
    except (OSError, ValueError):
        return None


def mean_run_s(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The mean run between two :func:`schedstat` readings (None without both or without a switch)."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1]) / 1e9


def time_slice_fields(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The slice from the CPU-share measurements (each row's ``mean_run_s``) as fields of the
    CPU-share file: ``slice_s`` (0 where no configuration had more ranks than cores, or the
    kernel gave no counters: processor sharing is kept), the runs it came from, the method."""
    runs = [(row["ranks"], row["cores"], row["mean_run_s"]) for row in rows
            if row["ranks"] > row["cores"] and row.get("mean_run_s")]
    if not runs:
        return {"slice_s": 0.0, "slice_method": "not measured: no configuration with more ranks than cores, or no "
                                                "/proc/self/schedstat; processor sharing kept"}
    return {"slice_s": statistics.median(run for _, _, run in runs),
            "slice_runs": [{"ranks": k, "cores": c, "mean_run_s": run} for k, c, run in runs],
            "slice_method": "each worker's CPU time over the times it was switched in (/proc/self/schedstat) while "
                            "it stepped the workload, more ranks than cores; the median over those configurations"}
