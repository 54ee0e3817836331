"""Link semantics that network microbenchmarks expose, and RTT-weighted sharing.

Exact cases, computed by hand:

* a half-duplex link with one flow each way gives each half its capacity (OSU bibw = bw);
* an aggregate cap of 1.5 x bandwidth with two opposite flows gives each 0.75 x;
* multi-rail striping over 2 NICs halves a large transfer's time, and the byte counters
  still add up to exactly the transfer's bytes (an odd size splits into whole bytes);
* rtt-weighted sharing: flows with route latencies 1 us and 3 us on one bottleneck get 3/4
  and 1/4 of it; on a ring, a one-hop and a two-hop flow on one link get 2/3 and 1/3.

Properties (hypothesis): on random platforms using every option, no transfer finishes before
its route latency + bytes / its best rate (narrowest link, summed over stripes), bytes sent
equal bytes received, and shared capacities count no bytes; the weighted solver is physical
(no link over capacity, every flow has a bottleneck on which its rate per weight is largest),
its plain and vectorised forms agree, and equal weights give the max-min allocation.

Validation: an aggregate cap outside [bandwidth, 2 x bandwidth], both half duplex and a cap,
and unknown duplex / sharing / NIC policy values fail naming the field, and ``simdist run``
exits 2 with one line.
"""

from __future__ import annotations

import copy
import math
import os
import pickle
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import simpy
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import simdist
from simdist.cli import main
from simdist.config import describe_validation_error
from simdist.platform.maxmin import _fill_numpy_weighted, _fill_python_weighted, max_min_rates
from simdist.platform.network import SHARING_RULES, FlowNetwork, rtt_weight, weighted_max_min_rates
from simdist.platform.spec import FabricSpec, LinkSpec, PlatformSpec
from simdist.platform.topology import Link, Platform, StripedRoute
from helpers import link_load, tiny_scenario

REL = 1e-9
PROPERTY = settings(max_examples=60, deadline=None)
HDR_BPS = 25e9  # ib-hdr, per direction
HDR_LATENCY_S = 0.6e-6


def platform(nodes: int = 2, *, fabric: dict | None = None, **node) -> Platform:
    return Platform(PlatformSpec.model_validate({"nodes": nodes, "node": {"devices": 1, **node},
                                                 "fabric": fabric or {}}))


def run_transfers(plat: Platform, transfers, **network) -> tuple[FlowNetwork, list[float]]:
    """Send ``(src, dst, nbytes, start_s)`` transfers over the platform's routes; their finish times."""
    env = simpy.Environment()
    net = FlowNetwork(env, plat.links, **network)
    finish = [math.nan] * len(transfers)

    def one(i, src, dst, nbytes, start_s):
        yield env.timeout(start_s)
        yield net.transfer(plat.route(src, dst), nbytes, src=src, dst=dst)
        finish[i] = env.now

    for i, transfer in enumerate(transfers):
        env.process(one(i, *transfer))
    env.run()
    net.finalize(env.now)
    return net, finish


def bytes_on(plat: Platform, net: FlowNetwork) -> dict[str, float]:
    return {link.name: net.link_bytes[link.index] for link in plat.links if net.link_bytes[link.index]}


# -- half duplex and aggregate caps --------------------------------------------------------


def test_a_full_duplex_link_gives_each_direction_its_bandwidth():
    plat = platform()
    assert [link.name for link in plat.route(0, 1)] == ["n0.nic0.up", "n1.nic0.down"]
    assert not any(name.endswith(".both") for name in plat.link_by_name)
    _, finish = run_transfers(plat, [(0, 1, 1e9, 0.0), (1, 0, 1e9, 0.0)])
    assert finish == [pytest.approx(HDR_LATENCY_S + 1e9 / HDR_BPS, rel=REL)] * 2


