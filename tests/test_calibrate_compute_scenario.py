"""``simdist calibrate compute --scenario``: the scenario's own model, at its batch sizes, under the
key the simulator looks it up by; residuals per batch size; bad input is one line and exit 2."""

from __future__ import annotations

import pytest
import yaml

from simdist import metrics
from simdist.calibrate.cli import main
from simdist.calibrate.compute_options import MIN_FIT_SIZES, SPREAD, spread_batch_sizes
from simdist.calibrate.compute_profile import fit_report, misfit_ranges, plan_scenario
from simdist.calibrate.provenance import sha256_file, verify_content
from simdist.scenario import load_scenario
from simdist.platform.op_costs import OPS
from simdist.simulate import Simulation, simulate

# one warm-up call and three timed ones per size: with none and two, one slow call on a loaded host
# flattened the line and the fit refused t1 = 0 (once in six full runs)
TINY_BUDGET = ["--repeats", "3", "--rounds", "1", "--warmup", "1"]


def write_scenario(folder, name="s.yaml", **changes) -> str:
    """A timing-only sync scenario on 2 CPU ranks whose mlp's time clearly grows with the batch,
    reading the profile ``prof.yaml`` next to it; ``changes`` replace top-level keys."""
    data = {
        "name": "calibrate-me",
        "seed": 3,
        "platform": {"preset": "laptop-cpu", "node": {"devices": 2}},
        "workload": {"model": {"name": "mlp", "hidden": [256, 256]},
                     "dataset": {"name": "synthetic", "samples": 600, "features": 64, "classes": 10},
                     "batch_size": 64, "timing_only": True, "optimizer": {"name": "sgd", "lr": 0.05}},
        "algorithm": {"name": "sync"},
        "stop": {"steps": 3},
        "compute": {"profiles": ["prof.yaml"]},
        "outputs": {"plots": False, "trace": False},
        **changes,
    }
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    err = captured.err
    assert err.count("\n") == 1 and "Traceback" not in err + captured.out, err
    return err.strip()


def test_scenario_profile_is_the_one_its_run_uses(tmp_path, capsys):
    scenario_path = write_scenario(tmp_path)
    out = tmp_path / "prof.yaml"
    assert main(["calibrate", "compute", "--scenario", scenario_path, *TINY_BUDGET, "--out", str(out)]) == 0
    printed = capsys.readouterr().out

    document = yaml.safe_load(out.read_text())
    assert document["device"] == "host-cpu" and set(document["models"]) == {"mlp"}
    entry = document["models"]["mlp"]
    assert entry["options"] == {"hidden": [256, 256]} and entry["input_shape"] == [64]
    assert entry["dataset"] == "synthetic" and entry["dtype"] == "float32" and entry["optimizer"]["lr"] == 0.05
    sizes = entry["batch_sizes"]
    assert 64 in sizes and len(sizes) >= MIN_FIT_SIZES and min(sizes) == 64 / SPREAD and max(sizes) == 64 * SPREAD
    assert document["scenario"]["batch_range"] == [64, 64]
    assert document["provenance"]["inputs"][0]["sha256"] == sha256_file(scenario_path)
    assert "--scenario" in document["provenance"]["generated_by"] and verify_content(out)
    # the ops timed at the scenario's sizes: its parameter count, its optimizer, caches flushed
    basis = document["ops_basis"]
    assert basis["params"] == 64 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10
    assert "optimizer step (sgd)" in basis["update"]
    assert basis["before each timed call"] == "a training step of the scenario's model at batch 64"
    assert set(document["ops"]) == set(OPS) and all(v > 0 for v in document["ops"].values())

    for batch in sizes:  # one residual row per measured batch size, then the verdict
        assert any(line.split()[:1] == [str(batch)] and line.endswith("%") for line in printed.splitlines())
    assert "residual per batch size" in printed and ("within 5%" in printed or "cannot fit batch" in printed)
    assert "lists" in printed and "its runs use this entry" in printed

    scenario = load_scenario(scenario_path)
    timing = Simulation(scenario).compute.timing(0)
    assert timing.source == str(out)  # this entry, not the shipped host-cpu one
    # unscaled (same FLOPs); the measured step includes the optimizer step, which sync charges as its update
    assert (timing.t0_s + timing.optimizer_step_s, timing.t1_s) == pytest.approx((entry["t0_s"], entry["t1_s"]))
    assert timing.optimizer_step_s > 0 and not timing.includes_optimizer_step
    result = simulate(scenario)
    assert list(metrics.workers_table(result)["steps"]) == [3, 3]
    # forward/backward takes the entry's time less the optimizer step, which the run charges as its update
    passes = [s.end_s - s.start_s for s in result.recorder.spans if s.name == "forward/backward"]
    updates = [s.end_s - s.start_s for s in result.recorder.spans if s.name == "update"]
    assert len(passes) == len(updates) == 6
    step_s = entry["t0_s"] + entry["t1_s"] * 64
    assert [p + timing.optimizer_step_s for p in passes] == pytest.approx([step_s] * 6, rel=1e-6)
    assert updates == pytest.approx([timing.optimizer_step_s] * 6, rel=1e-6)  # the profile's measured update op


