"""simdist.real without MPI: payload wire format, rank placement, calibration fits."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

from simdist.errors import InputError
from simdist.real.calibration import compute_cpu, fit_compute, fit_link, host_cpu_per_step
from simdist.real.placement import parse_affinity, plan, rank_spins
from simdist.real.wire import WireTensor, pack, unpack


def test_pack_moves_tensors_out_of_band_and_back():
    payload = {"grad": torch.arange(6, dtype=torch.float32), "half": torch.ones(3, dtype=torch.bfloat16),
               "version": 3, "list": [torch.zeros(2), "x"], "pair": (1, torch.ones(1))}
    packed = pack(payload)
    assert isinstance(packed["grad"], WireTensor) and isinstance(packed["list"][0], WireTensor)
    buffers = []
    data = pickle.dumps(packed, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == 4 and len(data) < 1000  # tensor bytes are not in the pickle stream
    back = unpack(pickle.loads(data, buffers=buffers))
    assert torch.equal(back["grad"], payload["grad"]) and back["half"].dtype == torch.bfloat16
    assert torch.equal(back["half"], payload["half"]) and back["list"][1] == "x" and back["version"] == 3
    assert isinstance(back["pair"], tuple) and torch.equal(back["pair"][1], torch.ones(1))


def test_affinity_parsing_and_errors():
    assert parse_affinity("0;1,2", 3) == [frozenset({0}), frozenset({1, 2}), frozenset({0})]
    with pytest.raises(InputError, match="core numbers"):
        parse_affinity("a;b", 2)


def test_auto_placement():
    assert plan("auto", 2, cores=[0, 1]).overrides() == ["platform.node.cores=2"]  # a core each: not pinned
    single = plan("auto", 4, workers=[0, 1, 2], cores=[0, 1])  # 3 workers + a server: consecutive pairs
    assert single.affinity == "0;0;1;1"
    assert single.overrides() == ["platform.node.core_sets=[{cores: 1, devices: [0, 1]}, {cores: 1, devices: [2, 3]}]"]
    ring = plan("auto", 3, cores=[0, 1])  # 3 ranks on 2 cores: round robin, the node's core sets
    assert ring.affinity == "0;1;0"
    assert ring.overrides() == ["platform.node.core_sets=[{cores: 1, devices: [0, 2]}, {cores: 1, devices: [1]}]"]
    nodes = plan("auto", 4, nodes=2, cores=[0, 1])  # daso 2 x 2: node n pinned to core n
    assert nodes.affinity == "0;0;1;1" and nodes.overrides() == ["platform.node.cores=1"]
    spread = plan("auto", 2, nodes=2, cores=[0, 1])  # one rank per node: nothing to share, not pinned
    assert spread.affinity == "" and spread.overrides() == ["platform.node.cores=1"]


def test_explicit_placement_gives_the_core_sets_of_one_node():
    placement = plan("0;1;1;0", 4, workers=[0, 1, 2], cores=[0, 1])
    assert placement.cpus == {} and placement.core_sets == ((1, (0, 3)), (1, (1, 2)))  # the server beside worker 0
    assert placement.overrides() == [
        "platform.node.core_sets=[{cores: 1, devices: [0, 3]}, {cores: 1, devices: [1, 2]}]"]
    with pytest.raises(InputError, match="equal or disjoint"):
        plan("0;0,1", 2, cores=[0, 1])
    uneven = plan("0;0;0;1", 4, cores=[0, 1])
    assert uneven.cpus == {} and uneven.core_sets == ((1, (0, 1, 2)), (1, (3,)))
    threads = plan("0,1;0,1;0,1;2,3", 4, threads=2, cores=[0, 1, 2, 3])  # two torch threads use two cores
    assert threads.core_sets == ((2, (0, 1, 2)), (2, (3,))) and threads.cpus == {r: 2.0 for r in range(4)}
    alone = plan("0,1;2,3", 2, threads=1, cores=[0, 1, 2, 3])  # nobody shares: one pool, one core per thread
    assert alone.core_sets is None and alone.overrides() == ["platform.node.cores=4"]


def test_placement_overrides_load_as_a_platform():
    from pathlib import Path

    from simdist.scenario import load_scenario

    scenario = Path(__file__).resolve().parents[1] / "scenarios" / "quickstart.yaml"
    placement = plan("0;1;1;0", 4, workers=[0, 1, 2], cores=[0, 1])
    node = load_scenario(scenario, ["platform.node.devices=4", *placement.overrides()]).platform.node
    assert node.cores is None and [(s.cores, s.devices) for s in node.core_sets] == [(1, [0, 3]), (1, [1, 2])]


def test_only_ranks_with_a_core_of_their_own_spin():
    assert rank_spins(0, 3, "0;1;1") and not rank_spins(1, 3, "0;1;1")


def test_fit_compute_and_link():
    workers = [{"sizes": [10, 20], "cpu_s": {"10": [2.0, 2.0], "20": [3.0, 3.0]},
                "wall_s": {"10": [2.0, 2.0], "20": [3.0, 3.0]}}]
    fit = fit_compute(workers)
    assert fit["t0_s"] == pytest.approx(1.0) and fit["t1_s"] == pytest.approx(0.1)
    p2p = fit_link({"p2p": {"bytes": [4, 1004], "one_way_s": [1e-5, 1e-5 + 1000 / 1e9]}}, "p2p")
    assert p2p["latency_s"] == pytest.approx(1e-5) and p2p["bandwidth_Bps"] == pytest.approx(1e9)
    assert fit_link({}, "p2p") is None


@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_allreduce_link_fit_inverts_the_simulated_ring(ranks):
    from simdist.calibrate.collective_fit import simulated_allreduce_s

    link = {"kind": "shm", "latency": 3e-5, "bandwidth": 2e9}
    platform = {"nodes": 1, "node": {"devices": ranks, "intra_link": link}}
    sizes = [4, 4_000_004]
    times = simulated_allreduce_s(platform, sizes)
    link = fit_link({"allreduce": {"ranks": ranks, "bytes": sizes, "time_s": list(times)}}, "allreduce")
    assert link["latency_s"] == pytest.approx(3e-5, rel=1e-3) and link["bandwidth_Bps"] == pytest.approx(2e9, rel=1e-3)


@pytest.mark.parametrize("bandwidth", [1e12, 1.0793e9, 123.0])
def test_link_overrides_load_as_scenario_fields(bandwidth):
    from pathlib import Path

    from simdist.real.describe import link_overrides
    from simdist.scenario import load_scenario

    scenario = Path(__file__).resolve().parents[1] / "scenarios" / "quickstart.yaml"
    items = link_overrides({"latency_s": 1.2e-4, "bandwidth_Bps": bandwidth}, None, nodes=2, devices=2)
    node = load_scenario(scenario, ["platform.nodes=2", "platform.node.devices=2", *items]).platform.node
    for link in (node.intra_link, node.nic_link):
        assert link.latency_s == pytest.approx(1.2e-4) and link.bandwidth_Bps == pytest.approx(bandwidth)
    assert node.nics == 2


def _span(rank, name, ts_us, dur_us, **args):
    return {"ph": "X", "cat": "compute", "name": name, "tid": rank, "pid": 0, "ts": ts_us, "dur": dur_us, "args": args}


def test_host_work_per_step_is_read_between_forward_backwards_only(tmp_path):
    # rank 0: host CPU grows 1 ms per step; evaluation spans inside three of the steps stamp the host
    # CPU 0.2 ms into them and must not split those steps in two
    events = [_span(0, "forward/backward", 1000 * i, 500, batch_size=64, cpu_s=0.004, host_cpu_s=0.001 * i)
              for i in range(6)]
    events += [_span(0, "nnt evaluation", 1000 * i + 600, 100, samples=200, inference_cpu_s=0.0001,
                     host_cpu_s=0.001 * i + 0.0002) for i in (1, 2, 3)]
    (tmp_path / "trace.json").write_text(json.dumps({"traceEvents": events}))
    assert host_cpu_per_step(tmp_path, [0]) == {"host_cpu_s": pytest.approx(0.001), "per_worker": {0: pytest.approx(0.001)}}
    assert len(compute_cpu(tmp_path)) == 6  # the compute fit sees forward/backwards only
