"""Heterogeneous nodes: node groups with their own device count and kind, cores, NICs and links."""

from __future__ import annotations

import pytest
import torch
from test_heterogeneity import Batch, T1

from simdist.cli import main
from simdist.errors import InputError
from simdist.platform.compute import ComputeModel, ModelTiming
from simdist.platform.spec import PlatformSpec, merge_platform_fields
from simdist.platform.topology import Platform
from simdist.recorder import Recorder
from simdist.runtime.sim import SimWorld
from simdist.scenario import scenario_from_dict


def spec(**fields) -> PlatformSpec:
    base = {"nodes": 3, "node": {"devices": 2, "device": {"kind": "cpu"}, "intra_link": "shm", "nics": 1,
                                 "nic_link": "ib-hdr"},
            "node_groups": [{"nodes": [2], "node": {"devices": 4, "nics": 2, "nic_link": {"bandwidth": "50GBps"}}}]}
    return PlatformSpec.model_validate(merge_platform_fields(base, fields))


def test_a_group_s_nodes_take_its_fields_and_every_other_field_from_node():
    s = spec()
    assert [s.node_at(n).devices for n in range(3)] == [2, 2, 4]
    assert s.device_count == 8 and [s.first_rank(n) for n in range(3)] == [0, 2, 4]
    grouped = s.node_at(2)
    assert grouped.nics == 2 and grouped.intra_link.kind == "shm"  # not given: node's
    assert grouped.nic_link.kind == "ib-hdr" and grouped.nic_link.bandwidth_Bps == 50e9  # one field of a link
    assert s.heterogeneous_nodes and not PlatformSpec.model_validate({"nodes": 2}).heterogeneous_nodes


def test_ranks_are_numbered_node_by_node_with_each_node_s_devices_ports_and_nics():
    platform = Platform(spec(node_groups=[{"nodes": [1], "node": {"devices": 3, "device": {"kind": "a100"},
                                                                  "intra_link": "nvlink3", "nics": 3}}]))
    assert [(d.rank, d.node, d.local_rank, d.kind) for d in platform.devices] == [
        (0, 0, 0, "cpu"), (1, 0, 1, "cpu"), (2, 1, 0, "a100"), (3, 1, 1, "a100"), (4, 1, 2, "a100"),
        (5, 2, 0, "cpu"), (6, 2, 1, "cpu")]
    assert [platform.ranks_on_node(n) for n in range(3)] == [[0, 1], [2, 3, 4], [5, 6]]
    assert [len(nics) for nics in platform.nics] == [1, 3, 1]
    assert platform.route(2, 3)[0].kind == "nvlink3" and platform.route(0, 1)[0].kind == "shm"
    assert platform.route(4, 5)[0].name == "n1.nic2.up"  # device 2 of node 1 uses its NIC 2 (k mod nics)


def test_multi_rail_between_nodes_of_different_nic_counts_stripes_over_the_rails_both_have():
    platform = Platform(spec(node={"nic_policy": "multi-rail", "nics": 4},
                             node_groups=[{"nodes": [2], "node": {"nics": 2}}]))
    assert len(platform.stripes(0, 2)) == 4  # two 4-NIC nodes
    assert len(platform.stripes(0, 4)) == 2  # a 4-NIC node and a 2-NIC node
    assert platform.route_bandwidth_Bps(0, 4) == pytest.approx(2 * platform.spec.node.nic_link.bandwidth_Bps)


def test_a_fat_tree_leaf_s_uplink_carries_its_own_nodes_nic_bandwidth():
    platform = Platform(spec(fabric={"topology": "fat_tree", "nodes_per_leaf": 2, "oversubscription": 2.0}))
    hdr = platform.spec.node.nic_link.bandwidth_Bps
    leaf0, leaf1 = platform.link_by_name["leaf0.up"], platform.link_by_name["leaf1.up"]
    assert leaf0.bandwidth_Bps == pytest.approx(2 * hdr / 2)  # two 1-NIC nodes
    assert leaf1.bandwidth_Bps == pytest.approx(2 * 50e9 / 2)  # the group's node: 2 NICs of 50 GB/s