def test_dbs_scenario_is_timed_over_its_whole_batch_range(tmp_path):
    path = write_scenario(tmp_path, platform={"preset": "laptop-cpu", "node": {"devices": 3}}, workers=2,
                          algorithm={"name": "dbs", "b_min": 8, "b_max": 200})
    target = plan_scenario(path, "cpu")
    assert target.batch_range == (8, 200) and target.range_field.startswith("algorithm.b_min")
    assert min(target.batch_sizes) == 4 and max(target.batch_sizes) == 400
    assert {8, 64, 200} <= set(target.batch_sizes)
    three_ranks = {"preset": "laptop-cpu", "node": {"devices": 3}}
    default = plan_scenario(write_scenario(tmp_path, "d.yaml", platform=three_ranks, workers=2, algorithm="dbs"), "cpu")
    assert default.batch_range == (1, 4 * 64)  # b_min 1, b_max 4 x the base batch


def test_spread_has_at_least_four_sizes_around_the_scenarios_batch():
    assert spread_batch_sizes(1, 1, 1) == [1, 2, 3, 4]
    sizes = spread_batch_sizes(32, 32, 32)
    assert 32 in sizes and sizes[0] == 16 and sizes[-1] == 64 and len(sizes) >= MIN_FIT_SIZES


def test_fit_report_names_the_batches_the_line_misses():
    assert misfit_ranges([1, 2, 4, 8, 16], [0.2, -0.07, 0.01, 0.06, float("nan")]) == [(1, 2), (8, 16)]
    sizes = [1, 2, 4, 8, 16, 32]
    measured = [10e-6 + 1e-6 * b for b in sizes]
    measured[0] *= 1.3  # the smallest batch takes longer than the line says
    t0, t1 = 10e-6, 1e-6
    entry = {"t0_s": t0, "t1_s": t1, "r2": 0.99, "batch_sizes": sizes, "statistic_s": measured}
    lines = fit_report("mlp", entry)
    assert len(lines) == 2 + len(sizes) + 1
    assert lines[2].split()[0] == "1" and lines[2].endswith("-23.1%")
    assert lines[-1].strip().startswith("the line cannot fit batch 1 within 5%")
    entry["statistic_s"] = [t0 + t1 * b for b in sizes]
    assert fit_report("mlp", entry)[-1].strip() == "within 5% at every measured batch size (1-32)"


def exit_status(argv) -> int:
    """What ``simdist`` would exit with: the handler's status, or argparse's."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


PREVIOUS = "device: host-cpu\nmodels: {mlp: {t0_s: 1.0e-4, t1_s: 1.0e-6}}\nprovenance: {generated_by: earlier}\n"


@pytest.mark.parametrize("case, expected", [
    ("missing", ["nope.yaml", "not found"]),
    ("invalid", ["s.yaml", "workload.batch_size"]),
    ("unbuildable", ["s.yaml", "workload.model", "cnn"]),
    ("wrong-device", ["s.yaml", "platform.node.device.kind", "a100"]),
    ("too-few-sizes", ["--batch-sizes", "at least 4"]),
    ("with-models", ["--models", "--scenario"]),
])
def test_bad_input_is_one_line_exit_2_and_loses_nothing(tmp_path, capsys, case, expected):
    out = tmp_path / "prof.yaml"
    out.write_text(PREVIOUS)  # a profile written earlier: left as it was
    argv = ["calibrate", "compute", *TINY_BUDGET, "--out", str(out), "--scenario"]
    if case == "missing":
        argv.append(str(tmp_path / "nope.yaml"))
    elif case == "invalid":
        argv.append(write_scenario(tmp_path, workload={"model": "mlp", "batch_size": 0}))
    elif case == "unbuildable":  # cnn needs images; the synthetic set has flat features
        argv.append(write_scenario(tmp_path, workload={"model": "cnn", "dataset": {"name": "synthetic"}}))
    elif case == "wrong-device":
        argv.append(write_scenario(tmp_path, platform={"preset": "dgx-a100"}))
    elif case == "too-few-sizes":
        argv += [write_scenario(tmp_path), "--batch-sizes", "8,16,32"]
    else:
        argv += [write_scenario(tmp_path), "--models", "mlp"]
    assert exit_status(argv) == 2
    line = one_error_line(capsys)
    assert all(word in line for word in expected), line
    assert out.read_text() == PREVIOUS


def test_a_file_not_written_by_simdist_is_refused_before_timing(tmp_path, capsys):
    out = tmp_path / "prof.yaml"
    out.write_text("device: host-cpu\nmodels: {mlp: {t0_s: 1.0e-4, t1_s: 1.0e-6}}\n")  # hand-written
    assert main(["calibrate", "compute", "--scenario", write_scenario(tmp_path), *TINY_BUDGET,
                 "--out", str(out)]) == 2
    assert "not written by simdist" in one_error_line(capsys)
    assert "t0_s: 1.0e-4" in out.read_text()
