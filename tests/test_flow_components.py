"""The flow network re-solves only the flows a change touches, and that changes no outcome.

Reference: a plain event loop written here, which re-solves max-min over *every* moving flow
whenever any flow starts or ends and advances every flow between events (what the network
did before it re-solved by component). The network, with and without its lone-flow shortcut,
must finish every transfer when the reference does, on random links, routes, sizes and start
times that make several components come and go, with or without a window that cuts one link's
capacity for a while. Small cases check the bookkeeping directly:
a change on one component leaves the other's rates and finish times alone, and the usage
recorder sees every link's rate as solved.
"""

from __future__ import annotations

import math

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simdist.platform.flow_components import LinkFlows
from simdist.platform.flow import Flow
from simdist.platform.link_usage import UsageLog
from simdist.platform.maxmin import _max_min_rates_python
from simdist.platform.network import FlowNetwork
from simdist.platform.topology import Link
from test_network import _run as run_flows

REL = 1e-9


def _links(capacities, latencies):
    return [Link(i, f"l{i}", "test", lat, cap) for i, (cap, lat) in enumerate(zip(capacities, latencies))]


@st.composite
def traffic(draw, max_links=7, max_flows=10):
    """Links (capacity, latency) and flows (route, bytes, start time): sparse routes, so that
    flows form several components that merge and split as flows come and go."""
    n_links = draw(st.integers(2, max_links))
    capacity = draw(st.lists(st.floats(1e3, 1e6), min_size=n_links, max_size=n_links))
    latency = draw(st.lists(st.sampled_from([0.0, 1e-3, 0.05]), min_size=n_links, max_size=n_links))
    flow = st.tuples(st.lists(st.integers(0, n_links - 1), min_size=1, max_size=3, unique=True),
                     st.floats(1.0, 1e5), st.floats(0.0, 0.5))
    return capacity, latency, draw(st.lists(flow, min_size=1, max_size=max_flows))


def reference_finish_times(capacity, latency, flows, window=None) -> list[float]:
    """Every transfer's end: whole-network max-min re-solved at every start and end (and where
    ``window`` = (link, factor, opens, closes) changes a link's capacity)."""
    arrivals = sorted((start + sum(latency[k] for k in route), i) for i, (route, _, start) in enumerate(flows))
    changes = [] if window is None else [(window[2], window[1]), (window[3], 1.0)]
    remaining = {}
    finish = [math.nan] * len(flows)
    now, capacity_now = 0.0, list(capacity)
    while arrivals or remaining:
        moving = sorted(remaining)
        rates = _max_min_rates_python([flows[i][0] for i in moving], capacity_now) if moving else []
        next_end = min((remaining[i] / r for i, r in zip(moving, rates)), default=math.inf)
        next_arrival = arrivals[0][0] - now if arrivals else math.inf
        next_change = changes[0][0] - now if changes else math.inf
        dt = min(next_end, next_arrival, next_change)
        for i, r in zip(moving, rates):
            remaining[i] -= r * dt
        now += dt
        for i in moving:
            if remaining[i] <= 1e-9 * flows[i][1] + 1e-6:
                finish[i] = now
                del remaining[i]
        while changes and changes[0][0] <= now:
            factor = changes.pop(0)[1]
            capacity_now[window[0]] = capacity[window[0]] * factor
        while arrivals and arrivals[0][0] <= now:
            _, i = arrivals.pop(0)
            remaining[i] = flows[i][1]
    return finish


def network_finish_times(capacity, latency, flows, *, lone_shortcut: bool,
                         window=None) -> tuple[FlowNetwork, list[float]]:
    """The network's finish times (``test_network._run``, which starts each flow at its time)."""
    net, finish, _ = run_flows(capacity, latency, [(route, nbytes, start, 0, 1) for route, nbytes, start in flows],
                               lone_shortcut=lone_shortcut, degrade=window)
    return net, finish


@settings(max_examples=150, deadline=None)
@given(traffic(), st.booleans(), st.one_of(st.none(), st.tuples(st.integers(0, 6), st.sampled_from([0.25, 0.5]),
                                                                  st.floats(0.01, 0.3), st.floats(0.31, 1.0))))
