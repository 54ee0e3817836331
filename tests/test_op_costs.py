"""The algorithms' own elementwise work: measured by calibrate compute, else estimated from memory bandwidth."""

from __future__ import annotations

import pytest

from simdist.calibrate.op_profile import measure_ops
from simdist.errors import InputError
from simdist.platform.op_costs import OPS, OpCostModel, bytes_per_param, ops_from_profile
from simdist.simulate import simulate

from conftest import build_platform
from test_conformance import tiny_scenario

CPU_MEMORY_BPS = 19e9  # the cpu device kind's stated memory bandwidth


def test_without_a_measurement_an_op_costs_its_bytes_over_the_memory_bandwidth():
    model = OpCostModel(build_platform("laptop-cpu", node={"devices": 2}))
    assert model.seconds(0, "update", 10**6) == pytest.approx(12e6 / CPU_MEMORY_BPS)
    assert model.seconds(1, "average", 10**6, buffers=3) == pytest.approx(16e6 / CPU_MEMORY_BPS)
    assert model.seconds(0, "compensate", 10**6) == pytest.approx(68e6 / CPU_MEMORY_BPS)
    assert model.seconds(0, "merge", 10**6) == pytest.approx(48e6 / CPU_MEMORY_BPS)
    assert {row["basis"] for row in model.describe()} == {"estimate"}
    assert "19.0 GB/s" in model.describe()[0]["source"]


def test_a_rank_with_half_a_core_streams_at_half_the_rate():
    platform = build_platform("laptop-cpu", node={"devices": 2, "device": {"kind": "cpu", "cpus": 0.5}})
    assert OpCostModel(platform).seconds(0, "copy", 1000) == pytest.approx(2 * 8000 / CPU_MEMORY_BPS)


def test_a_measured_op_replaces_the_estimate():
    measured = ops_from_profile({"device": "host-cpu", "ops": {"update": 2e-9, "average": 1e-9}}, "p.yaml")
    model = OpCostModel(build_platform("laptop-cpu", node={"devices": 1}), measured)
    assert model.seconds(0, "update", 1000) == pytest.approx(2e-6)
    assert model.seconds(0, "average", 1000, buffers=4) == pytest.approx(4e-6)
    assert model.seconds(0, "copy", 1000) == pytest.approx(8000 / CPU_MEMORY_BPS)  # not measured: estimated
    assert {(r["op"], r["basis"]) for r in model.describe()} == {("update", "measured"), ("average", "measured"),
                                                                ("copy", "estimate")}


@pytest.mark.parametrize("ops, message", [
    ({"axpy": 1e-9}, "ops.axpy: unknown op"),
    ({"update": -1e-9}, "ops.update: must be seconds per parameter"),
    ({"update": 1.0}, "ops.update: must be seconds per parameter"),
    ({"update": True}, "ops.update: must be seconds per parameter"),
    ([1e-9], "ops: must map an op"),
])
def test_a_bad_ops_section_names_the_file_and_field(ops, message):
    with pytest.raises(InputError, match=message) as caught:
        ops_from_profile({"device": "host-cpu", "ops": ops}, "profile.yaml")
    assert "profile.yaml" in str(caught.value)


def test_calibrate_compute_times_every_op():
    per_param = measure_ops(params=1 << 16, budget_s=0.01)
    assert set(per_param) == set(OPS) and all(0 < s < 1e-6 for s in per_param.values())


def test_an_op_can_be_timed_with_another_kernel_over_its_own_elements():
    calls = []
    per_param = measure_ops(params=1 << 10, budget_s=0.0, replace={"update": (lambda: calls.append(1), 500)})
    assert len(calls) >= 3 + 5  # warmed up, then at least five timed calls
    assert 0 < per_param["update"] < 1e-3 and set(per_param) == set(OPS)


def test_what_runs_between_timed_calls_runs_before_every_one_untimed():
    order = []
    measure_ops(params=1 << 8, budget_s=0.0, replace={"update": (lambda: order.append("kernel"), 1 << 8)},
                between=lambda: order.append("between"))
    kernels = [i for i, o in enumerate(order) if o == "kernel"]  # only the replaced op's kernel records
    assert kernels[:3] == [0, 1, 2]  # three warm-ups back to back, first
    assert all(order[i - 1] == "between" for i in kernels[3:])  # every timed call right after it
    assert len(kernels) - 3 >= 5


def test_scenario_ops_say_what_ran_before_each_timed_call():
    from simdist.calibrate.op_profile import measure_scenario_ops
    from simdist.training.optim import OptimizerConfig
    from simdist.training.workload import build_workload

    workload = build_workload("mlp", {"hidden": [32]}, "synthetic", {"samples": 200, "features": 16}, OptimizerConfig(),
                              0)
    steps = []
    ops, basis = measure_scenario_ops(workload, 8, budget_s=0.0, between=(lambda: steps.append(1), "a step"))
    assert set(ops) == set(OPS) and all(v > 0 for v in ops.values()) and steps
    assert basis["before each timed call"] == "a step" and basis["params"] == workload.param_count
    assert "batch fetch at batch 8" in basis["gather"]
    _, flushed = measure_scenario_ops(workload, 8, budget_s=0.0)
    assert flushed["before each timed call"].startswith("a cache flush")


