"""Ranks that outnumber their cores take turns in the scheduler's time slices
(node.co_run.slice_s, simdist.runtime.time_slices), as Linux runs them: one task per core at
a time, switching at the tick."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import build_platform, build_world, busy_spans

SLICE = 0.004


def _run(starts: dict[int, float], work_s: dict[int, float], *, devices: int = 2, cores: float | None = 1,
         slice_s: float = SLICE, wake_run_s: float = 0.0, after: dict[int, float] | None = None
         ) -> dict[int, tuple[float, float]]:
    """``devices`` ranks on ``cores`` cores (None: each has its own); each starts busy work at
    ``starts`` and works ``work_s``: each rank's (start, end)."""
    node = {"devices": devices, "co_run": {"slice_s": slice_s, "wake_run_s": wake_run_s, "source": "test"}}
    if cores is not None:
        node["cores"] = cores
    return busy_spans(build_platform("laptop-cpu", node=node), starts, work_s, after)


def test_two_ranks_starting_together_on_one_core_end_a_slice_apart():
    # 10 ms each: rank 0 runs 0-4, rank 1 4-8, rank 0 8-12, rank 1 12-16, rank 0 16-18, rank 1 18-20
    spans = _run({0: 0.0, 1: 0.0}, {0: 0.010, 1: 0.010})
    assert spans[0][1] == pytest.approx(0.018)
    assert spans[1][1] == pytest.approx(0.020)
    shared = _run({0: 0.0, 1: 0.0}, {0: 0.010, 1: 0.010}, slice_s=0.0)  # processor sharing: together
    assert shared[0][1] == pytest.approx(0.020) and shared[1][1] == pytest.approx(0.020)


def test_four_ranks_on_two_cores_take_turns_in_pairs():
    # 6 ms each: ranks 0, 1 run 0-4 and 8-10; ranks 2, 3 run 4-8 and 10-12; the cores never idle
    spans = _run({r: 0.0 for r in range(4)}, {r: 0.006 for r in range(4)}, devices=4, cores=2)
    assert [spans[r][1] for r in range(4)] == pytest.approx([0.010, 0.010, 0.012, 0.012])


def test_a_rank_that_starts_work_preempts_the_longest_running_and_keeps_its_core_for_its_wake_run():
    # rank 0 works 10 ms from 0; rank 1 wakes at 2 ms for 3 ms of work and preempts it. It keeps the
    # core through the tick at 4 ms (its wake run lasts to 6 ms), and ends at 5 ms; rank 0 ends at 13 ms
    spans = _run({0: 0.0, 1: 0.002}, {0: 0.010, 1: 0.003}, wake_run_s=0.005)
    assert spans[1][1] == pytest.approx(0.005)
    assert spans[0][1] == pytest.approx(0.013)
    # without a wake run it loses the core at the tick at 4 ms and gets it back at 8 ms
    spans = _run({0: 0.0, 1: 0.002}, {0: 0.010, 1: 0.003})
    assert spans[1][1] == pytest.approx(0.009)
    assert spans[0][1] == pytest.approx(0.013)


def test_a_rank_that_ends_its_work_hands_its_core_over_at_once():
    # rank 0 has 1 ms of work: at 1 ms rank 1 runs, not at the tick
    spans = _run({0: 0.0, 1: 0.0}, {0: 0.001, 1: 0.002})
    assert spans[0][1] == pytest.approx(0.001) and spans[1][1] == pytest.approx(0.003)
    # work right after work (no wait between) runs on in the rank's slice: rank 1 waits until 2 ms
    chained = _run({0: 0.0, 1: 0.0}, {0: 0.001, 1: 0.002}, after={0: 0.001})
    assert chained[0][1] == pytest.approx(0.002) and chained[1][1] == pytest.approx(0.004)
    # ... and is switched out at the tick like any other: rank 0 runs 0-4 ms, rank 1 4-6 ms, rank 0 6-7 ms
    chained = _run({0: 0.0, 1: 0.0}, {0: 0.003, 1: 0.002}, after={0: 0.002})
    assert chained[1][1] == pytest.approx(0.006) and chained[0][1] == pytest.approx(0.007)


def test_ranks_with_cores_of_their_own_or_as_many_cores_as_ranks_never_take_turns():
    own = _run({0: 0.0, 1: 0.0}, {0: 0.010, 1: 0.010}, cores=None)
    assert own[0][1] == pytest.approx(0.010) and own[1][1] == pytest.approx(0.010)
    enough = _run({0: 0.0, 1: 0.0}, {0: 0.010, 1: 0.010}, cores=2)
    assert enough[0][1] == pytest.approx(0.010) and enough[1][1] == pytest.approx(0.010)


