"""Max-min fair sharing and the flow network: physical bounds as properties, small cases exactly.

Properties (hypothesis, small random link sets, routes, sizes and start times):

* ``max_min_rates``: no link is over capacity; every flow has a bottleneck (a saturated link on
  which no flow is faster); flows with the same set of links get the same rate.
* ``FlowNetwork``: no transfer beats start + route latency + bytes / slowest link; bytes sent
  equal bytes received per (src, dst); a link carries the bytes of the flows crossing it; a
  link is busy at least bytes / capacity and at most the run's duration.
"""

from __future__ import annotations

import math

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simdist.platform.network import FlowNetwork, max_min_rates
from simdist.platform.topology import Link
from helpers import link_load

REL = 1e-9
PROPERTY = settings(max_examples=100, deadline=None)


def _links(capacities, latencies=None):
    latencies = latencies or [0.0] * len(capacities)
    return [Link(i, f"l{i}", "test", lat, cap) for i, (cap, lat) in enumerate(zip(capacities, latencies))]


@st.composite
def sharing_problems(draw, max_links=5, max_flows=7):
    """Link capacities and flow routes (distinct link indices, some routes repeated)."""
    n_links = draw(st.integers(1, max_links))
    capacity = draw(st.lists(st.floats(1.0, 1000.0), min_size=n_links, max_size=n_links))
    route = st.lists(st.integers(0, n_links - 1), min_size=1, max_size=n_links, unique=True)
    pool = draw(st.lists(route, min_size=1, max_size=4))
    routes = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=max_flows))
    return routes, capacity


# -- max_min_rates ------------------------------------------------------------------------


@PROPERTY
@given(sharing_problems())
def test_no_link_carries_more_than_its_capacity(problem):
    routes, capacity = problem
    rates = max_min_rates(routes, capacity)
    assert all(rate > 0 for rate in rates)
    for link, load in enumerate(link_load(routes, rates, len(capacity))):
        assert load <= capacity[link] * (1 + REL)


@PROPERTY
@given(sharing_problems())
def test_every_flow_has_a_bottleneck_link(problem):
    routes, capacity = problem
    rates = max_min_rates(routes, capacity)
    load = link_load(routes, rates, len(capacity))
    for f, route in enumerate(routes):
        bottlenecks = [
            link for link in route
            if load[link] >= capacity[link] * (1 - REL)
            and all(rates[f] >= rates[g] * (1 - REL) for g, other in enumerate(routes) if link in other)
        ]
        assert bottlenecks, f"flow {f} (route {route}, rate {rates[f]}) has no bottleneck"


@PROPERTY
@given(sharing_problems())
def test_flows_with_the_same_links_get_the_same_rate(problem):
    routes, capacity = problem
    rates = max_min_rates(routes, capacity)
    for f in range(len(routes)):
        for g in range(f):
            if set(routes[f]) == set(routes[g]):
                assert rates[f] == pytest.approx(rates[g], rel=REL)


def test_max_min_textbook_example():
    # link 0 (capacity 1) is shared by flows 0 and 1; link 1 (capacity 2) by flows 1 and 2.
    # Link 0 is the bottleneck (1/2 < 2/2): flows 0, 1 get 0.5; flow 2 takes what link 1 has left.
    assert max_min_rates([[0], [0, 1], [1]], [1.0, 2.0]) == [0.5, 0.5, 1.5]


def test_max_min_edge_cases():
    assert max_min_rates([], [1.0]) == []
    assert max_min_rates([[]], [1.0]) == [float("inf")]
    assert max_min_rates([[0], [0], [0], [0]], [8.0]) == [2.0] * 4
    assert max_min_rates([[1, 0]], [5.0, 3.0]) == [3.0]


# -- FlowNetwork --------------------------------------------------------------------------


@st.composite
def traffic(draw, max_links=4, max_flows=6):
    """Links (capacity, latency) and flows (route, bytes, start time, src, dst)."""
    n_links = draw(st.integers(1, max_links))
    capacity = draw(st.lists(st.floats(1e3, 1e6), min_size=n_links, max_size=n_links))
    latency = draw(st.lists(st.sampled_from([0.0, 1e-6, 1e-3, 0.05]), min_size=n_links, max_size=n_links))
    flow = st.tuples(
        st.lists(st.integers(0, n_links - 1), min_size=0, max_size=n_links, unique=True),
        st.one_of(st.just(0.0), st.floats(1.0, 1e5)),
        st.one_of(st.just(0.0), st.floats(0.0, 0.5)),
        st.integers(0, 2), st.integers(0, 2),
    )
    flows = draw(st.lists(flow, min_size=1, max_size=max_flows))
    return capacity, latency, flows