def sim_world(platform_spec: PlatformSpec) -> SimWorld:
    platform = Platform(platform_spec)
    model = ComputeModel(platform, {("host-cpu", "m"): ModelTiming(0.0, T1, None, "test")}, model="m",
                         forward_flops_per_sample=1.0, parameter_layers=1, seed=0)
    return SimWorld(platform, model, Recorder(), gradient_source=lambda r, rep, b: (lambda: (torch.zeros(1), 0.0)))


def test_each_node_shares_its_own_cores_and_its_devices_run_at_their_speed():
    world = sim_world(spec(node_groups=[{"nodes": [2], "node": {"devices": 4, "cores": 2}},
                                        {"nodes": [1], "node": {"device": {"speed": 2.0}}}]))
    ends = {}

    def proc(rt):
        yield rt.compute(None, Batch())
        ends[rt.rank] = rt.now()

    for rank in range(world.platform.size):
        world.spawn(rank, proc(world.runtime(rank)))
    world.env.run()
    assert [ends[r] for r in (0, 1)] == pytest.approx([1.0, 1.0])  # node 0: a core each
    assert [ends[r] for r in (2, 3)] == pytest.approx([0.5, 0.5])  # node 1: twice as fast
    assert [ends[r] for r in range(4, 8)] == pytest.approx([2.0] * 4)  # node 2: 4 ranks on 2 cores


def scenario_with(groups) -> dict:
    return {"name": "groups", "platform": {"preset": "laptop-cpu", "nodes": 2, "node": {"devices": 2},
                                           "node_groups": groups},
            "workload": {"model": {"name": "mlp", "hidden": [8]}, "dataset": "digits", "batch_size": 16,
                         "optimizer": {"name": "sgd", "lr": 0.1}},
            "algorithm": {"name": "sync"}, "stop": {"steps": 3}}


def test_a_scenario_with_node_groups_runs_every_device_and_reads_back_as_itself(tmp_path):
    from simdist.api import run

    data = scenario_with([{"nodes": [1], "node": {"devices": 3, "device": {"cpus": 2.0}}}])
    scenario = scenario_from_dict(data)
    assert scenario.worker_count == 5
    assert scenario_from_dict(scenario.resolved()).resolved() == scenario.resolved()
    result = run(data)
    assert sorted(result.workers["worker"]) == [0, 1, 2, 3, 4]
    assert result.summary["steps"] == 3


@pytest.mark.parametrize("groups, field, says", [
    ([{"nodes": [2], "node": {}}], "platform", "node 2 does not exist"),
    ([{"nodes": [1], "node": {}}, {"nodes": [1], "node": {"devices": 3}}], "platform", "already in node_groups[0]"),
    ([{"nodes": [1], "node": {"devices": 0}}], "platform.node_groups[0].node.devices", "greater than or equal to 1"),
    ([{"nodes": [1], "node": {"nic_link": {"kind": "ib-xyz"}}}], "platform.node_groups[0].node.nic_link", "ib-xyz"),
    ([{"nodes": [], "node": {}}], "platform.node_groups[0].nodes", "at least 1"),
])
def test_bad_node_groups_are_refused_naming_the_field(groups, field, says):
    with pytest.raises(InputError) as caught:
        scenario_from_dict(scenario_with(groups))
    message = str(caught.value)
    assert field in message and says in message


def test_the_command_line_refuses_bad_node_groups_with_one_line_and_status_2(tmp_path, capsys):
    import yaml

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(scenario_with([{"nodes": [5], "node": {}}])))
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.yaml" in err[0] and "node 5 does not exist" in err[0]
    assert not (tmp_path / "out").exists()