def test_a_slice_is_checked():
    from pydantic import ValidationError

    from simdist.platform.spec import CoRunSpec

    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        CoRunSpec(slice_s=-1e-3, source="x")
    with pytest.raises(ValidationError, match="less than or equal to 1"):
        CoRunSpec(slice_s=2.0, source="x")
    assert CoRunSpec(source="x").slice_s == 0.0


def test_the_slice_is_the_median_mean_run_of_the_configurations_with_more_ranks_than_cores():
    from simdist.calibrate.time_slice import mean_run_s, time_slice_fields

    rows = [{"ranks": 1, "cores": 1, "mean_run_s": 0.5}, {"ranks": 2, "cores": 2, "mean_run_s": 0.3},
            {"ranks": 2, "cores": 1, "mean_run_s": 0.004}, {"ranks": 4, "cores": 1, "mean_run_s": 0.0039},
            {"ranks": 4, "cores": 2, "mean_run_s": 0.0041}]
    fields = time_slice_fields(rows)
    assert fields["slice_s"] == 0.004 and len(fields["slice_runs"]) == 3  # own cores: not the scheduler's slice
    kept = time_slice_fields([{"ranks": 2, "cores": 2, "mean_run_s": 0.3}, {"ranks": 2, "cores": 1, "mean_run_s": None}])
    assert kept["slice_s"] == 0.0 and "not measured" in kept["slice_method"]
    assert mean_run_s((1_000_000, 10), (9_000_000, 12)) == pytest.approx(0.004)
    assert mean_run_s((1, 10), (5, 10)) is None and mean_run_s(None, (5, 11)) is None


def test_a_ranks_own_runs_are_counted_by_the_kernel():
    from simdist.calibrate.time_slice import schedstat

    reading = schedstat()
    if reading is None:
        pytest.skip("no /proc/self/schedstat here")
    later = schedstat()
    assert later[0] >= reading[0] > 0 and later[1] >= reading[1] >= 1


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(1, 30)), min_size=2, max_size=5),
       st.sampled_from([0.0, 0.001]))
def test_one_core_is_never_idle_while_a_rank_has_work(jobs, wake_run_s):
    # starts and works in 0.5 ms units: whatever the turns, a work-conserving core ends the last
    # piece when a single queue would, and no rank ends before its own work could
    starts = {rank: start * 5e-4 for rank, (start, _) in enumerate(jobs)}
    works = {rank: work * 5e-4 for rank, (_, work) in enumerate(jobs)}
    spans = _run(starts, works, devices=len(jobs), wake_run_s=wake_run_s)
    busy_until = 0.0
    for rank in sorted(starts, key=lambda r: starts[r]):
        busy_until = max(busy_until, starts[rank]) + works[rank]
    assert max(end for _, end in spans.values()) == pytest.approx(busy_until, abs=1e-8)
    assert all(spans[r][1] >= starts[r] + works[r] - 1e-9 for r in starts)


def test_a_part_of_a_core_counts_as_one_so_none_of_the_pool_idles_while_ranks_queue():
    # 1.5 cores, three ranks of 3 ms each: two run at 0.75 core each (not one at a whole core, half a
    # core idle) and are done at 4 ms; then the third runs alone, at most one core: 3 ms more
    spans = _run({r: 0.0 for r in range(3)}, {r: 0.003 for r in range(3)}, devices=3, cores=1.5)
    assert sorted(end for _, end in spans.values()) == pytest.approx([0.004, 0.004, 0.007])


def test_work_a_rank_starts_beside_its_own_runs_and_waits_with_it():
    # rank 0 starts 10 ms of work at 0 and 2 ms more at 1 ms, without waiting for the first; rank 1 has
    # 10 ms from 0. Rank 0 holds the core to the tick at 4 ms (1 ms of the long piece alone, then the
    # two share its core: 1.5 ms each), rank 1 runs 4-8 ms, rank 0 8-12 (the short piece's last 0.5 ms
    # at half speed, to 9 ms; the long one has 4 ms left), rank 1 12-16, rank 0 16-20, rank 1 20-22
    world = build_world(2, platform=build_platform("laptop-cpu", node={
        "devices": 2, "cores": 1, "co_run": {"slice_s": SLICE, "wake_run_s": 0.0, "source": "test"}}))
    ends = {}

    def rank0():
        first = world.busy(0, 0.010, "update")
        yield world.env.timeout(0.001)
        second = world.busy(0, 0.002, "update")
        yield second.event
        ends["0 short"] = world.env.now
        yield first.event
        ends["0 long"] = world.env.now

    def rank1():
        yield world.busy(1, 0.010, "update").event
        ends["1"] = world.env.now

    world.env.process(rank0())
    world.env.process(rank1())
    world.env.run(until=1.0)  # a rank stuck paused would leave its ends missing, not hang the test
    assert ends == pytest.approx({"0 short": 0.009, "0 long": 0.020, "1": 0.022})