def test_re_solving_by_component_finishes_every_transfer_when_a_whole_network_solve_does(case, lone, window):
    """Also with a window that cuts one link's capacity for a while (a re-solve of its component)."""
    capacity, latency, flows = case
    if window is not None and window[0] >= len(capacity):
        window = None
    net, finish = network_finish_times(capacity, latency, flows, lone_shortcut=lone, window=window)
    expected = reference_finish_times(capacity, latency, flows, window)
    assert finish == [pytest.approx(t, rel=REL, abs=1e-12) for t in expected]
    assert not net.active and net.idle


def test_a_flow_starting_on_one_component_leaves_the_other_components_rates_and_finish_times_alone():
    env = simpy.Environment()
    links = _links([100.0, 100.0], [0.0, 0.0])
    net = FlowNetwork(env, links, lone_shortcut=False)
    ends = {}

    def one(name, link, nbytes, start):
        yield env.timeout(start)
        yield net.transfer([links[link]], nbytes)
        ends[name] = env.now

    env.process(one("a", 0, 1000.0, 0.0))  # alone on link 0: 10 s
    env.process(one("b", 1, 1000.0, 0.0))  # link 1 ...
    env.process(one("c", 1, 500.0, 2.0))  # ... shared from t = 2: b has 800 B left, both at 50 B/s
    env.run(until=1.0)
    a = next(flow for flow in net.active if flow.link_indices == (0,))
    a_prediction = a.finish_seq
    env.run(until=2.5)
    rates = {flow.link_indices: flow.rate_Bps for flow in net.active}
    assert rates == {(0,): 100.0, (1,): 50.0}
    assert a.finish_seq == a_prediction  # c's start on link 1 did not re-solve a
    solves = net.solves
    env.run()
    assert ends == {"a": pytest.approx(10.0), "c": pytest.approx(12.0), "b": pytest.approx(15.0)}
    assert net.solves - solves == 1  # c's end re-solves b alone; a's and b's ends leave nothing to solve


def test_the_component_of_a_link_is_every_flow_reachable_through_shared_links_in_start_order():
    flows = LinkFlows(6)
    made = [Flow((), 1.0, lambda: None, link_indices=route) for route in [(0, 1), (4,), (1, 2), (2, 3), (5,)]]
    for flow in made:
        flows.add(flow)
    moving = dict.fromkeys(made)
    assert flows.component([3], moving) == [made[0], made[2], made[3]]
    assert flows.component([4, 5], moving) == [made[1], made[4]]
    del moving[made[2]]
    flows.remove(made[2])  # the chain 0-1 | 2-3 breaks
    assert flows.component([3], moving) == [made[3]]
    assert flows.component([0], moving) == [made[0]]
    assert flows.component([4, 3, 0, 5], moving) == [made[0], made[1], made[3], made[4]]  # all of them


def test_the_usage_recorder_gets_each_re_solved_links_rate_and_closes_a_link_whose_flows_all_left():
    env = simpy.Environment()
    links = _links([100.0, 100.0], [0.0, 0.0])
    net = FlowNetwork(env, links, lone_shortcut=False)
    net.usage = log = UsageLog(len(links))

    def one(route, nbytes, start):
        yield env.timeout(start)
        yield net.transfer([links[k] for k in route], nbytes)

    env.process(one([0], 1000.0, 0.0))  # link 0 alone for 10 s
    env.process(one([1], 500.0, 0.0))  # link 1: 100 B/s until t = 5
    env.process(one([1], 250.0, 1.0))  # ... shared from t = 1: 50 B/s each
    env.run()
    net.finalize(env.now)
    assert log._bytes.tolist() == pytest.approx([1000.0, 750.0])
    # flow-seconds: link 0 carries one flow for 10 s; link 1 one flow 0-1 and after c ends, two in between
    assert log._flow_s[0] == pytest.approx(10.0)
    assert log._span == pytest.approx([0.0, 10.0])


def test_a_route_naming_a_link_twice_counts_that_links_busy_time_once():
    env = simpy.Environment()
    links = _links([100.0, 100.0], [0.0, 0.0])
    net = FlowNetwork(env, links, lone_shortcut=False)
    done = net.transfer([links[0], links[1], links[0]], 100.0)  # alone: its one share of each link, 100 B/s
    env.run()
    assert done.processed and env.now == pytest.approx(1.0)
    assert net.link_busy_s == [pytest.approx(1.0), pytest.approx(1.0)]