def _run(capacity, latency, flows, *, lone_shortcut=True, degrade=None, usage=None, **network_options):
    """Start every flow at its time; return (network, finish times, end of run).

    ``degrade``: (link, factor, from, to), a capacity window on one link; ``usage``: a recorder
    class (LinkUsage, UsageLog) to keep link usage with; ``network_options`` go to FlowNetwork.
    """
    env = simpy.Environment()
    links = _links(capacity, latency)
    net = FlowNetwork(env, links, lone_shortcut=lone_shortcut, **network_options)
    if usage is not None:
        net.usage = usage(len(links))
    if degrade is not None:
        link, factor, opens, closes = degrade
        env.timeout(opens).callbacks.append(lambda _e: net.degrade([link], factor, active=True))
        env.timeout(closes).callbacks.append(lambda _e: net.degrade([link], factor, active=False))
    finish = [None] * len(flows)

    def one(i, route, nbytes, start, src, dst):
        yield env.timeout(start)
        yield net.transfer([links[k] for k in route], nbytes, src=src, dst=dst)
        finish[i] = env.now

    for i, flow in enumerate(flows):
        env.process(one(i, *flow))
    env.run()
    net.finalize(env.now)
    return net, finish, env.now


@PROPERTY
@given(traffic())
def test_no_transfer_beats_latency_plus_bytes_over_bandwidth(case):
    capacity, latency, flows = case
    _, finish, _ = _run(capacity, latency, flows)
    for (route, nbytes, start, _, _), end in zip(flows, finish):
        assert end is not None, "a transfer never finished"
        bound = start + sum(latency[k] for k in route)
        if route:
            bound += nbytes / min(capacity[k] for k in route)
        assert end >= bound * (1 - REL) - 1e-12


@PROPERTY
@given(traffic())
def test_bytes_sent_equal_bytes_received_per_pair(case):
    net, _, _ = _run(*case)
    assert dict(net.sent_bytes) == dict(net.received_bytes)
    expected: dict[tuple[int, int], float] = {}
    for _, nbytes, _, src, dst in case[2]:  # counters count whole bytes
        expected[(src, dst)] = expected.get((src, dst), 0.0) + math.ceil(nbytes)
    assert net.sent_bytes.keys() == expected.keys()
    for pair, nbytes in expected.items():
        assert net.sent_bytes[pair] == pytest.approx(nbytes, rel=REL)


@PROPERTY
@given(traffic())
def test_a_link_carries_exactly_the_bytes_of_the_flows_crossing_it(case):
    capacity, _, flows = case
    net, _, _ = _run(*case)
    for link in range(len(capacity)):
        crossing = sum(math.ceil(nbytes) for route, nbytes, *_ in flows if link in route)  # whole bytes
        assert net.link_bytes[link] == crossing


@PROPERTY
@given(traffic())
def test_link_busy_time_is_between_bytes_over_capacity_and_the_run_duration(case):
    capacity, _, flows = case
    net, _, end = _run(*case)
    assert not net.active
    for link, cap in enumerate(capacity):
        slack = 8 * math.ulp(end)  # busy time is a difference of absolute times
        moved = sum(nbytes for route, nbytes, *_ in flows if link in route)  # exact sizes, not counted bytes
        assert net.link_busy_s[link] <= end * (1 + REL) + slack
        assert net.link_busy_s[link] >= moved / cap * (1 - REL) - slack


@PROPERTY
@given(traffic(), st.one_of(st.none(), st.tuples(st.integers(0, 3), st.sampled_from([0.25, 0.5]),
                                                  st.floats(0.0, 0.3), st.floats(0.3, 1.0))))
def test_lone_flows_finish_as_if_every_flow_were_shared(case, degrade):
    """A flow kept apart while its links are free, and rejoining the shared set when another
    flow or a degradation window claims one of them, gives the max-min outcome."""
    capacity, latency, flows = case
    if degrade is not None and degrade[0] >= len(capacity):
        degrade = None
    fast_net, fast, _ = _run(capacity, latency, flows, degrade=degrade)
    ref_net, ref, _ = _run(capacity, latency, flows, lone_shortcut=False, degrade=degrade)
    assert fast == [pytest.approx(t, rel=REL, abs=1e-12) for t in ref]
    # not the clocks at the end of env.run(): a lone flow that joined the shared ones leaves its
    # timer queued (SimPy cannot cancel a timeout) and the clock runs on to it, though it does
    # nothing (a flow started in a degradation window that closes before its bytes move)
    assert fast_net.idle and ref_net.idle
    assert fast_net.link_bytes == ref_net.link_bytes
    assert fast_net.link_busy_s == [pytest.approx(t, rel=REL, abs=1e-12) for t in ref_net.link_busy_s]
    assert dict(fast_net.received_bytes) == dict(ref_net.received_bytes)


def test_a_flow_claiming_a_lone_flows_link_mid_transfer_shares_it_from_then_on():
    # the first flow (1000 B at 100 B/s, latency 1 s) is alone until the second starts at t=6:
    # it has moved 500 B, then both get 50 B/s: it ends at 6 + 500/50 = 16, the second at 16 + 5
    net, finish, _ = _run([100.0], [1.0], [([0], 1000.0, 0.0, 0, 1), ([0], 1000.0, 5.0, 0, 1)])
    assert finish == [pytest.approx(16.0, rel=REL), pytest.approx(21.0, rel=REL)]
    assert net.link_busy_s[0] == pytest.approx(20.0, rel=REL)
    assert not net.in_flight() and net.idle