def test_a_half_duplex_link_gives_one_flow_each_way_half_its_capacity():
    plat = platform(nic_link={"kind": "ib-hdr", "duplex": "half"})
    assert [link.name for link in plat.route(0, 1)] == ["n0.nic0.up", "n0.nic0.both", "n1.nic0.down", "n1.nic0.both"]
    both = plat.link_by_name["n0.nic0.both"]
    assert (both.bandwidth_Bps, both.latency_s, both.counts_bytes) == (HDR_BPS, 0.0, False)
    # one way alone: the whole bandwidth
    _, alone = run_transfers(plat, [(0, 1, 1e9, 0.0)])
    assert alone == [pytest.approx(HDR_LATENCY_S + 1e9 / HDR_BPS, rel=REL)]
    # one flow each way: each node's NIC carries both, at half the bandwidth each
    net, finish = run_transfers(plat, [(0, 1, 1e9, 0.0), (1, 0, 1e9, 0.0)])
    assert finish == [pytest.approx(HDR_LATENCY_S + 1e9 / (HDR_BPS / 2), rel=REL)] * 2
    # the bytes are counted on the directions, not again on the shared capacity
    assert bytes_on(plat, net) == {"n0.nic0.up": 1e9, "n0.nic0.down": 1e9, "n1.nic0.up": 1e9, "n1.nic0.down": 1e9}
    assert net.link_busy_s[both.index] == pytest.approx(1e9 / (HDR_BPS / 2), rel=REL)


def test_an_aggregate_cap_of_one_and_a_half_bandwidths_gives_two_opposite_flows_three_quarters_each():
    plat = platform(nic_link={"kind": "ib-hdr", "aggregate_bandwidth": "37.5GBps"})
    assert plat.link_by_name["n0.nic0.both"].bandwidth_Bps == 1.5 * HDR_BPS
    env = simpy.Environment()
    net = FlowNetwork(env, plat.links, lone_shortcut=False)
    net.transfer(plat.route(0, 1), 1e9, src=0, dst=1)
    net.transfer(plat.route(1, 0), 1e9, src=1, dst=0)
    env.run(until=HDR_LATENCY_S * 2)  # latency paid, both moving
    assert [flow.rate_Bps for flow in net.active] == [pytest.approx(0.75 * HDR_BPS, rel=REL)] * 2
    env.run()
    assert env.now == pytest.approx(HDR_LATENCY_S + 1e9 / (0.75 * HDR_BPS), rel=REL)
    # one way alone is not capped below its bandwidth (OSU bw), both ways together are (OSU bibw = 1.5 bw)
    _, alone = run_transfers(plat, [(0, 1, 1e9, 0.0)])
    assert alone == [pytest.approx(HDR_LATENCY_S + 1e9 / HDR_BPS, rel=REL)]


def test_a_half_duplex_ring_link_is_shared_by_its_two_directions():
    plat = platform(4, fabric={"topology": "ring", "link": {"kind": "ib-hdr", "duplex": "half"}})
    assert [link.name for link in plat.route(0, 1)] == ["n0->n1", "n0<->n1.both"]
    assert [link.name for link in plat.route(1, 0)] == ["n1->n0", "n0<->n1.both"]
    _, finish = run_transfers(plat, [(0, 1, 1e9, 0.0), (1, 0, 1e9, 0.0)])
    assert finish == [pytest.approx(HDR_LATENCY_S + 1e9 / (HDR_BPS / 2), rel=REL)] * 2


def test_intra_node_ports_can_be_half_duplex_too():
    plat = Platform(PlatformSpec.model_validate({"node": {"devices": 2, "intra_link": {"kind": "pcie4",
                                                                                      "duplex": "half"}}}))
    assert [link.name for link in plat.route(0, 1)] == ["n0.d0.up", "n0.d0.both", "n0.d1.down", "n0.d1.both"]
    _, finish = run_transfers(plat, [(0, 1, 1e9, 0.0), (1, 0, 1e9, 0.0)])
    assert finish == [pytest.approx(2.5e-6 + 1e9 / (31e9 / 2), rel=REL)] * 2


def test_fat_tree_uplinks_stay_full_duplex_under_a_capped_nic():
    plat = platform(4, nic_link={"kind": "ib-hdr", "duplex": "half"}, fabric={"topology": "fat_tree",
                                                                              "nodes_per_leaf": 2})
    assert [link.name for link in plat.route(0, 2)] == ["n0.nic0.up", "n0.nic0.both", "leaf0.up", "leaf1.down",
                                                        "n2.nic0.down", "n2.nic0.both"]


# -- multi-rail ----------------------------------------------------------------------------


