"""A rank that starts work on shared cores after waiting runs ahead of its core-mates
(node.co_run.wake_run_s, simdist.runtime.wake_runs), as Linux runs a task woken from sleep."""

from __future__ import annotations

import pytest

from conftest import build_platform, busy_spans


def _run(starts: dict[int, float], work_s: dict[int, float], wake_run_s: float,
         after: dict[int, float] | None = None, cores: float | None = 1) -> dict[int, tuple[float, float]]:
    """Ranks 0 and 1 share one core (``cores=None``: each has its own); each starts busy work at
    ``starts`` and works ``work_s`` (``after``: a second piece right after the first, with no gap):
    each rank's (start, end)."""
    node = {"devices": 2, "co_run": {"wake_run_s": wake_run_s, "source": "test"}}
    if cores is not None:
        node["cores"] = cores
    return busy_spans(build_platform("laptop-cpu", node=node), starts, work_s, after)


def test_a_rank_waking_beside_a_busy_one_runs_alone_for_its_run_then_they_share():
    # rank 0 works 10 ms from 0; rank 1 wakes at 2 ms for 0.3 ms of work: it runs alone, rank 0 pauses
    short = _run({0: 0.0, 1: 0.002}, {0: 0.010, 1: 0.0003}, wake_run_s=0.001)
    assert short[1][1] == pytest.approx(0.0023)
    assert short[0][1] == pytest.approx(0.0103)  # the core did the same work: rank 0 ends later by what it lost
    # 3 ms of work: 1 ms alone, then the two share the core for the rest
    long = _run({0: 0.0, 1: 0.002}, {0: 0.010, 1: 0.003}, wake_run_s=0.001)
    assert long[1][1] == pytest.approx(0.002 + 0.001 + 2 * 0.002)
    assert long[0][1] == pytest.approx(0.013)


def test_without_a_wake_run_the_core_is_shared_from_the_first_instant():
    shared = _run({0: 0.0, 1: 0.002}, {0: 0.010, 1: 0.0003}, wake_run_s=0.0)
    assert shared[1][1] == pytest.approx(0.002 + 2 * 0.0003)
    assert shared[0][1] == pytest.approx(0.0103)


def test_ranks_waking_together_share_and_work_that_follows_work_is_no_wake():
    together = _run({0: 0.0, 1: 0.0}, {0: 0.002, 1: 0.002}, wake_run_s=0.001)
    assert together[0][1] == pytest.approx(0.004) and together[1][1] == pytest.approx(0.004)
    # rank 1 wakes at 1.2 ms and pauses rank 0 for its run (to 2.2 ms); then they share, and rank 0's first
    # piece ends at 3.8 ms. Its second piece follows with no gap, so it pauses nobody: rank 1's last 0.2 ms
    # are shared (to 4.2 ms; a wake would have paused it to 4.8 ms and ended it at 5.0)
    chained = _run({0: 0.0, 1: 0.0012}, {0: 0.002, 1: 0.002}, wake_run_s=0.001, after={0: 0.001})
    assert chained[1][1] == pytest.approx(0.0042)
    assert chained[0][1] == pytest.approx(0.005)


def test_a_rank_with_its_own_core_is_never_paused():
    own = _run({0: 0.0, 1: 0.002}, {0: 0.010, 1: 0.0003}, wake_run_s=0.001, cores=None)
    assert own[0][1] == pytest.approx(0.010) and own[1][1] == pytest.approx(0.0023)


def test_a_wake_run_is_checked():
    from pydantic import ValidationError

    from simdist.platform.spec import CoRunSpec

    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        CoRunSpec(wake_run_s=-1e-3, source="x")
    assert CoRunSpec(source="x").wake_run_s == 0.0


def test_the_wake_run_is_the_longest_burst_that_ran_alone_and_every_shorter_one_too():
    from simdist.calibrate.wake_run import wake_run_s

    assert wake_run_s({0.25e-3: 1.0, 0.5e-3: 1.01, 1e-3: 1.02, 1.5e-3: 1.6, 3e-3: 1.9}) == 1e-3
    assert wake_run_s({0.25e-3: 1.0, 0.5e-3: 1.9, 1e-3: 1.02}) == 0.25e-3  # a shared burst ends the run
    assert wake_run_s({0.25e-3: 1.95, 1e-3: 1.9}) == 0.0  # processor sharing from the first instant
