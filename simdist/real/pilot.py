"""Calibration from a pilot run: a short real run of the same scenario, placement and ranks.

The compared run's steps cost more than the same work timed apart from a run (a
forward/backward about 10 % more CPU; a parameter server's reply 1.2 ms from send to receipt
against 0.4 ms in a ping pattern): the caches and clocks a core comes back with after
communication, ranks asleep when their message comes, a buffered send progressed by its
sender. A *pilot* — the same scenario on the same ranks and cores, launched apart, for a few
iterations per worker — pays all of that, and its trace calibrates the simulation of the
compared run, which lends the simulation nothing of its own (:mod:`.validate`):

* forward/backward (:func:`pilot_compute`): the thread CPU time of the pilot's own
  forward/backwards (the first :data:`PILOT_WARMUP` of each worker left out) at its most common
  batch size sets the level (its slowest worker's median), the pilot's short isolated timing at
  several batch sizes the slope;
* host work per step and a server's work per message: as read from a compared run before
  (:func:`~.calibration.host_cpu_per_step`, :func:`~.calibration.server_cpu_per_message`),
  from the pilot's trace;
* the link (:func:`pilot_link`): from the pilot's own messages (those whose receiver was
  already waiting: send to receipt is then the whole transfer) or, when it sent none, from
  its collectives' data phases (last member's arrival to the end), per ring step. The pilot's
  messages are nearly all of one size (a gradient), which fixes the cost at that size; the
  latency is the tiny-payload time of the pilot's ping pattern
  (:func:`~.calibration.measure_network`) and the bandwidth makes up the rest.

:func:`pilot_steps` sizes the pilot: :data:`PILOT_ITERATIONS` iterations per worker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..tracefile import ASYNC_TID_OFFSET, span_events
from .calibration import compute_cpu

__all__ = ["PILOT_ITERATIONS", "PILOT_WARMUP", "PILOT_REPEATS", "pilot_steps", "pilot_compute", "server_cpu_per_push",
           "message_costs", "collective_costs", "pilot_link", "fit_size_cost"]

PILOT_ITERATIONS = 12  # iterations per worker of a pilot (the scenario's own budget when smaller)
PILOT_WARMUP = 2  # first iterations of each pilot worker left out of its figures (one-off costs)
PILOT_REPEATS = 8  # isolated forward/backwards per batch size and worker, before and after the pilot (the slope)
_MIN_BANDWIDTH_Bps, _MAX_BANDWIDTH_Bps = 1e6, 1e12


def pilot_steps(scenario_obj: Any, iterations: int = PILOT_ITERATIONS) -> int:
    """The pilot's step budget: ``iterations`` per worker (a server algorithm counts every push as a step)."""
    config = scenario_obj.algorithm_config()
    per_push = hasattr(config, "apply_time_per_param")  # a parameter server: one step per gradient applied
    steps = iterations * (scenario_obj.worker_count if per_push else 1)
    budget = scenario_obj.stop.steps
    return int(min(steps, budget)) if budget else int(steps)


def _steady_from(events: list[dict[str, Any]], workers: list[int], warmup: int) -> float:
    """The time (s) after which every worker has finished its first ``warmup`` iterations."""
    starts = {w: sorted(e["ts"] * 1e-6 for e in events if e["tid"] == w and e.get("cat") == "compute")
              for w in workers}
    return max((s[warmup] if len(s) > warmup else (s[-1] if s else 0.0)) for s in starts.values()) if starts else 0.0