def test_multi_rail_striping_over_two_nics_halves_a_large_transfer_and_counts_exact_bytes():
    nbytes = 10**9 + 1  # odd: the stripes' whole bytes are 500000001 and 500000000
    by_device = platform(nics=2)
    striped = platform(nics=2, nic_policy="multi-rail")
    route = striped.route(0, 1)
    assert type(route) is StripedRoute and [[link.name for link in s] for s in route.stripes] == [
        ["n0.nic0.up", "n1.nic0.down"], ["n0.nic1.up", "n1.nic1.down"]]
    assert [link.name for link in route] == ["n0.nic0.up", "n1.nic0.down"]  # read as one path: rail 0
    assert striped.route_latency_s(0, 1) == pytest.approx(HDR_LATENCY_S)
    assert striped.route_bandwidth_Bps(0, 1) == 2 * HDR_BPS and by_device.route_bandwidth_Bps(0, 1) == HDR_BPS

    _, one_rail = run_transfers(by_device, [(0, 1, nbytes, 0.0)])
    net, two_rails = run_transfers(striped, [(0, 1, nbytes, 0.0)])
    assert one_rail == [pytest.approx(HDR_LATENCY_S + nbytes / HDR_BPS, rel=REL)]
    assert two_rails == [pytest.approx(HDR_LATENCY_S + nbytes / (2 * HDR_BPS), rel=REL)]
    assert (two_rails[0] - HDR_LATENCY_S) == pytest.approx((one_rail[0] - HDR_LATENCY_S) / 2, rel=REL)
    assert dict(net.sent_bytes) == dict(net.received_bytes) == {(0, 1): nbytes}
    assert bytes_on(striped, net) == {"n0.nic0.up": 500000001, "n1.nic0.down": 500000001,
                                      "n0.nic1.up": 500000000, "n1.nic1.down": 500000000}


def test_multi_rail_completes_with_its_last_stripe_when_one_rail_is_busy():
    # 1 GB striped: 0.5 GB on NIC 0 alone at 25 GB/s (20 ms), 0.5 GB on NIC 1 sharing it with
    # another flow at 12.5 GB/s (40 ms): the transfer is done at 40 ms, with its slower stripe
    plat = platform(nics=2, nic_policy="multi-rail")
    env = simpy.Environment()
    net = FlowNetwork(env, plat.links)
    net.transfer([plat.link_by_name["n0.nic1.up"]], 1e9, latency_s=0.0)
    done = net.transfer(plat.route(0, 1), 1e9, src=0, dst=1, latency_s=0.0)
    env.run(until=0.03)
    assert not done.triggered and net.received_bytes[(0, 1)] == 5e8  # the first stripe's share, counted
    env.run(done)
    assert env.now == pytest.approx(0.04, rel=REL)
    assert net.sent_bytes[(0, 1)] == net.received_bytes[(0, 1)] == 1e9


def test_two_striped_transfers_from_one_node_share_both_nics_evenly():
    plat = Platform(PlatformSpec.model_validate({"nodes": 2, "node": {"devices": 2, "nics": 2,
                                                                       "nic_policy": "multi-rail"}}))
    nbytes = 1e9
    net, finish = run_transfers(plat, [(0, 2, nbytes, 0.0), (1, 3, nbytes, 0.0)])
    # each stripe (0.5 GB) has half of its NIC, 12.5 GB/s: 40 ms, as one NIC per device would give
    assert finish == [pytest.approx(HDR_LATENCY_S + nbytes / HDR_BPS, rel=REL)] * 2
    assert net.sent_bytes == net.received_bytes == {(0, 2): nbytes, (1, 3): nbytes}


def test_a_striped_route_survives_copy_and_pickle():
    plat = platform(nics=2, nic_policy="multi-rail", fabric={"sharing": "rtt-weighted"})
    route = plat.route(0, 1)
    for copied in (pickle.loads(pickle.dumps(route)), copy.deepcopy(route)):
        assert type(copied) is StripedRoute and [link.name for link in copied] == [link.name for link in route]
        assert [[link.name for link in s] for s in copied.stripes] == [[link.name for link in s] for s in route.stripes]
    assert pickle.loads(pickle.dumps(plat)).links.sharing == "rtt-weighted"


