"""Collective schedules: every contribution reaches every rank, bytes and costs as published.

Schedules are checked by replaying their transfers as information flow (what each rank
knows, sent as it was at the start of the step); the simulator runs them for real, in both
fidelities, on platforms where nothing else competes for the links.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import Sized, build_world
from simdist.errors import InputError
from simdist.runtime.collectives import (
    COLLECTIVES,
    allgather_plan,
    allreduce_plan,
    barrier_plan,
    broadcast_plan,
)
from simdist.training.replica import PhantomTensor

SIZES = [2, 3, 4, 5, 8]
ALLREDUCES = ["ring", "tree", "halving_doubling", "hierarchical", "recursive_doubling", "mpich"]
SHM_LATENCY_S, SHM_BANDWIDTH_BPS = 0.11e-6, 13.8e9
CPU_REDUCE_BPS = 19e9 / 3  # the cpu kind's memory bandwidth over the 3 bytes a += b moves per byte summed
NODE_LAYOUTS = {"one node": lambda r: 0, "pairs": lambda r: r // 2, "triples": lambda r: r // 3,
                "one per node": lambda r: r}


def replay(plan, ranks, initial=None):
    """What every rank knows after the plan: steps are concurrent, phases and steps in order."""
    knows = {r: set(initial[r]) if initial else {r} for r in ranks}
    for phase in plan:
        for step in phase:
            before = {r: set(k) for r, k in knows.items()}
            for t in step:
                assert t.src in knows and t.dst in knows and t.src != t.dst, t
                knows[t.dst] |= before[t.src]
    return knows


def transfers(plan):
    return [t for phase in plan for step in phase for t in step]


def test_every_allreduce_algorithm_is_registered():
    assert set(ALLREDUCES) <= set(COLLECTIVES.names())
    with pytest.raises(InputError, match="unknown collective 'rign'; known: "):
        allreduce_plan("rign", [0, 1], 8.0, lambda r: 0)


@pytest.mark.parametrize("layout", sorted(NODE_LAYOUTS))
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("algorithm", ALLREDUCES)
def test_allreduce_schedules_bring_every_contribution_to_every_rank(algorithm, n, layout):
    ranks = [10 + 3 * i for i in range(n)]  # not 0..n-1: schedules must use the ranks they are given
    node_of = lambda r: NODE_LAYOUTS[layout]((r - 10) // 3)  # noqa: E731
    plan = allreduce_plan(algorithm, ranks, 1000.0, node_of)
    assert replay(plan, ranks) == {r: set(ranks) for r in ranks}


@pytest.mark.parametrize("algorithm", ALLREDUCES)
def test_a_single_rank_allreduce_moves_nothing(algorithm):
    assert allreduce_plan(algorithm, [7], 1000.0, lambda r: 0) == ()


@pytest.mark.parametrize("n", SIZES)
def test_ring_sends_and_receives_2_n_minus_1_over_n_of_the_data_per_rank(n):
    S = 1200.0
    plan = allreduce_plan("ring", list(range(n)), S, lambda r: 0)
    assert sum(len(phase) for phase in plan) == 2 * (n - 1)
    for r in range(n):
        assert sum(t.nbytes for t in transfers(plan) if t.src == r) == pytest.approx(2 * (n - 1) / n * S)
        assert sum(t.nbytes for t in transfers(plan) if t.dst == r) == pytest.approx(2 * (n - 1) / n * S)
        assert {t.dst for t in transfers(plan) if t.src == r} == {(r + 1) % n}  # neighbours only


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_halving_doubling_moves_the_ring_volume_in_2_log2_n_steps(n):
    S = 1024.0
    plan = allreduce_plan("halving_doubling", list(range(n)), S, lambda r: 0)
    assert sum(len(phase) for phase in plan) == 2 * int(math.log2(n))
    for r in range(n):
        assert sum(t.nbytes for t in transfers(plan) if t.src == r) == pytest.approx(2 * (n - 1) / n * S)


@pytest.mark.parametrize("n", SIZES)
def test_tree_reduces_to_the_first_rank_and_broadcasts_back(n):
    ranks = list(range(n))
    plan = allreduce_plan("tree", ranks, 64.0, lambda r: 0)
    steps = [step for phase in plan for step in phase]
    depth = int(math.floor(math.log2(n)))
    assert len(steps) == 2 * depth
    up, down = steps[:depth], steps[depth:]
    assert replay((tuple(up),), ranks)[0] == set(ranks)  # the root holds the full sum half-way
    assert all(t.nbytes == 64.0 for t in transfers(plan))
    assert sorted((t.src, t.dst) for s in up for t in s) == sorted((t.dst, t.src) for s in down for t in s)


def test_hierarchical_crosses_nodes_only_between_leaders():
    node_of = lambda r: r // 4  # noqa: E731
    plan = allreduce_plan("hierarchical", list(range(12)), 400.0, node_of)
    assert len(plan) == 3  # local reduce, ring among leaders, local broadcast
    cross = [t for t in transfers(plan) if node_of(t.src) != node_of(t.dst)]
    assert {t.src for t in cross} | {t.dst for t in cross} == {0, 4, 8}
    assert transfers((plan[0],)) == [t for t in transfers((plan[0],)) if t.dst in (0, 4, 8)]
    assert all(t.src in (0, 4, 8) for t in transfers((plan[2],)))


@pytest.mark.parametrize("n", [1, *SIZES])
def test_broadcast_plan_reaches_everyone_once_from_the_root(n):
    ranks = list(range(n))
    for root in ranks:
        plan = broadcast_plan(ranks, 10.0, root)
        knows = replay(plan, ranks, {r: ({"root"} if r == root else set()) for r in ranks})
        assert all("root" in k for k in knows.values())
        assert sorted(t.dst for t in transfers(plan)) == [r for r in ranks if r != root]
        assert sum(len(phase) for phase in plan) == math.ceil(math.log2(n))


@pytest.mark.parametrize("n", [1, *SIZES])
def test_allgather_and_barrier_plans_spread_every_rank_to_every_rank(n):
    ranks = list(range(n))
    assert replay(allgather_plan(ranks, 5.0), ranks) == {r: set(ranks) for r in ranks}
    assert replay(barrier_plan(ranks), ranks) == {r: set(ranks) for r in ranks}
    assert all(t.nbytes == 0.0 for t in transfers(barrier_plan(ranks)))
    assert sum(len(phase) for phase in barrier_plan(ranks)) == math.ceil(math.log2(n))


# -- run in the simulator ---------------------------------------------------------------------


def _allreduce_end(world, n, nbytes, algorithm=None):
    group = world.runtime(0).group(range(n))
    ends = {}

    def member(rt):
        yield rt.allreduce(group, PhantomTensor(int(nbytes) // 4), algorithm=algorithm)
        ends[rt.rank] = rt.now()

    for rank in range(n):
        world.spawn(rank, member(world.runtime(rank)))
    world.env.run()
    assert set(ends) == set(range(n))
    return max(ends.values())


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("algorithm", ALLREDUCES)
def test_flows_and_analytic_fidelity_agree_on_an_idle_host(make_world, algorithm, n):
    flows = _allreduce_end(make_world(n, fidelity="flows"), n, 4e6, algorithm)
    analytic = _allreduce_end(make_world(n, fidelity="analytic"), n, 4e6, algorithm)
    assert analytic == pytest.approx(flows, rel=0.01)


@pytest.mark.parametrize("algorithm", ALLREDUCES)
def test_flows_and_analytic_fidelity_agree_on_an_idle_two_node_cluster(make_world, make_platform, algorithm):
    # ring and tree steps mix NVLink (2.5 us, 300 GB/s) and HDR (0.6 us, 25 GB/s) transfers: a step
    # lasts as long as its slowest transfer, latency included, not max latency + max transfer time
    def world(fidelity):
        return make_world(fidelity=fidelity, platform=make_platform("cluster-a100-hdr", nodes=2))

    flows = _allreduce_end(world("flows"), 8, 4e6, algorithm)
    analytic = _allreduce_end(world("analytic"), 8, 4e6, algorithm)
    assert analytic == pytest.approx(flows, rel=0.01)


@pytest.mark.parametrize("fidelity", ["flows", "analytic"])
def test_foreign_traffic_on_the_links_stretches_a_collective(make_world, fidelity):
    alone = _allreduce_end(make_world(3, fidelity=fidelity), 2, 4e6, "ring")
    world = make_world(3, fidelity=fidelity)
    world.spawn(2, (lambda rt: (yield rt.send(1, PhantomTensor(10**6))))(world.runtime(2)))  # into rank 1's port
    contended = _allreduce_end(world, 2, 4e6, "ring")
    assert contended > alone * 1.2
    # the port into rank 1 carried the 4 MB message and two ring steps of half the 4 MB tensor
    port = world.platform.link_by_name["n0.d1.down"].index
    assert world.network.link_bytes[port] == pytest.approx(4e6 + 2 * (4e6 / 2))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 8), nbytes=st.integers(0, 10**8).map(lambda b: 4 * b),
       fidelity=st.sampled_from(["flows", "analytic"]))
def test_ring_never_beats_its_bandwidth_bound(n, nbytes, fidelity):
    end = _allreduce_end(build_world(n, fidelity=fidelity), n, nbytes, "ring")
    assert end >= 2 * (n - 1) / n * nbytes / SHM_BANDWIDTH_BPS * (1 - 1e-9)
    # on idle shared memory the bound is met exactly, plus one latency per step (alpha-beta), plus the
    # reduce-scatter's n-1 sums of a 1/n chunk at the cpu's estimated reduction rate (gamma)
    gamma_s = (n - 1) * nbytes / n / CPU_REDUCE_BPS
    assert end == pytest.approx(2 * (n - 1) * (SHM_LATENCY_S + nbytes / n / SHM_BANDWIDTH_BPS) + gamma_s, rel=1e-9)


def test_allreduce_result_is_the_sum_in_every_rank(make_world, run_world):
    world, got = make_world(3), {}
    group = world.runtime(0).group([0, 1, 2])

    def member(rt):
        got[rt.rank] = yield rt.allreduce(group, torch.tensor([1.0, 10.0]) * (rt.rank + 1))

    run_world(world, {r: member for r in range(3)})
    assert {r: v.tolist() for r, v in got.items()} == {r: [6.0, 60.0] for r in range(3)}


def test_broadcast_delivers_the_roots_tensor(make_world, run_world):
    world, got = make_world(4), {}
    group = world.runtime(0).group([0, 1, 2, 3])

    def member(rt):
        mine = torch.arange(4.0) + 100 if rt.rank == 2 else torch.zeros(4)
        got[rt.rank] = (yield rt.broadcast(group, mine, root=2)), rt.now()

    run_world(world, {r: member for r in range(4)})
    # binomial tree from rank 2: two rounds of one full message each
    expected_s = 2 * (SHM_LATENCY_S + 16 / SHM_BANDWIDTH_BPS)
    for rank in range(4):
        value, when = got[rank]
        assert value.tolist() == [100.0, 101.0, 102.0, 103.0]
        assert when == pytest.approx(expected_s, rel=1e-12)


def test_allgather_returns_tensors_in_group_order(make_world, run_world):
    world, got = make_world(4), {}
    group = world.runtime(0).group([2, 0, 3, 1])

    def member(rt):
        got[rt.rank] = yield rt.allgather(group, torch.full((2,), float(rt.rank)))

    run_world(world, {r: member for r in range(4)})
    for rank in range(4):
        assert [t.tolist() for t in got[rank]] == [[2.0, 2.0], [0.0, 0.0], [3.0, 3.0], [1.0, 1.0]]


def test_barrier_completes_only_after_the_last_member_arrives(make_world, run_world):
    world, got = make_world(3, t0=0.0, t1=1e-3), {}
    group = world.runtime(0).group([0, 1, 2])

    def member(rt):
        yield rt.compute(None, Sized([5, 1, 3][rt.rank]))  # arrive at 5 ms, 1 ms, 3 ms
        arrived = rt.now()
        yield rt.barrier(group)
        got[rt.rank] = (arrived, rt.now())

    run_world(world, {r: member for r in range(3)})
    last = 5e-3
    for rank in range(3):
        arrived, left = got[rank]
        assert left > last
        assert left == pytest.approx(last + 2 * SHM_LATENCY_S, rel=1e-12)  # 2 rounds of empty messages
    assert got[1][0] == pytest.approx(1e-3)


def test_collectives_on_a_sub_group_leave_other_ranks_alone(make_world, run_world):
    world, got = make_world(4), {}
    evens = world.runtime(0).group([0, 2])

    def even(rt):
        got[rt.rank] = (yield rt.allreduce(evens, torch.ones(2) * rt.rank)).tolist()

    def odd(rt):
        got[rt.rank] = rt.now()
        return
        yield

    run_world(world, {0: even, 1: odd, 2: even, 3: odd})
    assert got == {0: [2.0, 2.0], 2: [2.0, 2.0], 1: 0.0, 3: 0.0}
    # only the even ranks' ports carried bytes
    net, links = world.network, world.platform.link_by_name
    assert net.link_bytes[links["n0.d1.up"].index] == net.link_bytes[links["n0.d3.up"].index] == 0.0
    assert net.link_bytes[links["n0.d0.up"].index] == 8.0  # 2 ring steps of 4 bytes


@pytest.mark.parametrize("kind", ["allreduce", "broadcast", "allgather"])
def test_each_member_gets_its_own_copy_of_a_collective_result(make_world, run_world, kind):
    """As with MPI buffers: one rank's in-place change to its result or its input reaches no one else."""
    world, got = make_world(2), {}
    group = world.runtime(0).group([0, 1])
    mine = {r: torch.full((3,), float(r + 1)) for r in range(2)}

    def call(rt):
        if kind == "allreduce":
            return rt.allreduce(group, mine[rt.rank])
        if kind == "broadcast":
            return rt.broadcast(group, mine[rt.rank], root=0)
        return rt.allgather(group, mine[rt.rank])

    def member(rt):
        result = yield call(rt)
        got[rt.rank] = [t.clone() for t in result] if kind == "allgather" else result.clone()
        if rt.rank == 0:  # rank 0 scribbles on what it received and on its own tensor
            for t in (result if kind == "allgather" else [result]):
                t.mul_(-1)
            mine[0].add_(1000)

    def late_reader(rt):
        result = yield call(rt)
        yield rt.compute(None, Sized(1))  # read the result only after rank 0 has scribbled
        got["late"] = [t.clone() for t in result] if kind == "allgather" else result.clone()

    run_world(world, {0: member, 1: late_reader})
    first = got[0]
    late = got["late"]
    if kind == "allgather":
        assert [t.tolist() for t in late] == [t.tolist() for t in first]
    else:
        assert late.tolist() == first.tolist()