def test_a_flow_still_paying_latency_is_in_flight():
    env = simpy.Environment()
    links = _links([100.0], [1.0])
    net = FlowNetwork(env, links)
    net.transfer(links, 1000.0, src=0, dst=1)  # lone: holds the link
    net.transfer(links, 1000.0, src=2, dst=1)  # shares it: an ordinary flow, latency first
    env.run(until=0.5)
    assert sorted(f.src for f in net.in_flight()) == [0, 2] and not net.idle
    env.run()
    assert net.in_flight() == [] and net.idle


def test_a_lone_flow_in_flight_at_the_end_counts_as_in_flight_and_busy():
    env = simpy.Environment()
    links = _links([100.0], [1.0])
    net = FlowNetwork(env, links)
    net.transfer(links, 1000.0, src=0, dst=1)
    env.run(until=4.0)
    net.finalize(env.now)
    assert [f.dst for f in net.in_flight()] == [1] and not net.idle
    assert net.link_busy_s[0] == pytest.approx(3.0) and net.sent_bytes[(0, 1)] == 1000.0
    assert net.received_bytes.get((0, 1), 0.0) == 0.0


@PROPERTY
@given(bandwidth=st.floats(1e3, 1e12), latency=st.floats(0.0, 1e-2), nbytes=st.floats(1.0, 1e9),
       start=st.floats(0.0, 10.0), hops=st.integers(1, 3))
def test_a_single_flow_alone_takes_latency_plus_bytes_over_bandwidth(bandwidth, latency, nbytes, start, hops):
    capacity = [bandwidth * (1 + k) for k in range(hops)]  # the first link is the slowest
    latencies = [latency] * hops
    _, finish, _ = _run(capacity, latencies, [(list(range(hops)), nbytes, start, 0, 1)])
    assert finish[0] == pytest.approx(start + hops * latency + nbytes / bandwidth, rel=REL)


@PROPERTY
@given(bandwidth=st.floats(1e3, 1e12), latency=st.floats(0.0, 1e-2), nbytes=st.floats(1.0, 1e9))
def test_two_equal_flows_on_one_link_finish_together_at_twice_the_transfer_time(bandwidth, latency, nbytes):
    net, finish, _ = _run([bandwidth], [latency], [([0], nbytes, 0.0, 0, 1), ([0], nbytes, 0.0, 1, 0)])
    expected = latency + 2 * nbytes / bandwidth
    assert finish == [pytest.approx(expected, rel=REL)] * 2
    assert net.link_busy_s[0] == pytest.approx(2 * nbytes / bandwidth, rel=REL)


def test_a_late_flow_slows_an_early_one_exactly():
    # 1000 B at 100 B/s from t=0; a second 1000 B flow joins the link at t=5 (500 B left each
    # then get 50 B/s): the first ends at 5 + 500/50 = 15, the second's remaining 500 B at
    # 100 B/s once alone: 15 + 5 = 20.
    net, finish, end = _run([100.0], [0.0], [([0], 1000.0, 0.0, 0, 1), ([0], 1000.0, 5.0, 0, 1)])
    assert finish == [pytest.approx(15.0, rel=REL), pytest.approx(20.0, rel=REL)]
    assert end == pytest.approx(20.0, rel=REL)
    assert net.link_busy_s[0] == pytest.approx(20.0, rel=REL)


def test_busy_time_excludes_idle_gaps_between_flows():
    # 100 B at 100 B/s during [0, 1], then nothing until a flow during [3, 4]: busy 2 s of 4.
    net, finish, end = _run([100.0], [0.0], [([0], 100.0, 0.0, 0, 1), ([0], 100.0, 3.0, 0, 1)])
    assert finish == [pytest.approx(1.0), pytest.approx(4.0)]
    assert net.link_busy_s[0] == pytest.approx(2.0, rel=REL)


def test_latency_override_replaces_the_route_latency():
    env = simpy.Environment()
    links = _links([100.0], [1.0])
    net = FlowNetwork(env, links)
    done = net.transfer(links, 100.0, latency_s=0.0)
    env.run(done)
    assert env.now == pytest.approx(1.0, rel=REL)


def test_an_empty_route_and_an_empty_transfer_finish_after_latency_only():
    env = simpy.Environment()
    links = _links([100.0], [0.25])
    net = FlowNetwork(env, links)
    empty_route = net.transfer([], 1e9, src=0, dst=0)
    zero_bytes = net.transfer(links, 0.0, src=0, dst=1)
    env.run(empty_route)
    assert env.now == 0.0
    env.run(zero_bytes)
    assert env.now == pytest.approx(0.25)
    assert net.link_bytes == [0.0] and net.link_busy_s == [0.0]