def test_multi_rail_needs_more_than_one_nic_and_leaves_node_local_routes_alone():
    plat = Platform(PlatformSpec.model_validate({"nodes": 2, "node": {"devices": 2, "nic_policy": "multi-rail"}}))
    assert type(plat.route(0, 2)) is tuple and plat.stripes(0, 2) == (plat.route(0, 2),)
    plat = Platform(PlatformSpec.model_validate({"nodes": 2, "node": {"devices": 2, "nics": 2,
                                                                       "nic_policy": "multi-rail"}}))
    assert type(plat.route(0, 1)) is tuple and len(plat.stripes(2, 1)) == 2


def test_a_striped_message_reaches_its_receiver_through_the_runtime(make_world):
    from simdist.training.replica import PhantomTensor
    plat = platform(nics=2, nic_policy="multi-rail")
    world = make_world(2, platform=plat)
    world.send(0, 1, PhantomTensor(250_000_000))  # 1e9 bytes of float32
    received = world.recv(1, src=0)
    world.env.run()
    assert received.event.triggered and world.network.received_bytes[(0, 1)] == 1e9
    assert world.env.now == pytest.approx(HDR_LATENCY_S + 1e9 / (2 * HDR_BPS), rel=REL)


# -- rtt-weighted sharing -------------------------------------------------------------------


def test_rtt_weighted_flows_of_1us_and_3us_get_three_quarters_and_one_quarter():
    bottleneck = Link(0, "bottleneck", "test", 0.0, 100.0)
    near = Link(1, "near", "test", 1e-6, 1e6)
    far = Link(2, "far", "test", 3e-6, 1e6)
    links = [bottleneck, near, far]
    weights = [rtt_weight(1e-6), rtt_weight(3e-6)]
    assert weights == [pytest.approx(1 / 2e-6), pytest.approx(1 / 6e-6)]
    assert weighted_max_min_rates([[1, 0], [2, 0]], [100.0, 1e6, 1e6], weights) == [
        pytest.approx(75.0, rel=REL), pytest.approx(25.0, rel=REL)]
    # the same in the flow network: both start at 0 (latency paid elsewhere), 75 B each; the near
    # flow ends at 75 / 75 = 1 s, the far one has moved 25 B and takes its last 50 B at 100 B/s
    env = simpy.Environment()
    net = FlowNetwork(env, links, sharing="rtt-weighted")
    done_near = net.transfer([near, bottleneck], 75.0, latency_s=0.0)
    done_far = net.transfer([far, bottleneck], 75.0, latency_s=0.0)
    env.run(done_near)
    assert env.now == pytest.approx(1.0, rel=REL)
    env.run(done_far)
    assert env.now == pytest.approx(1.5, rel=REL)
    # max-min (the default) would split the bottleneck evenly: both end at 1.5 s
    env = simpy.Environment()
    net = FlowNetwork(env, links)
    assert net.sharing == "max-min"
    done = [net.transfer([near, bottleneck], 75.0, latency_s=0.0), net.transfer([far, bottleneck], 75.0, latency_s=0.0)]
    env.run(simpy.AllOf(env, done))
    assert env.now == pytest.approx(1.5, rel=REL)


def test_a_platform_with_rtt_weighted_sharing_hands_its_rule_to_its_flow_networks():
    # ring of 4: 0 -> 1 is one hop (RTT 2L), 3 -> 1 two hops (3 -> 0 -> 1, RTT 4L), both on n0->n1:
    # weights 1/(2L) and 1/(4L), shares 2/3 and 1/3
    plat = platform(4, fabric={"topology": "ring", "sharing": "rtt-weighted"})
    assert plat.sharing == plat.links.sharing == "rtt-weighted"
    env = simpy.Environment()
    net = FlowNetwork(env, plat.links)
    assert net.sharing == "rtt-weighted"
    net.transfer(plat.route(0, 1), 1e9, src=0, dst=1, latency_s=0.0)
    net.transfer(plat.route(3, 1), 1e9, src=3, dst=1, latency_s=0.0)
    env.run(until=1e-3)
    assert sorted(flow.rate_Bps for flow in net.active) == [pytest.approx(HDR_BPS / 3, rel=REL),
                                                            pytest.approx(2 * HDR_BPS / 3, rel=REL)]
    assert FlowNetwork(env, plat.links, sharing="max-min").sharing == "max-min"
    assert FlowNetwork(env, list(plat.links)).sharing == "max-min"  # a plain list carries no rule


