"""DASO's own work is charged, and so is host staging of its global syncs (simdist.platform.host_staging).

GPU runs use ``cluster-a100-hdr`` cut to 2 nodes × 2 A100 (host link: the A100's PCIe 4.0
x16, the ``pcie4`` link kind: 2.5 us, 31 GB/s per direction; host memory: the ``cpu``
device kind, 19 GB/s), an MLP 32-64-4 (2372 parameters) and 160 samples: 40 per worker,
5 batches of 8 per epoch.
"""

from __future__ import annotations

import pytest

from simdist.algorithms.base import AlgorithmContext
from simdist.errors import InputError
from simdist.ledger import PARTS, ledger_table
from simdist.metrics import spans_table
from simdist.platform.host_staging import copy_s, host_link_kind, host_path, host_reduction_s
from simdist.platform.topology import Platform
from simdist.scenario import scenario_from_dict
from simdist.simulate import simulate

from test_conformance import tiny_scenario

PARAMS = 32 * 64 + 64 + 64 * 4 + 4
PCIE4_LATENCY_S, PCIE4_BPS, HOST_MEMORY_BPS = 2.5e-6, 31e9, 19e9
STAGING = ("pack host staging", "update: host reduction", "unpack host staging")


def gpu_scenario(*, timing_only: bool = True, node: dict | None = None, **algorithm):
    return scenario_from_dict({
        "name": "daso-costs", "seed": 1,
        "platform": {"preset": "cluster-a100-hdr", "nodes": 2, "node": {"devices": 2, **(node or {})}},
        "workload": {"model": {"name": "mlp", "hidden": [64]},
                     "dataset": {"name": "synthetic", "samples": 160, "features": 32, "classes": 4},
                     "batch_size": 8, "optimizer": {"name": "sgd", "lr": 0.05}, "timing_only": timing_only},
        "algorithm": {"name": "daso", "schedule": "fixed", **algorithm},
        "stop": {"epochs": 1},
    })


def durations(result, name: str) -> list[float]:
    return [s.duration_s for s in result.recorder.spans if s.name == name]


def worker_parts(result) -> dict[str, float]:
    ledger = ledger_table(spans_table(result))
    return ledger[ledger["rank"].isin(result.workers)][list(PARTS)].sum().to_dict()


# -- the model's pure functions -------------------------------------------------------------------


def test_a_staged_copy_is_latency_plus_bytes_over_bandwidth():
    assert copy_s(3.1e6, 2.5e-6, 31e9) == pytest.approx(2.5e-6 + 1e-4, rel=1e-12)
    assert copy_s(0, 2.5e-6, 31e9) == 0.0
    # P = 4 members: each reduces 3/4 of the elements; 1e6 float32 elements, 12 B each, at 19 GB/s
    assert host_reduction_s(1_000_000, 4, 12.0, 19e9) == pytest.approx(0.75 * 12e6 / 19e9, rel=1e-12)
    assert host_reduction_s(1_000_000, 1, 12.0, 19e9) == 0.0


def test_gpus_reach_host_memory_over_their_pcie_generation_and_cpus_need_not():
    assert host_link_kind("a100").kind == "pcie4" and host_link_kind("h100").kind == "pcie5"
    assert host_link_kind("cpu") is None
    platform = Platform(gpu_scenario().platform)
    path = host_path(platform, 3)
    assert (path.link_kind, path.latency_s, path.bandwidth_Bps, path.host_memory_Bps) == (
        "pcie4", PCIE4_LATENCY_S, PCIE4_BPS, HOST_MEMORY_BPS)
    assert host_path(Platform(tiny_scenario("daso").platform), 0) is None


def test_a_real_run_prices_no_staging():
    ctx = AlgorithmContext(workers=[0], node_of=lambda r: 0, workload=None, batch_size=1, seed=0, max_epochs=1,
                           timing_only=False, make_data=lambda i: None, make_replica=lambda: None)
    assert ctx.host_path(0) is None


# -- what DASO's workers are charged ---------------------------------------------------------------


def test_workers_charge_pack_unpack_and_update_and_cpus_stage_nothing():
    result = simulate(tiny_scenario("daso"))  # laptop-cpu; global_staging defaults to host
    parts = worker_parts(result)
    assert all(parts[part] > 0 for part in ("forward_backward", "comm_wire", "pack", "unpack", "update"))
    assert not any(s.name in STAGING for s in result.recorder.spans)


@pytest.mark.parametrize("S, wire_bytes, reduce_bytes", [(0, 2, 18), (1, 4, 12)], ids=["blocking-bf16", "fp32"])
def test_host_staging_costs_latency_plus_bytes_over_the_host_link(S, wire_bytes, reduce_bytes):
    result = simulate(gpu_scenario(B=2, S=S))
    assert result.extra["param_count"] == PARAMS
    syncs = len([e for e in result.recorder.events if e["kind"] == "global_sync"])
    copy = PCIE4_LATENCY_S + PARAMS * wire_bytes / PCIE4_BPS
    reduction = (2 - 1) / 2 * PARAMS * reduce_bytes / HOST_MEMORY_BPS
    for name, expected in zip(STAGING, (copy, reduction, copy)):
        seen = durations(result, name)
        assert len(seen) == 2 * syncs  # both members of every sync
        assert seen == pytest.approx([expected] * len(seen), rel=1e-9)


def test_device_staging_charges_none_and_host_staging_adds_exactly_its_spans():
    host = simulate(gpu_scenario(B=1, S=0))
    device = simulate(gpu_scenario(B=1, S=0, global_staging="device"))
    assert not any(s.name in STAGING for s in device.recorder.spans)
    host_parts, device_parts = worker_parts(host), worker_parts(device)
    assert host_parts["pack"] - device_parts["pack"] == pytest.approx(sum(durations(host, STAGING[0])), rel=1e-9)
    assert host_parts["unpack"] - device_parts["unpack"] == pytest.approx(sum(durations(host, STAGING[2])), rel=1e-9)
    assert device_parts["pack"] > 0 and device_parts["unpack"] > 0 and device_parts["update"] > 0
    assert host.virtual_time_s > device.virtual_time_s


def test_the_node_s_host_link_overrides_the_device_kind_s():
    result = simulate(gpu_scenario(B=1, S=0, node={"host_link": {"kind": "pcie4", "bandwidth": "10GBps"}}))
    assert durations(result, "pack host staging")[0] == pytest.approx(PCIE4_LATENCY_S + PARAMS * 2 / 10e9, rel=1e-9)


@pytest.mark.parametrize("S", [0, 1])
def test_timing_only_charges_what_replay_charges_with_host_staging(S):
    replay = worker_parts(simulate(gpu_scenario(timing_only=False, B=2, S=S)))
    timing = worker_parts(simulate(gpu_scenario(timing_only=True, B=2, S=S)))
    assert timing == pytest.approx(replay, rel=1e-9, abs=1e-15)


def test_an_unknown_staging_is_refused_naming_the_field():
    with pytest.raises(InputError) as err:
        gpu_scenario(global_staging="gpu")
    assert err.value.field == "algorithm.global_staging"
    assert "host" in str(err.value) and "device" in str(err.value)
