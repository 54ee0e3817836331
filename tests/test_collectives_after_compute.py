"""Collectives every member calls right after a forward/backward: the platform's
``collectives.tables`` marked ``after_compute`` (docs/network.md), as ``calibrate network
--after-compute`` times them (:func:`simdist.calibrate.sweep_timing.after_step_sweep`) and as
the simulator prices them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import simdist
from simdist.calibrate.cost_tables import after_compute_table_from_sweep, collectives_section
from simdist.calibrate.sweep_timing import after_step_sweep
from simdist.errors import InputError
from simdist.platform.cost_spec import CollectiveCostSpec, CostTableSpec
from simdist.runtime.collective_pricing import CollectivePricer
from simdist.training.replica import PhantomTensor

from conftest import build_platform, build_world
from helpers import tiny_scenario

KIB = 1024
WARM = [[KIB, 100e-6], [64 * KIB, 1e-3]]
AFTER = [[KIB, 400e-6], [64 * KIB, 2e-3]]
MESSAGES = {"send_overhead": "10us", "send_overhead_after_compute": "110us", "source": "hand-made"}


def _tables(after=True, ranks=2):
    tables = [{"op": "allreduce", "ranks": ranks, "source": "warm", "rows": WARM}]
    if after:
        tables.append({"op": "allreduce", "ranks": ranks, "source": "after a step", "rows": AFTER,
                       "after_compute": True})
    return {"tables": tables}


# -- the table and its choice ---------------------------------------------------------------

def test_a_table_after_compute_and_a_warm_one_of_the_same_collective_may_stand_side_by_side():
    spec = CollectiveCostSpec.model_validate(_tables())
    assert [t.after_compute for t in spec.tables] == [False, True]
    twice = _tables()["tables"] + [_tables()["tables"][1]]
    with pytest.raises(ValidationError, match="after_compute True"):
        CollectiveCostSpec.model_validate({"tables": twice})
    with pytest.raises(ValidationError, match="after_compute"):
        CostTableSpec.model_validate({**_tables()["tables"][1], "after_compute": "sometimes"})


def test_a_call_after_compute_is_priced_from_the_table_timed_so_and_any_other_from_the_warm_one():
    pricer = CollectivePricer(CollectiveCostSpec.model_validate(_tables()))
    assert pricer.price("allreduce", "ring", 2, 1, KIB).seconds == pytest.approx(100e-6)
    after = pricer.price("allreduce", "ring", 2, 1, KIB, after_compute=True)
    assert after.seconds == pytest.approx(400e-6) and after.table == 1
    entries = pricer.provenance()
    assert sorted(e["after_compute"] for e in entries) == [False, True]
    assert next(e for e in entries if e["after_compute"])["source"] == "after a step"


def test_without_a_table_after_compute_a_call_after_compute_takes_the_warm_price():
    pricer = CollectivePricer(CollectiveCostSpec.model_validate(_tables(after=False)))
    assert pricer.price("allreduce", "ring", 2, 1, KIB, after_compute=True).seconds == pytest.approx(100e-6)
    assert [e["after_compute"] for e in pricer.provenance()] == [False]


# -- in the simulation ----------------------------------------------------------------------

def _world(after=True, messages=True):
    fields = {"collectives": _tables(after)}
    if messages:
        fields["messages"] = MESSAGES
    return build_world(2, platform=build_platform("laptop-cpu", node={"devices": 2}, **fields))


class _Batch:
    size = 4


def _comm_spans(world, compute_first: bool, calls: int = 1) -> list[float]:
    """Durations of rank 0's allreduce spans: ``calls`` allreduces of 1 KiB in a row, after a
    forward/backward on both ranks where ``compute_first``."""
    group = world.runtime(0).group(range(2))

    def member(rt):
        if compute_first:
            yield rt.compute(None, _Batch())
        for _ in range(calls):
            yield rt.allreduce(group, PhantomTensor(KIB // 4))

    for rank in range(2):
        world.spawn(rank, member(world.runtime(rank)))
    world.env.run()
    return [s.end_s - s.start_s for s in world.recorder.spans if s.rank == 0 and s.name == "allreduce"]


def test_an_allreduce_right_after_compute_costs_the_table_after_compute_less_the_first_call_charged_apart():
    first, second = _comm_spans(_world(), compute_first=True, calls=2)
    # the table's 400 us hold the cold first call, charged apart (110 - 10 us): the data phase is the rest
    assert first == pytest.approx(400e-6 - 100e-6)
    assert second == pytest.approx(100e-6)  # the next call is warm: the warm table


def test_the_data_phase_after_compute_is_never_below_the_warm_table():
    world = build_world(2, platform=build_platform("laptop-cpu", node={"devices": 2}, collectives=_tables(),
                                                   messages={**MESSAGES, "send_overhead_after_compute": "360us"}))
    # 400 us less a first call of 350 us would leave 50 us: the warm table's 100 us instead
    assert _comm_spans(world, compute_first=True) == [pytest.approx(100e-6)]
    assert [e["after_compute"] for e in world.pricer.provenance()] == [True]  # the warm price was only compared


def test_without_message_costs_the_table_after_compute_is_the_whole_collective():
    assert _comm_spans(_world(messages=False), compute_first=True) == [pytest.approx(400e-6)]


def test_a_collective_not_every_member_calls_after_compute_is_warm():
    world = _world()
    group = world.runtime(0).group(range(2))

    def computes(rt):
        yield rt.compute(None, _Batch())
        yield rt.allreduce(group, PhantomTensor(KIB // 4))

    def does_not(rt):
        yield rt.busy(5e-3, "update")
        yield rt.allreduce(group, PhantomTensor(KIB // 4))

    world.spawn(0, computes(world.runtime(0)))
    world.spawn(1, does_not(world.runtime(1)))
    world.env.run()
    data = [s for s in world.recorder.spans if s.rank == 1 and s.name == "allreduce"]
    assert data[-1].end_s - data[-1].start_s == pytest.approx(100e-6)


def test_without_a_table_after_compute_nothing_changes():
    assert _comm_spans(_world(after=False), compute_first=True) == [pytest.approx(100e-6)]


def test_a_table_after_compute_runs_one_process_per_rank_and_is_in_the_manifest():
    timing_only = {"model": "mlp", "dataset": {"name": "synthetic", "samples": 200, "features": 4, "classes": 2},
                   "batch_size": 8, "timing_only": True}
    data = tiny_scenario(platform={"preset": "laptop-cpu", "node": {"devices": 4}, "collectives": _tables(ranks=4)},
                         workload=timing_only, stop={"steps": 3})
    manifest = simdist.run(data).manifest
    assert manifest["execution"]["mode"] == "per_rank" and "after_compute" in manifest["execution"]["why"]
    # sync SGD allreduces right after each forward/backward: every call priced from the table timed so
    priced = manifest["collective_pricing"]
    assert [(e["after_compute"], e["source"]) for e in priced] == [(True, "after a step")] and priced[0]["calls"] > 0


# -- the calibration ------------------------------------------------------------------------

def test_the_sweep_steps_enters_together_then_times_one_call_per_size_round_robin(monkeypatch):
    import simdist.calibrate.sweep_timing as sweep_timing

    events = []
    # perf_counter before and after each call: 4 B takes 4, 6, 5 us and 16 B 16, 20, 18 us
    times = iter([0.0, 4e-6, 0.0, 16e-6, 0.0, 6e-6, 0.0, 20e-6, 0.0, 5e-6, 0.0, 18e-6])
    monkeypatch.setattr(sweep_timing.time, "perf_counter", lambda: next(times))
    rows = after_step_sweep([4, 16], events.append, lambda: events.append("step"), lambda: events.append("barrier"),
                            lambda s: 2 * s, rounds=3)  # the slowest rank: twice this one
    assert events == ["step", "barrier", 4, "step", "barrier", 16] * 3
    assert rows == [{"size_bytes": 4, "median_s": pytest.approx(10e-6), "min_s": pytest.approx(8e-6),
                     "max_s": pytest.approx(12e-6), "rounds": 3},
                    {"size_bytes": 16, "median_s": pytest.approx(36e-6), "min_s": pytest.approx(32e-6),
                     "max_s": pytest.approx(40e-6), "rounds": 3}]


def _document(rows):
    return {"ranks": 4, "hosts": ["h"] * 4, "path": "runtime", "mpi_library": "MPICH Version: 5",
            "allreduce_after_compute": {"rows": rows, "after_compute": "sync-4", "batch_size": 64}}


def test_a_sweep_after_compute_becomes_a_table_marked_so_that_names_the_step():
    rows = [{"size_bytes": s, "median_s": 1e-4 + s / 1e9, "rounds": 9} for s in (4, 16, 64)]
    table = after_compute_table_from_sweep(_document(rows), "simdist calibrate network")
    assert table["after_compute"] is True and table["ranks"] == 4 and table["nodes"] == 1
    assert [r[0] for r in table["rows"]] == [4, 16, 64]
    assert "runtime allreduce" in table["source"] and "sync-4 (batch 64)" in table["source"]
    assert "entering together" in table["source"] and "9 rounds" in table["source"]
    warm = {"op": "allreduce", "ranks": 4, "nodes": 1, "source": "warm", "rows": [[4, 1e-4], [64, 2e-4]]}
    assert len(collectives_section([warm, table])["tables"]) == 2  # side by side
    with pytest.raises(InputError, match="two inputs measure allreduce on 4 ranks"):
        collectives_section([table, dict(table, source="again")])


def test_no_table_after_compute_without_the_sweep_or_with_one_size():
    assert after_compute_table_from_sweep({"ranks": 4, "hosts": ["h"] * 4}, "cmd") is None
    one = [{"size_bytes": 4, "median_s": 1e-4, "rounds": 9}]
    assert after_compute_table_from_sweep(_document(one), "cmd") is None


def test_the_mpi_sweep_times_after_a_step_only_with_a_scenario():
    import argparse

    from simdist.calibrate.mpi_worker import _allreduce_after_step

    class _Comm:
        def Get_size(self):
            return 2

    called = []
    timed = lambda sizes, step, rounds: called.append((tuple(sizes), rounds)) or [{"size_bytes": 4}]  # noqa: E731
    cold = (lambda: None, {"after_compute": "s", "batch_size": 8})
    plain = argparse.Namespace(after_compute=None, no_allreduce=False)
    sizes = [0, 1, 1 << 20]
    assert _allreduce_after_step(timed, _Comm(), plain, sizes, cold) is None and called == []
    scenario = argparse.Namespace(after_compute="s.yaml", no_allreduce=False)
    assert _allreduce_after_step(timed, _Comm(), scenario, [0, 8], cold) is None  # one size of 4**k: no table
    document = _allreduce_after_step(timed, _Comm(), scenario, sizes, cold)
    assert document == {"rows": [{"size_bytes": 4}], "after_compute": "s", "batch_size": 8}
    assert called == [((4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1 << 20), 9)]  # powers of 4 to the largest


def test_calibrate_network_prints_the_table_after_a_step_against_the_warm_one():
    from simdist.calibrate.network import after_step_lines

    overlay = {"collectives": _tables()}
    assert after_step_lines(overlay) == ["allreduce right after a training step against without one: "
                                         "1KiB 400us / 100us (x4.00), 64KiB 2ms / 1ms (x2.00)"]
    assert after_step_lines({"collectives": _tables(after=False)}) == [] and after_step_lines({}) == []


def test_back_to_back_collectives_are_each_timed_from_a_barrier_the_ranks_leave_together(monkeypatch):
    import simdist.calibrate.sweep_timing as sweep_timing

    events = []
    times = iter([1.0, 1.5, 7.0, 7.25, 9.0, 10.0])  # perf_counter around each of three calls
    monkeypatch.setattr(sweep_timing.time, "perf_counter", lambda: next(times))
    spent = sweep_timing.entering_together(lambda: events.append("call"), lambda: events.append("barrier"), 3)
    assert events == ["barrier", "call"] * 3
    assert spent == pytest.approx(0.5 + 0.25 + 1.0)  # the time between calls (the barriers) is not counted