def test_sharing_rules_are_registered_with_their_sources():
    assert SHARING_RULES.names() == ["max-min", "rtt-weighted"]
    assert sorted(typing.get_args(FabricSpec.model_fields["sharing"].annotation)) == SHARING_RULES.names()
    assert "SimGrid" in SHARING_RULES.entry("rtt-weighted").citation
    assert rtt_weight(0.0) == pytest.approx(1e9)  # a zero-latency route counts as a 1 ns round trip


# -- properties -----------------------------------------------------------------------------


@st.composite
def platforms_and_traffic(draw):
    """A small platform using any mix of the options, and transfers (src, dst, bytes, start) on it."""
    topology = draw(st.sampled_from(["switch", "fat_tree", "ring"]))
    nodes = draw(st.integers(1, 4))
    cap = draw(st.sampled_from(["full", "half", 1.0, 1.5, 2.0]))
    nic = {"kind": "ib-hdr", "latency": draw(st.sampled_from(["0.6us", "5us", 0.0]))}
    nic |= {"duplex": cap} if isinstance(cap, str) else {"aggregate_bandwidth": cap * HDR_BPS}
    spec = {"nodes": nodes,
            "node": {"devices": draw(st.integers(1, 3)), "nics": draw(st.integers(1, 3)), "nic_link": nic,
                     "nic_policy": draw(st.sampled_from(["by-device", "multi-rail"])),
                     "intra_link": {"kind": "pcie4", "duplex": draw(st.sampled_from(["full", "half"]))}},
            "fabric": {"topology": topology, "nodes_per_leaf": 2, "oversubscription": draw(st.sampled_from([1.0, 4.0])),
                       "sharing": draw(st.sampled_from(["max-min", "rtt-weighted"]))}}
    plat = Platform(PlatformSpec.model_validate(spec))
    rank = st.integers(0, plat.size - 1)
    transfer = st.tuples(rank, rank, st.one_of(st.just(0.0), st.floats(1.0, 1e8)), st.sampled_from([0.0, 1e-6, 2e-3]))
    return plat, draw(st.lists(transfer, min_size=1, max_size=6))


@PROPERTY
@given(platforms_and_traffic())
def test_no_transfer_beats_its_latency_plus_bytes_over_its_best_rate_and_bytes_add_up(case):
    plat, transfers = case
    net, finish = run_transfers(plat, transfers)
    for (src, dst, nbytes, start), end in zip(transfers, finish):
        assert not math.isnan(end), "a transfer never finished"
        bound = start + plat.route_latency_s(src, dst)
        if src != dst:
            bound += nbytes / plat.route_bandwidth_Bps(src, dst)
        assert end >= bound * (1 - REL) - 1e-15
    expected: dict[tuple[int, int], float] = {}
    for src, dst, nbytes, _ in transfers:
        expected[(src, dst)] = expected.get((src, dst), 0.0) + math.ceil(nbytes)
    assert dict(net.sent_bytes) == dict(net.received_bytes) == expected
    for link in plat.links:
        if not link.counts_bytes:
            assert net.link_bytes[link.index] == 0.0
    # every transfer between nodes leaves by exactly one NIC (or ring link) per stripe: the NIC
    # up-links carry each inter-node transfer's bytes once, however it was striped
    if plat.spec.fabric.topology != "ring":
        leaving = sum(net.link_bytes[link.index] for link in plat.links
                      if ".nic" in link.name and link.name.endswith(".up"))
        assert leaving == sum(math.ceil(b) for s, d, b, _ in transfers if plat.node_of(s) != plat.node_of(d))


@st.composite
def weighted_problems(draw, max_links=6, max_flows=12):
    n_links = draw(st.integers(1, max_links))
    capacity = draw(st.lists(st.one_of(st.sampled_from([1.0, 2.0, 4.0]), st.floats(1e-2, 1e3)),
                             min_size=n_links, max_size=n_links))
    route = st.lists(st.integers(0, n_links - 1), max_size=n_links, unique=True)
    routes = draw(st.lists(route, min_size=1, max_size=max_flows))
    weights = draw(st.lists(st.one_of(st.sampled_from([1.0, 3.0]), st.floats(1e-3, 1e3)),
                            min_size=len(routes), max_size=len(routes)))
    return routes, capacity, weights