def pilot_compute(pilot_dir: str | Path, workers: list[int], isolated: dict[str, Any],
                  warmup: int = PILOT_WARMUP, wall: bool = False) -> dict[str, Any]:
    """The forward/backward fit: the level of the pilot's own steps, the slope of the isolated timing.

    Per worker the median CPU time (``wall``: wall time) of its steady forward/backwards at the
    pilot's most common batch size; the level is the largest of those medians. The workers run
    the same steps, yet the host's cores do not run at one speed: which worker is slowest changes
    from run to run (a virtual machine's cores share physical ones with other machines), and
    every algorithm that waits for its peers goes at the pace of the slowest. Over the 16 points
    of ``benchmarks/validation_table.py``, re-simulated from the same runs, the largest median
    brought the median iteration-time error within 5 % at 12 points, the smallest at 7, the
    pooled median of all workers' steps at 10. The slope ``t1`` is the isolated fit's (the
    pilot's batch sizes are too close together to give one), ``t0`` puts the line through the level.

    Wall time is the level where every worker has a core to itself (:func:`describe_run
    <.describe.describe_run>` decides): whatever shares the core with the compute — the progress
    thread of an overlapped collective, MPI's copies for it — is then part of what a
    forward/backward costs, as it is for real. On shared cores the CPU time is the level, the
    simulator shares the cores itself, and the other threads' CPU is charged as host work
    (:func:`~.calibration.other_threads_cpu_per_step`). ``median_cpu_s`` holds the level either way
    (``level_from`` says which).
    """
    frame = compute_cpu(pilot_dir, warmup, workers)
    if frame.empty:
        return dict(isolated)
    batch = int(frame["batch"].mode().iloc[0])
    per_worker = frame[frame["batch"] == batch].groupby("rank")["wall_s" if wall else "cpu_s"].median()
    level, t1 = float(per_worker.max()), float(isolated["t1_s"])
    return {**isolated, "t0_s": max(0.0, level - t1 * batch), "t1_s": t1, "batch_sizes": [batch],
            "median_cpu_s": [level], "per_worker_median_cpu_s": {int(r): float(v) for r, v in per_worker.items()},
            "level_from": "wall" if wall else "cpu",
            "source": "the pilot's forward/backwards (level) and its isolated timing (slope)"}


def server_cpu_per_push(pilot_dir: str | Path, server: int, workers: list[int],
                        warmup: int = PILOT_WARMUP) -> float | None:
    """A server's host CPU seconds per gradient applied after the warm-up (None without data)."""
    events = span_events(pilot_dir)
    steady = _steady_from(events, workers, warmup)
    mine = sorted((e["ts"] * 1e-6 + e.get("dur", 0.0) * 1e-6, e["args"]["host_cpu_s"]) for e in events
                  if e["tid"] == server and "host_cpu_s" in (e.get("args") or {}))
    before = [cpu for end, cpu in mine if end <= steady]
    steps = pd.read_csv(Path(pilot_dir) / "steps.csv")
    pushes = int(((steps["batch_size"] > 0) & (steps["time_s"] > steady)).sum())
    if not mine or pushes <= 0:
        return None
    return (mine[-1][1] - (before[-1] if before else 0.0)) / pushes


def message_costs(pilot_dir: str | Path, workers: list[int], warmup: int = PILOT_WARMUP) -> pd.DataFrame:
    """Per received message after the warm-up whose receiver was already waiting: src, dst, bytes, seconds.

    Seconds from the end of the sender's send call (packing and the copy into the send buffer
    are the sender's host work, charged in its step) to the end of the receipt.
    """
    events = span_events(pilot_dir)
    steady = _steady_from(events, workers, warmup)
    sends = _send_calls(events)
    rows = []
    for e in events:
        args, start = e.get("args") or {}, e["ts"] * 1e-6
        if e.get("cat") == "comm" and e.get("name") == "recv" and "sent_s" in args and start >= steady \
                and abs(start - args["sent_s"]) < 1e-6:  # the receiver was waiting when it was sent
            returned = _returned(sends.get(int(args["src"])), args["sent_s"])
            if returned is not None:
                rows.append((args["src"], e["tid"], args["bytes"], start + e["dur"] * 1e-6 - returned))
    return pd.DataFrame(rows, columns=["src", "dst", "bytes", "seconds"])


def _send_calls(events: list[dict[str, Any]]) -> dict[int, np.ndarray]:
    """Per rank, the (start, end) seconds of its send calls, sorted by start."""
    calls: dict[int, list[tuple[float, float]]] = {}
    for e in events:
        if e.get("cat") == "comm" and e.get("name") == "send":
            start = e["ts"] * 1e-6
            calls.setdefault(int(e["tid"]) % ASYNC_TID_OFFSET, []).append((start, start + e.get("dur", 0.0) * 1e-6))
    return {rank: np.array(sorted(c)) for rank, c in calls.items()}


