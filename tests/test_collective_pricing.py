"""Collective prices from measured tables and LogGP per-message costs, against hand-computed values."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from simdist.platform.cost_spec import CollectiveCostSpec, CostTableSpec, MessageCostSpec, table_row_problem
from simdist.runtime.collective_pricing import CollectivePricer, ScheduleShape, TableModel, schedule_shape
from simdist.training.replica import PhantomTensor

from conftest import build_platform, build_world

KIB, MIB = 1024, 1024 * 1024


def _table(rows, ranks=2, **fields) -> CostTableSpec:
    return CostTableSpec(op="allreduce", ranks=ranks, source="hand-made", rows=rows, **fields)


def _ring_rows(n: int, step_latency_s: float, bandwidth_Bps: float, sizes) -> list[list[float]]:
    """Times of an exact ring allreduce: 2(n-1) steps of latency, 2(n-1)/n S of bytes."""
    return [[s, 2 * (n - 1) * step_latency_s + 2 * (n - 1) / n * s / bandwidth_Bps] for s in sizes]


SIZES = [KIB * 4**k for k in range(6)]  # 1 KiB .. 1 MiB


# -- the table itself -----------------------------------------------------------------------

def test_inside_the_table_prices_interpolate_log_log():
    model = TableModel(_table([[1 * KIB, 10e-6], [4 * KIB, 40e-6], [16 * KIB, 80e-6]]))
    assert model.price(2 * KIB) == (pytest.approx(20e-6, rel=1e-12), "table")  # t ∝ S between 1 and 4 KiB
    assert model.price(8 * KIB)[0] == pytest.approx(40e-6 * math.sqrt(2), rel=1e-12)  # t ∝ S^0.5 above
    assert model.price(4 * KIB)[0] == pytest.approx(40e-6, rel=1e-12)


def test_outside_the_table_the_fitted_alpha_beta_model_extrapolates():
    alpha, beta = 5e-6, 1e9
    model = TableModel(_table(_ring_rows(2, alpha, beta, SIZES)))
    seconds, basis = model.price(4 * MIB)
    assert basis == "table, size extrapolated"
    assert seconds == pytest.approx(2 * alpha + 4 * MIB / beta, rel=1e-6)
    assert model.price(16)[0] == pytest.approx(2 * alpha + 16 / beta, rel=1e-6)


def test_a_protocol_switch_is_a_regime_of_its_own():
    small = [[s, 2e-6 + s / 1e9] for s in (256, 512, KIB, 2 * KIB, 4 * KIB, 8 * KIB)]
    large = [[s, 20e-6 + s / 4e9] for s in (64 * KIB, 128 * KIB, 256 * KIB, 512 * KIB, MIB, 2 * MIB)]
    model = TableModel(CostTableSpec(op="broadcast", ranks=2, source="hand-made", rows=small + large))
    # broadcast over 2 ranks: one step, S bytes; far above the table, the large-message line holds
    assert model.price(64 * MIB)[0] == pytest.approx(20e-6 + 64 * MIB / 4e9, rel=1e-6)
    # far below, the small-message line (its latency floor)
    assert model.price(8)[0] == pytest.approx(2e-6 + 8 / 1e9, rel=1e-6)
    regimes = model.fit_.regimes_
    assert len(regimes) == 2 and regimes[1].from_bytes == 64 * KIB


def test_another_communicator_size_uses_the_fitted_per_step_latency_and_bandwidth():
    alpha, beta = 3e-6, 2e9
    pricer = CollectivePricer(CollectiveCostSpec(tables=[_table(_ring_rows(4, alpha, beta, SIZES), ranks=4)]))
    price = pricer.price("allreduce", "ring", 16, 1, 256 * KIB)
    assert price.basis == "from the 4-rank table"
    assert price.seconds == pytest.approx(30 * alpha + 30 / 16 * 256 * KIB / beta, rel=1e-6)


def test_gamma_adds_the_reduction_of_the_schedule():
    alpha, beta, reduce_Bps = 3e-6, 2e9, 1e9
    rows = [[s, 6 * alpha + 1.5 * s / beta + 0.75 * s / reduce_Bps] for s in SIZES]  # ring of 4, with gamma
    spec = CollectiveCostSpec(tables=[_table(rows, ranks=4)], reduce_bandwidth=reduce_Bps, reduce_source="hand-made")
    price = CollectivePricer(spec).price("allreduce", "ring", 8, 1, MIB)
    assert price.seconds == pytest.approx(14 * alpha + 1.75 * MIB / beta + 0.875 * MIB / reduce_Bps, rel=1e-6)


def test_schedule_shapes_follow_the_registered_plans():
    assert schedule_shape("allreduce", "ring", 8) == ScheduleShape(14, 1.75, 0.875)
    assert schedule_shape("allreduce", "tree", 8) == ScheduleShape(6, 6.0, 5.0)  # parents sum two children per level
    assert schedule_shape("broadcast", "binomial", 8) == ScheduleShape(3, 3.0, 0.0)
    assert schedule_shape("allgather", "ring", 8) == ScheduleShape(7, 7.0, 0.0)


def test_a_table_prices_only_groups_of_its_kind():
    one_node = _table(_ring_rows(2, 1e-6, 1e10, SIZES), nodes=1)
    ring_only = CostTableSpec(op="allreduce", ranks=2, nodes=2, algorithm="ring", source="x",
                              rows=_ring_rows(2, 1e-6, 1e9, SIZES))
    pricer = CollectivePricer(CollectiveCostSpec(tables=[one_node, ring_only]))
    assert pricer.price("allreduce", "ring", 2, 1, KIB).table == 0
    assert pricer.price("allreduce", "ring", 2, 2, KIB).table == 1
    assert pricer.price("allreduce", "tree", 2, 2, KIB) is None  # measured as a ring, called as a tree
    assert pricer.price("broadcast", None, 2, 1, KIB) is None


def test_every_priced_call_is_on_the_record():
    pricer = CollectivePricer(CollectiveCostSpec(tables=[_table(_ring_rows(2, 1e-6, 1e9, SIZES))]))
    for nbytes in (2 * KIB, 3 * KIB, 8 * MIB):
        pricer.price("allreduce", "ring", 2, 1, nbytes)
    pricer.price("allreduce", "ring", 4, 1, KIB)
    record = {(e["ranks"], e["basis"]): e for e in pricer.provenance()}
    assert record[(2, "table")]["calls"] == 2 and record[(2, "table")]["max_bytes"] == 3 * KIB
    assert record[(2, "table, size extrapolated")]["min_bytes"] == 8 * MIB
    assert record[(4, "from the 2-rank table")]["calls"] == 1


# -- bad tables -----------------------------------------------------------------------------

@pytest.mark.parametrize("rows, needle", [
    ([[1024, 1e-5], [1024, 2e-5]], "rows[1]: size 1024 B repeats the row before"),
    ([[2048, 1e-5], [1024, 2e-5]], "rows[1]: size 1024 B is smaller than the row before"),
    ([[1024, 1e-5], [2048, -1e-5]], "a time must be a finite non-negative number"),
    ([[1024, 1e-5], [2048, float("nan")]], "a time must be a finite non-negative number"),
    ([[1024, 1e-5], [2048, 0]], "rows[1]: time must be finite and greater than zero"),
    ([[0, 1e-5], [2048, 1e-5]], "rows[0]: size must be a finite number of bytes >= 1"),
    ([[1024, 1e-5]], "at least 2"),
    ([[1024, 1e-5, 3], [2048, 1e-5]], "a row is [size, time]"),
])
def test_bad_rows_are_refused_naming_the_row(rows, needle):
    with pytest.raises(ValidationError) as caught:
        _table(rows)
    assert needle in str(caught.value)


def test_row_problems_are_shared_with_the_parsers():
    assert table_row_problem([1.0, 2.0], [1e-6, 0.0]) == (1, "time", "time must be finite and greater than zero, got 0.0")
    assert table_row_problem([1.0, 2.0], [1e-6, 2e-6]) is None


def test_a_duplicate_table_and_an_unsourced_reduction_are_refused():
    table = _table(_ring_rows(2, 1e-6, 1e9, SIZES))
    with pytest.raises(ValidationError, match="same collective as tables\\[0\\]"):
        CollectiveCostSpec(tables=[table, table])
    with pytest.raises(ValidationError, match="reduce_source"):
        CollectiveCostSpec(reduce_bandwidth="1GBps")
    with pytest.raises(ValidationError, match="unknown collective"):
        CostTableSpec(op="alltoall", ranks=2, source="x", rows=[[1, 1e-6], [2, 1e-6]])
    with pytest.raises(ValidationError, match="source"):
        MessageCostSpec(send_overhead="1us")


# -- in the simulation ----------------------------------------------------------------------

def _allreduce_s(world, n: int, nbytes: int) -> float:
    group = world.runtime(0).group(range(n))
    ends = {}

    def member(rt):
        yield rt.allreduce(group, PhantomTensor(nbytes // 4))
        ends[rt.rank] = rt.now()

    for rank in range(n):
        world.spawn(rank, member(world.runtime(rank)))
    world.env.run()
    return max(ends.values())


def _world(fidelity="analytic", **platform_fields):
    return build_world(2, fidelity=fidelity, platform=build_platform("laptop-cpu", node={"devices": 2},
                                                                     **platform_fields))


@pytest.mark.parametrize("fidelity", ["analytic", "flows"])
def test_a_simulated_allreduce_takes_the_table_time_and_is_recorded(fidelity):
    rows = [[KIB, 10e-6], [4 * KIB, 40e-6], [MIB, 2e-3]]
    world = _world(fidelity, collectives={"tables": [{"op": "allreduce", "ranks": 2, "source": "t", "rows": rows}]})
    assert _allreduce_s(world, 2, 2 * KIB) == pytest.approx(20e-6, rel=1e-9)
    assert world.pricer.provenance()[0]["basis"] == "table"
    # the ring's bytes still crossed the links: two steps of 1 KiB from each rank
    assert dict(world.network.sent_bytes) == {(0, 1): 2 * KIB, (1, 0): 2 * KIB}


def test_traffic_beside_a_priced_collective_stretches_it():
    rows = [[KIB, 10e-6], [MIB, 2e-3], [16 * MIB, 40e-3]]
    platform = dict(collectives={"tables": [{"op": "allreduce", "ranks": 2, "source": "t", "rows": rows}]},
                    node={"devices": 3})
    alone = build_world(3, platform=build_platform("laptop-cpu", **platform))
    alone_s = _allreduce_s(alone, 2, 4 * MIB)
    busy = build_world(3, platform=build_platform("laptop-cpu", **platform))
    busy.spawn(2, (lambda rt: (yield rt.send(1, PhantomTensor(MIB))))(busy.runtime(2)))  # 4 MiB into rank 1
    # rank 0's 4 MiB to rank 1 shares rank 1's port with it: it moves at half rate all along,
    # 4 MiB / bandwidth later than alone; the table time is stretched by just that
    shm_Bps = 13.8e9
    assert _allreduce_s(busy, 2, 4 * MIB) - alone_s == pytest.approx(4 * MIB / shm_Bps, rel=1e-3)


@pytest.mark.parametrize("fidelity", ["analytic", "flows"])
def test_without_a_table_steps_pay_loggp_overheads_and_the_reduction(fidelity):
    plain = _allreduce_s(_world(fidelity), 2, 4 * MIB)
    costs = dict(messages={"send_overhead": "3us", "recv_overhead": "2us", "eager_limit": "64KiB",
                           "rendezvous_latency": "7us", "source": "hand-made"},
                 collectives={"reduce_bandwidth": "1GBps", "reduce_source": "hand-made"})
    charged = _allreduce_s(_world(fidelity, **costs), 2, 4 * MIB)
    # ring of 2: two steps of 2 MiB, each paying o_s + o_r + handshake; the first reduces 2 MiB, at the
    # measured 1 GB/s instead of the cpu's estimated rate (memory bandwidth / 3)
    gamma_s = 2 * MIB / 1e9 - 2 * MIB / (19e9 / 3)
    assert charged - plain == pytest.approx(2 * (3e-6 + 2e-6 + 7e-6) + gamma_s, rel=1e-9)


def _arrivals(world, messages: int) -> list[float]:
    arrivals = []

    def sender(rt):
        for _ in range(messages):
            rt.send(1, PhantomTensor(1))
        yield rt.compute(None, _Batch())

    def receiver(rt):
        for _ in range(messages):
            yield rt.recv(0)
            arrivals.append(rt.now())

    world.spawn(0, sender(world.runtime(0)))
    world.spawn(1, receiver(world.runtime(1)))
    world.env.run()
    return arrivals


def test_a_message_pays_loggp_costs_and_the_sender_its_cpu():
    costs = {"send_overhead": "4us", "recv_overhead": "3us", "gap": "10us", "source": "hand-made"}
    plain = _arrivals(_world(), 1)
    world = _world(messages=costs)
    first, second = _arrivals(world, 2)
    assert first - plain[0] == pytest.approx(4e-6 + 3e-6, rel=1e-9)  # o_s + the wire + o_r
    assert second - first == pytest.approx(10e-6, rel=1e-9)  # injected one gap later
    # the two sends' CPU time comes before the sender's compute
    spans = [s for s in world.recorder.spans if s.rank == 0 and s.name == "message overhead"]
    assert len(spans) == 1 and spans[0].end_s - spans[0].start_s == pytest.approx(8e-6)


class _Batch:
    size = 4


def test_a_table_naming_an_unknown_algorithm_is_refused_at_load():
    import sys
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from helpers import tiny_scenario
    from simdist.errors import InputError
    from simdist.scenario import scenario_from_dict

    table = {"op": "allreduce", "ranks": 2, "source": "x", "algorithm": "rign", "rows": [[1024, 1e-5], [2048, 2e-5]]}
    data = tiny_scenario(platform={"preset": "laptop-cpu", "node": {"devices": 2}, "collectives": {"tables": [table]}})
    with pytest.raises(InputError, match="unknown collective algorithm 'rign'; known: halving_doubling") as caught:
        scenario_from_dict(data, source="s.yaml")
    assert "platform.collectives.tables[0].algorithm" in str(caught.value)


def test_send_overhead_before_busy_work_is_shown_as_message_overhead():
    world = _world(messages={"send_overhead": "5us", "source": "hand-made"})

    def server(rt):
        rt.send(1, PhantomTensor(1))
        yield rt.busy(1e-3, "apply")

    world.spawn(0, server(world.runtime(0)))
    world.spawn(1, (lambda rt: (yield rt.recv(0)))(world.runtime(1)))
    world.env.run()
    spans = [(s.name, s.start_s, s.end_s) for s in world.recorder.spans if s.rank == 0]
    assert spans == [("message overhead", 0.0, pytest.approx(5e-6)), ("apply", pytest.approx(5e-6),
                                                                      pytest.approx(1e-3 + 5e-6))]


@pytest.mark.parametrize("cores", [None, 2])
def test_send_overhead_on_shared_cores_is_its_own_span_before_busy_work_and_compute(cores):
    """With or without a shared core pool, the sends' CPU time is a ``message overhead`` span
    (the ledger's comm_cpu) ahead of the work it delays, never folded into that work's span."""
    node = {"devices": 2, **({"cores": cores} if cores else {})}
    world = build_world(2, platform=build_platform("laptop-cpu", node=node,
                                                   messages={"send_overhead": "5us", "source": "hand-made"}))

    def sender(rt):
        rt.send(1, PhantomTensor(1))
        yield rt.busy(1e-3, "apply")
        rt.send(1, PhantomTensor(1))
        rt.send(1, PhantomTensor(1))
        yield rt.compute(None, _Batch())

    world.spawn(0, sender(world.runtime(0)))
    world.spawn(1, (lambda rt: (yield from (rt.recv(0) for _ in range(3))))(world.runtime(1)))
    world.env.run()
    spans = [(s.kind, s.name, s.end_s - s.start_s) for s in world.recorder.spans if s.rank == 0]
    assert [(kind, name) for kind, name, _ in spans] == [
        ("comm", "message overhead"), ("compute", "apply"), ("comm", "message overhead"),
        ("compute", "forward/backward")]
    assert [d for _, _, d in spans][:3] == [pytest.approx(5e-6), pytest.approx(1e-3), pytest.approx(10e-6)]