@PROPERTY
@given(weighted_problems())
def test_weighted_rates_are_physical_and_every_flow_has_a_bottleneck(problem):
    routes, capacity, weights = problem
    rates = weighted_max_min_rates(routes, capacity, weights)
    load = link_load(routes, rates, len(capacity))
    for link, used in enumerate(load):
        assert used <= capacity[link] * (1 + REL)
    for f, route in enumerate(routes):
        if not route:
            assert rates[f] == math.inf
            continue
        bottlenecks = [
            link for link in route
            if load[link] >= capacity[link] * (1 - REL)
            and all(rates[f] / weights[f] >= rates[g] / weights[g] * (1 - REL)
                    for g, other in enumerate(routes) if link in other)
        ]
        assert bottlenecks, f"flow {f} (route {route}, rate {rates[f]}) has no bottleneck"


@PROPERTY
@given(weighted_problems(), st.booleans())
def test_weighted_plain_and_vectorised_solvers_agree_and_equal_weights_give_max_min(problem, equal):
    routes, capacity, weights = problem
    if equal:
        weights = [2.5] * len(routes)
    plain = _fill_python_weighted(routes, capacity, weights)
    vectorised = _fill_numpy_weighted(routes, capacity, weights)
    assert vectorised == [pytest.approx(r, rel=REL, abs=REL * max(capacity)) for r in plain]
    if equal:
        assert plain == [pytest.approx(r, rel=REL, abs=REL * max(capacity)) for r in max_min_rates(routes, capacity)]


def test_weighted_solver_switches_to_numpy_on_large_problems_with_the_same_answer():
    routes = [[f % 7, 7 + f % 5] for f in range(300)]
    capacity = [float(10 + k) for k in range(12)]
    weights = [1.0 + f % 4 for f in range(300)]
    fast = weighted_max_min_rates(routes, capacity, weights)
    assert fast == [pytest.approx(r, rel=REL) for r in _fill_python_weighted(routes, capacity, weights)]


# -- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize("platform_fields, field, phrase", [
    ({"node": {"nic_link": {"kind": "ib-hdr", "aggregate_bandwidth": "20GBps"}}},
     "node.nic_link.aggregate_bandwidth", "between bandwidth"),
    ({"node": {"nic_link": {"kind": "ib-hdr", "aggregate_bandwidth": "50.1GBps"}}},
     "node.nic_link.aggregate_bandwidth", "2 x bandwidth"),
    ({"node": {"nic_link": {"kind": "ib-hdr", "bandwidth": "10GBps", "aggregate_bandwidth": "25GBps"}}},
     "node.nic_link.aggregate_bandwidth", "between bandwidth (1e+10 B/s)"),
    ({"node": {"nic_link": {"kind": "ib-hdr", "duplex": "half", "aggregate_bandwidth": "30GBps"}}},
     "node.nic_link.aggregate_bandwidth", "half-duplex"),
    ({"node": {"intra_link": {"kind": "shm", "duplex": "simplex"}}}, "node.intra_link.duplex", "'full' or 'half'"),
    ({"fabric": {"sharing": "fair"}}, "fabric.sharing", "'max-min' or 'rtt-weighted'"),
    ({"node": {"nic_policy": "stripe"}}, "node.nic_policy", "'by-device' or 'multi-rail'"),
])
def test_bad_link_semantics_fail_naming_the_field(platform_fields, field, phrase):
    with pytest.raises(ValidationError) as err:
        PlatformSpec.model_validate(platform_fields)
    where, message = describe_validation_error(err.value)
    assert where == field and phrase in message


def test_aggregate_bandwidth_takes_the_units_of_bandwidth_and_its_bounds_inclusive():
    assert LinkSpec(kind="ib-hdr", aggregate_bandwidth="400Gbps").aggregate_bandwidth == 2 * HDR_BPS
    assert LinkSpec(kind="ib-hdr", aggregate_bandwidth=HDR_BPS).aggregate_bandwidth == HDR_BPS
    assert LinkSpec(kind="ib-hdr").duplex == "full" and LinkSpec(kind="ib-hdr").aggregate_bandwidth is None