def _returned(calls: np.ndarray | None, sent_s: float) -> float | None:
    """When the send call that started at ``sent_s`` returned (None if the sender did not record it)."""
    if calls is None or not len(calls):
        return None
    i = int(np.clip(np.searchsorted(calls[:, 0], sent_s), 1, len(calls) - 1))
    nearest = min((i - 1, i), key=lambda j: abs(calls[j, 0] - sent_s)) if len(calls) > 1 else 0
    return float(calls[nearest, 1]) if abs(calls[nearest, 0] - sent_s) < 1e-6 else None


def collective_costs(pilot_dir: str | Path, workers: list[int], warmup: int = PILOT_WARMUP) -> pd.DataFrame:
    """Per blocking allreduce data phase after the warm-up: bytes and seconds per ring step.

    Non-blocking ones are left out: what is left of them after the compute they overlap is
    not what they cost.
    """
    events = span_events(pilot_dir)
    steady = _steady_from(events, workers, warmup)
    rows = []
    for e in events:
        args = e.get("args") or {}
        if e.get("cat") == "comm" and e.get("name") == "allreduce" and args.get("group_size", 1) > 1 \
                and args.get("blocking", True) and not args.get("nonblocking") and e["ts"] * 1e-6 >= steady:
            n = int(args["group_size"])
            rows.append((args["bytes"] / n, e["dur"] * 1e-6 / (2 * (n - 1))))
    return pd.DataFrame(rows, columns=["bytes", "seconds"])


def fit_size_cost(costs: pd.DataFrame, tiny_s: float | None) -> dict[str, float] | None:
    """``latency_s`` and ``bandwidth_Bps`` of ``latency + bytes / bandwidth`` through the costs' medians.

    With sizes at least 4× apart the line through the medians of the smallest and largest
    size; otherwise the latency is ``tiny_s`` (a tiny payload's time; 0 without one), capped at
    the median, and the bandwidth carries the rest of the median cost at the median size.
    """
    if costs.empty:
        return None
    by_size = costs.groupby("bytes")["seconds"].median()
    small, large = float(by_size.index.min()), float(by_size.index.max())
    if small > 0 and large >= 4 * small:
        spread = float(by_size[large] - by_size[small])
        bandwidth = (large - small) / spread if spread > 0 else _MAX_BANDWIDTH_Bps
        latency = max(0.0, float(by_size[small]) - small / bandwidth)
    else:
        size, cost = float(costs["bytes"].median()), float(costs["seconds"].median())
        latency = min(tiny_s or 0.0, cost)
        bandwidth = size / (cost - latency) if cost > latency else _MAX_BANDWIDTH_Bps
    return {"latency_s": latency, "bandwidth_Bps": float(np.clip(bandwidth, _MIN_BANDWIDTH_Bps, _MAX_BANDWIDTH_Bps)),
            "median_s": float(costs["seconds"].median()), "median_bytes": float(costs["bytes"].median()),
            "samples": int(len(costs))}


def pilot_link(pilot_dir: str | Path, workers: list[int], network: dict[str, Any] | None) -> dict[str, Any] | None:
    """The simulation's link from the pilot's messages (if it sent any) or else its allreduces."""
    network = network or {}
    messages = message_costs(pilot_dir, workers)
    if not messages.empty:
        tiny = (network.get("p2p") or {}).get("one_way_s", [None])[0]
        link = fit_size_cost(messages, tiny)
        by_direction = messages.assign(to_worker=messages["dst"].isin(workers)).groupby("to_worker")["seconds"]
        return {**link, "from": "pilot messages", "tiny_s": tiny,
                "median_s_to_workers": _median_or_none(by_direction, True),
                "median_s_to_servers": _median_or_none(by_direction, False)}
    steps = collective_costs(pilot_dir, workers)
    if steps.empty:
        return None
    allreduce = network.get("allreduce")
    tiny = allreduce["time_s"][0] / (2 * (allreduce["ranks"] - 1)) if allreduce and allreduce["ranks"] > 1 else None
    return {**fit_size_cost(steps, tiny), "from": "pilot allreduces (per ring step)", "tiny_s": tiny}


def _median_or_none(grouped: Any, key: bool) -> float | None:
    medians = grouped.median()
    return float(medians[key]) if key in medians.index else None
