"""Platforms as graphs: which links a message crosses, per-rank devices, and what a spec refuses."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from simdist.platform.compute import ComputeModel, ModelTiming
from simdist.platform.links import LINK_KINDS
from simdist.platform.spec import PlatformSpec
from simdist.platform.topology import Platform


def names(route):
    return [link.name for link in route]


def torus(dims, *, topology="torus", devices=1):
    nodes = 1
    for d in dims:
        nodes *= d
    fabric = {"topology": topology} | ({"dims": dims} if topology == "torus" else {})
    return Platform(PlatformSpec.model_validate({"nodes": nodes, "node": {"devices": devices}, "fabric": fabric}))


def test_same_node_route_is_sender_port_up_then_receiver_port_down(make_platform):
    platform = make_platform("laptop-cpu", node={"devices": 4})
    assert names(platform.route(0, 3)) == ["n0.d0.up", "n0.d3.down"]
    assert names(platform.route(2, 1)) == ["n0.d2.up", "n0.d1.down"]
    assert platform.route(1, 1) == ()
    shm = LINK_KINDS.get("shm")
    # each port carries half the kind's port-to-port latency; the route pays it once
    assert [link.latency_s for link in platform.route(0, 3)] == [shm.latency_s / 2] * 2
    assert platform.route_latency_s(0, 3) == pytest.approx(0.11e-6, rel=1e-12)
    assert platform.route_bandwidth_Bps(0, 3) == 13.8e9
    assert platform.route_bandwidth_Bps(2, 2) == float("inf")


def test_routes_are_cached_and_use_the_platform_links(make_platform):
    platform = make_platform("laptop-cpu", node={"devices": 3})
    route = platform.route(0, 1)
    assert platform.route(0, 1) is route
    assert all(platform.links[link.index] is link for link in route)
    assert platform.link_by_name["n0.d0.up"] is route[0]


def test_cross_node_switch_route_is_nic_up_then_nic_down(make_platform):
    platform = make_platform("cluster-a100-hdr", nodes=2, fabric={"topology": "switch"})
    # 4 NICs per node, device k uses NIC k: rank 1 (node 0, local 1) -> rank 6 (node 1, local 2)
    assert names(platform.route(1, 6)) == ["n0.nic1.up", "n1.nic2.down"]
    assert names(platform.route(6, 1)) == ["n1.nic2.up", "n0.nic1.down"]
    # GPUDirect-style: no NVLink port on a cross-node route
    assert names(platform.route(0, 3)) == ["n0.d0.up", "n0.d3.down"]
    hdr = LINK_KINDS.get("ib-hdr")
    assert platform.route_latency_s(1, 6) == pytest.approx(hdr.latency_s, rel=1e-12)
    assert platform.route_bandwidth_Bps(1, 6) == hdr.bandwidth_Bps == 25e9


def test_devices_share_nics_round_robin(make_platform):
    platform = make_platform("laptop-cpu", nodes=2, node={"devices": 4, "nics": 2})
    assert names(platform.route(3, 4)) == ["n0.nic1.up", "n1.nic0.down"]
    assert names(platform.route(2, 5)) == ["n0.nic0.up", "n1.nic1.down"]


def test_fat_tree_adds_leaf_uplinks_only_across_leaves(make_platform):
    platform = make_platform("cluster-a100-hdr", nodes=5, node={"devices": 1, "nics": 1},
                             fabric={"nodes_per_leaf": 2, "oversubscription": 2.0})
    assert names(platform.route(0, 1)) == ["n0.nic0.up", "n1.nic0.down"]  # same leaf
    assert names(platform.route(1, 2)) == ["n1.nic0.up", "leaf0.up", "leaf1.down", "n2.nic0.down"]
    assert names(platform.route(4, 0)) == ["n4.nic0.up", "leaf2.up", "leaf0.down", "n0.nic0.down"]
    links = platform.link_by_name
    # uplink = nodes under the leaf x NICs x NIC bandwidth / oversubscription; the last leaf has one node
    assert links["leaf0.up"].bandwidth_Bps == pytest.approx(2 * 25e9 / 2.0)
    assert links["leaf2.down"].bandwidth_Bps == pytest.approx(1 * 25e9 / 2.0)
    assert links["leaf1.up"].latency_s == 0.0  # switch latency is inside the NIC kind's figure
    assert platform.route_latency_s(1, 2) == pytest.approx(LINK_KINDS.get("ib-hdr").latency_s)


def _hops(a, b, dims):
    hops = 0
    for d in dims:
        (a, ca), (b, cb) = divmod(a, d), divmod(b, d)
        delta = abs(ca - cb)
        hops += min(delta, d - delta)
    return hops


@pytest.mark.parametrize("dims, topology", [([5], "ring"), ([6], "ring"), ([3, 4], "torus"), ([2, 3, 2], "torus"),
                                            ([4, 1, 3], "torus")])
def test_torus_routes_take_dimension_ordered_shortest_paths(dims, topology):
    platform = torus(dims, topology=topology)
    nodes = platform.size
    for src in range(nodes):
        for dst in range(nodes):
            route = platform.route(src, dst)
            assert len(route) == _hops(src, dst, dims), (src, dst, names(route))
            hops = [tuple(map(int, re.fullmatch(r"n(\d+)->n(\d+)", link.name).groups())) for link in route]
            assert [a for a, _ in hops[:1]] == ([src] if route else [])
            assert all(prev[1] == nxt[0] for prev, nxt in zip(hops, hops[1:]))  # a connected path
            assert [b for _, b in hops[-1:]] == ([dst] if route else [])
            # dimension order: the axis that changes never goes back to a lower one
            axes = [_changed_axis(a, b, dims) for a, b in hops]
            assert axes == sorted(axes)


def _changed_axis(a, b, dims):
    for axis, d in enumerate(dims):
        (a, ca), (b, cb) = divmod(a, d), divmod(b, d)
        if ca != cb:
            return axis
    raise AssertionError("a hop that goes nowhere")


def test_torus_ties_go_in_the_plus_direction():
    platform = torus([4], topology="ring")
    assert names(platform.route(0, 2)) == ["n0->n1", "n1->n2"]
    assert names(platform.route(3, 1)) == ["n3->n0", "n0->n1"]


def test_torus_uses_the_fabric_link_and_devices_on_one_node_use_ports():
    platform = Platform(PlatformSpec.model_validate({
        "nodes": 3, "node": {"devices": 2}, "fabric": {"topology": "ring", "link": {"kind": "ib-ndr", "latency": "1us"}}}))
    route = platform.route(0, 5)  # node 0 -> node 2: one hop backwards
    assert names(route) == ["n0->n2"]
    assert route[0].latency_s == pytest.approx(1e-6) and route[0].bandwidth_Bps == 50e9
    assert names(platform.route(4, 5)) == ["n2.d0.up", "n2.d1.down"]


def test_device_overrides_change_cpus_and_speed_of_the_named_ranks(make_platform):
    platform = make_platform("laptop-cpu", node={"devices": 4},
                             device_overrides=[{"ranks": [1, 3], "cpus": 2.0}, {"ranks": [3], "speed": 0.5}])
    assert [(d.cpus, d.speed) for d in platform.devices] == [(1.0, 1.0), (2.0, 1.0), (1.0, 1.0), (2.0, 0.5)]
    compute = ComputeModel(platform, {("host-cpu", "m"): ModelTiming(1e-3, 1e-4, None, "test")}, model="m",
                           forward_flops_per_sample=1.0, parameter_layers=1, seed=0)
    base = 1e-3 + 1e-4 * 10
    assert [compute.mean_duration_s(r, 10) for r in range(4)] == pytest.approx(
        [base, base / 2, base, base / (2 * 0.5)], rel=1e-12)


def test_devices_know_their_node_and_local_rank(make_platform):
    platform = make_platform("cluster-a100-hdr", nodes=3)
    assert [(d.rank, d.node, d.local_rank) for d in platform.devices[3:6]] == [(3, 0, 3), (4, 1, 0), (5, 1, 1)]
    assert platform.ranks_on_node(2) == [8, 9, 10, 11]
    assert all(d.cpus is None and d.kind == "a100" and d.peak_flops == 312e12 for d in platform.devices)


def test_link_overrides_replace_the_kind_defaults(make_platform):
    platform = make_platform("laptop-cpu", node={"devices": 2,
                                                 "intra_link": {"kind": "shm", "latency": "1us", "bandwidth": "80Gbps"}})
    assert [(link.latency_s, link.bandwidth_Bps) for link in platform.route(0, 1)] == [(0.5e-6, 10e9)] * 2


def test_platform_describe_counts_ranks_and_links(make_platform):
    platform = make_platform("laptop-cpu", node={"devices": 3})
    description = platform.describe()
    assert description["ranks"] == 3
    assert description["links"] == len(platform.links) == 2 * 3 + 2  # 3 duplex ports + 1 duplex NIC


# -- what a spec refuses -------------------------------------------------------------------


def test_an_override_of_a_rank_beyond_the_device_count_is_refused():
    with pytest.raises(ValidationError, match=r"rank 4 does not exist \(the platform has ranks 0..3\)"):
        PlatformSpec.model_validate({"node": {"devices": 4}, "device_overrides": [{"ranks": [0, 4], "speed": 2}]})


def test_torus_dims_must_multiply_to_the_node_count():
    with pytest.raises(ValidationError, match=r"fabric.dims \[2, 3\] multiply to 6, but the platform has 5 nodes"):
        PlatformSpec.model_validate({"nodes": 5, "fabric": {"topology": "torus", "dims": [2, 3]}})


@pytest.mark.parametrize("spec, message", [
    ({"node": {"intra_link": "warp-drive"}}, "unknown link kind 'warp-drive'; known: "),
    ({"node": {"device": {"kind": "tpu"}}}, "unknown device kind 'tpu'; known: "),
    ({"node": {"intra_link": {"kind": "shm", "bandwidth": "0GBps"}}}, "must be greater than zero"),
    ({"node": {"intra_link": {"kind": "shm", "latency": "fast"}}}, "expected a time like"),
    ({"nodes": 0}, "greater than or equal to 1"),
    ({"fabric": {"topology": "hypercube"}}, "switch"),
    ({"device_overrides": [{"ranks": [], "speed": 2}]}, "at least 1 item"),
    ({"node": {"devices": 2}, "colour": "red"}, "Extra inputs are not permitted"),
])
def test_platform_specs_refuse_bad_fields(spec, message):
    with pytest.raises(ValidationError, match=re.escape(message)):
        PlatformSpec.model_validate(spec)


def test_every_topology_a_platform_file_may_name_is_a_registered_fabric():
    from typing import get_args

    from simdist.platform.fabrics import FABRICS
    from simdist.platform.spec import FabricSpec

    assert sorted(get_args(FabricSpec.model_fields["topology"].annotation)) == FABRICS.names()
    assert all(FABRICS.entry(name).citation for name in FABRICS.names())


def test_an_unknown_topology_names_the_known_ones():
    from simdist.errors import InputError
    from simdist.platform.fabrics import FABRICS

    with pytest.raises(InputError, match="unknown topology 'mesh'; known: fat_tree, ring, switch, torus"):
        FABRICS.entry("mesh")