def _scenario_file(tmp_path: Path, platform_fields: dict) -> Path:
    path = tmp_path / "scenario.yaml"
    plat = {"preset": "laptop-cpu", "nodes": 2, "node": {"devices": 1}}
    for key, value in platform_fields.items():
        plat[key] = plat.get(key, {}) | value if isinstance(value, dict) else value
    path.write_text(yaml.safe_dump(tiny_scenario(platform=plat)))
    return path


@pytest.mark.parametrize("platform_fields, field", [
    ({"node": {"nic_link": {"kind": "ib-hdr", "aggregate_bandwidth": "20GBps"}}},
     "platform.node.nic_link.aggregate_bandwidth"),
    ({"node": {"nic_link": {"kind": "ib-hdr", "duplex": "simplex"}}}, "platform.node.nic_link.duplex"),
    ({"fabric": {"sharing": "fair"}}, "platform.fabric.sharing"),
])
def test_simdist_run_exits_2_with_one_line_naming_the_field(platform_fields, field, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(_scenario_file(tmp_path, platform_fields)), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field in err and not out.exists()


def test_simdist_run_as_a_process_exits_2_without_a_traceback(tmp_path):
    scenario = _scenario_file(tmp_path, {"node": {"nic_link": {"kind": "ib-hdr", "aggregate_bandwidth": "60GBps"}}})
    env = {**os.environ, "PYTHONPATH": str(Path(simdist.__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-m", "simdist", "run", scenario.name, "--out", "out", "--quiet"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "platform.node.nic_link.aggregate_bandwidth" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_run_with_every_option_completes_and_counts_no_bytes_on_shared_capacities(tmp_path):
    scenario = _scenario_file(tmp_path, {"node": {"nics": 2, "nic_policy": "multi-rail",
                                                  "nic_link": {"kind": "ib-hdr", "aggregate_bandwidth": "40GBps"}},
                                         "fabric": {"sharing": "rtt-weighted"}})
    out = tmp_path / "out"
    assert main(["run", str(scenario), "--out", str(out), "--quiet"]) == 0
    rows = (out / "links.csv").read_text().splitlines()[1:]
    both = [row for row in rows if ".both," in row]
    assert both and all(row.split(",")[2] in ("0", "0.0") for row in both)
    assert {row.split(",")[0] for row in rows} >= {"n0.nic0.up", "n0.nic1.up"}  # both rails carried bytes


# -- collectives' closed form follows the same rules ---------------------------------------------

@pytest.mark.parametrize("fabric, node", [
    ({}, {"nics": 2, "nic_policy": "multi-rail"}),
    ({"sharing": "rtt-weighted"}, {"devices": 2}),
])
def test_analytic_collectives_follow_multi_rail_and_rtt_weighting_as_flows_do(fabric, node):
    from conftest import build_world
    from simdist.training.replica import PhantomTensor

    spec = PlatformSpec.model_validate({"nodes": 2, "node": {"devices": 1, **node}, "fabric": fabric})
    ends = {}
    for fidelity in ("analytic", "flows"):
        world = build_world(spec.device_count, fidelity=fidelity, platform=Platform(spec))
        group = world.runtime(0).group(range(spec.device_count))

        def member(rt):
            yield rt.allreduce(group, PhantomTensor(2**24))  # 64 MiB
            ends[fidelity] = rt.now()

        for rank in range(spec.device_count):
            world.spawn(rank, member(world.runtime(rank)))
        world.env.run()
    assert ends["analytic"] == pytest.approx(ends["flows"], rel=0.01)
    if node.get("nic_policy") == "multi-rail":  # 2 ranks: 2 steps of 32 MiB over two 25 GB/s rails
        reduce_s = 2**25 / (19e9 / 3)  # the first step's receiver sums 32 MiB at the cpu's memory bandwidth / 3
        assert ends["analytic"] == pytest.approx(2 * (HDR_LATENCY_S + 2**25 / (2 * HDR_BPS)) + reduce_s, rel=1e-6)