def test_ops_need_at_least_one_gathered_row():
    with pytest.raises(ValueError, match="at least 64 parameters"):
        measure_ops(params=10, budget_s=0.0)


@pytest.mark.parametrize("sizes, expected", [
    ({"index0": "32K", "index2": "1024K", "index3": "32768K"}, 64 << 20),  # twice the largest
    ({}, 64 << 20),  # the OS reports none
    ({"index3": "2G"}, 1 << 30),  # capped
    ({"index0": "garbage", "index1": "512K"}, 1 << 20),  # unreadable entries skipped
])
def test_the_cache_flush_writes_twice_the_largest_cache(tmp_path, sizes, expected):
    from simdist.calibrate.op_profile import cache_flush_bytes

    for entry, size in sizes.items():
        (tmp_path / entry).mkdir()
        (tmp_path / entry / "size").write_text(size + "\n")
    assert cache_flush_bytes(str(tmp_path)) == expected


def test_bytes_per_parameter_follow_what_each_op_reads_and_writes():
    assert [bytes_per_param(op) for op in ("update", "compensate", "merge", "copy")] == [12, 68, 48, 8]
    assert bytes_per_param("average", buffers=3) == 16


def test_a_run_charges_and_records_the_ops_its_algorithm_does():
    result = simulate(tiny_scenario("nnt"))
    # nnt: its own and its neighbours' gradients applied (update), each of its gradients into a send buffer (copy)
    assert {(r["device"], r["op"], r["basis"]) for r in result.extra["op_costs"]} == {
        ("cpu", "update", "estimate"), ("cpu", "copy", "estimate")}
    updates = [s for s in result.recorder.spans if s.name == "nnt neighbour update"]
    assert updates and all(s.duration_s > 0 for s in updates)


def test_dcs3gd_charges_its_step_its_move_to_the_average_and_its_compensation():
    result = simulate(tiny_scenario("dcs3gd"))
    assert {r["op"] for r in result.extra["op_costs"]} == {"update", "merge", "compensate"}
    spans = [s for s in result.recorder.spans if s.rank == 0 and s.name in ("dcs3gd update", "dcs3gd final merge")]
    first, later, final = spans[0], spans[1], spans[-1]
    # estimates: the first step is the optimizer step alone (12 bytes per parameter); every later one adds the move
    # to the average (48) and the compensation (68); the final merge is one move (48)
    assert later.duration_s == pytest.approx(first.duration_s * (12 + 48 + 68) / 12)
    assert final.name == "dcs3gd final merge" and final.duration_s == pytest.approx(first.duration_s * 48 / 12)


def test_an_aggregating_server_sums_every_push_and_applies_once_per_round():
    scenario = tiny_scenario("nsoftsync")  # n = 1: the server averages all 3 workers' gradients per round
    result = simulate(scenario.model_copy(update={"algorithm": {**scenario.algorithm, "n": 1}}))
    server = [r.rank for r in result.ranks if r.role == "server"][0]
    spans = [s for s in result.recorder.spans if s.rank == server]
    accumulated = [s for s in spans if s.name == "accumulate"]
    applied = [s for s in spans if s.name == "apply"]
    rounds = len({row["version"] for row in result.recorder.updates})
    # a round's first gradient starts the sum as it is (no pass, no span); each further one is a sum pass
    assert len(accumulated) == len(result.recorder.updates) - rounds and len(applied) == rounds
    assert accumulated[0].duration_s > 0
    # the round's apply: the update (12 bytes per parameter) plus the 1/c scaling pass (copy: 8)
    assert applied[0].duration_s == pytest.approx(accumulated[0].duration_s * (12 + 8) / 12)


def test_an_asynchronous_server_applies_every_push():
    result = simulate(tiny_scenario("asgd"))
    server = [r.rank for r in result.ranks if r.role == "server"][0]
    names = {s.name for s in result.recorder.spans if s.rank == server and s.kind == "compute"}
    applied = [s for s in result.recorder.spans if s.rank == server and s.name == "apply"]
    assert names == {"apply"} and len(applied) == len(result.recorder.updates)


def test_profile_ops_merge_later_files_over_earlier_ones(tmp_path):
    from simdist.platform.compute import load_profile_ops

    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("device: host-cpu\nmodels: {}\nops: {update: 2.0e-9, copy: 1.0e-9}\n")
    second.write_text("device: host-cpu\nmodels: {}\nops: {update: 3.0e-9}\n")
    assert load_profile_ops([first, second]) == {"host-cpu": {"update": 3e-9, "copy": 1e-9}}


def test_the_op_cost_benchmark_prints_every_op_four_ways(capsys):
    from helpers import load_benchmark

    assert load_benchmark("op_costs_at_size").main(["--budget-s", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "9,610 parameters, batch 32" in lines[0]
    assert lines[1].split()[:2] == ["op", "default"] and "after step us" in lines[1]
    rows = {line.split()[0]: [float(v) for v in line.split()[1:]] for line in lines[2:2 + len(OPS)]}
    assert set(rows) == set(OPS) and all(len(v) == 5 and min(v) > 0 for v in rows.values())
