"""``simdist calibrate noise``: step times in, the noise model's parameters and an overlay out.

The recovery test draws a synthetic run from known parameters with the simulator's own noise
model and fits it back; each tolerance is at least four standard errors of its estimate at
that size (given beside it), so a different seed would pass as well.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from simdist.calibrate.cli import main
from simdist.calibrate.noise_fit import NoiseFit
from simdist.calibrate.provenance import sha256_file, verify_content
from simdist.calibrate.step_times import read_step_times
from simdist.errors import InputError
from simdist.platform.noise import NoiseModel, NoiseSpec
from simdist.results import write_result_dir
from simdist.scenario import load_scenario, scenario_from_dict
from simdist.simulate import Simulation

from test_lockstep_group import timing_scenario

TRUE = dict(node_sigma=0.05, rank_sigma=0.08, correlation=0.6, straggler_probability=0.02,
            straggler_median=2.5, straggler_sigma=0.2)
NODES = np.repeat(np.arange(8), 4)  # 8 nodes x 4 ranks
STEPS = 512


def synthetic_times(seed: int = 11, **fields) -> np.ndarray:
    """Seconds of 32 ranks x 512 steps: static speeds differing by up to 60 % times the model's factors."""
    spec = NoiseSpec(**{**TRUE, **fields, "source": "synthetic"})
    speeds = 0.1 * (1 + 0.02 * np.arange(len(NODES)))[:, None]
    return speeds * NoiseModel(spec, seed, NODES).matrix(STEPS)


def write_csv(path, times: np.ndarray, nodes=NODES, *, header="rank,step,time_s,node") -> str:
    lines = [header] + [f"{r},{k},{float(times[r, k])!r},host{nodes[r]}" for r in range(times.shape[0])
                        for k in range(times.shape[1])]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_fit_recovers_the_parameters_a_run_was_drawn_from(tmp_path):
    times = read_step_times([write_csv(tmp_path / "t.csv", synthetic_times())])
    assert times.nodes_known and list(times.nodes) == list(NODES)
    fit = NoiseFit().fit(times)
    # 16,384 steps, AR(0.6): rank variance from ~7,700 effective draws (SE of rank_sigma ~1 %);
    # node variance from 8 node series (~1,900 effective draws, SE of node_sigma ~2-3 %);
    # pooled lag-1 SE ~0.01; 330 straggler steps: SE of p 0.0011, of the log-median 0.015,
    # of straggler_sigma ~5 %.
    assert fit.rank_sigma_ == pytest.approx(0.08, rel=0.08)
    assert fit.node_sigma_ == pytest.approx(0.05, rel=0.15)
    assert fit.correlation_ == pytest.approx(0.6, abs=0.05)
    assert fit.straggler_probability_ == pytest.approx(0.02, abs=0.005)
    assert fit.straggler_median_ == pytest.approx(2.5, rel=0.08)
    assert fit.straggler_sigma_ == pytest.approx(0.2, rel=0.25)
    assert fit.statistics_["static_rank_sd"] == pytest.approx(np.std(np.log(1 + 0.02 * np.arange(32))), rel=0.1)


def test_fit_of_independent_jitter_finds_no_node_component_or_correlation(tmp_path):
    times = synthetic_times(node_sigma=0.0, correlation=0.0, straggler_probability=0.0)
    fit = NoiseFit().fit(read_step_times([write_csv(tmp_path / "t.csv", times)]))
    assert fit.node_sigma_ < 0.015 and fit.correlation_ < 0.03  # SE of each ~0.005 here
    assert fit.rank_sigma_ == pytest.approx(0.08, rel=0.05) and fit.straggler_probability_ == 0.0


def test_command_writes_an_overlay_a_scenario_accepts(tmp_path, capsys):
    csv_path = write_csv(tmp_path / "t.csv", synthetic_times())
    out = tmp_path / "noise.yaml"
    assert main(["calibrate", "noise", csv_path, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "lag-1 autocorrelation" in printed and "q0.99" in printed and "--set 'compute.noise={" in printed
    document = yaml.safe_load(out.read_text())
    noise = document["compute"]["noise"]
    assert sha256_file(csv_path) in noise["source"] and verify_content(out)
    assert set(document["provenance"]["scores"]) >= {"lag1_difference", "max_quantile_log_error"}
    data = timing_scenario()
    data["compute"] = {"noise": noise}
    assert scenario_from_dict(data).compute.noise.rank_sigma == noise["rank_sigma"]


def test_reads_a_simdist_trace_and_its_nodes(tmp_path):
    data = timing_scenario()
    data["compute"] = {"noise": {**TRUE, "source": "test"}}
    data["stop"] = {"steps": 40}
    result = Simulation(scenario_from_dict(data), None).execute()
    write_result_dir(result, tmp_path / "run", plots=False)
    times = read_step_times([str(tmp_path / "run" / "trace.json")])
    assert times.format == "simdist-trace" and times.times_s.shape == (16, 40)
    assert times.nodes_known and list(times.nodes) == [r // 4 for r in range(16)]
    steps = read_step_times([str(tmp_path / "run" / "steps.csv")], ranks_per_node=4)
    assert steps.format == "simdist-steps" and steps.times_s.shape == (16, 40)


def torch_trace(rank: int, world: int, seconds: list[float]) -> dict:
    """A CPU PyTorch profiler trace: one ProfilerStep window and one operator per step."""
    events = []
    for step, s in enumerate(seconds):
        start = 1e6 * step
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                       "ts": start, "dur": 0.9e6})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": start + 10,
                       "dur": s * 1e6})
    return {"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": world},
            "traceEvents": events}


def test_reads_one_pytorch_profiler_trace_per_rank(tmp_path):
    times = synthetic_times()[:4, :10] * 2
    paths = []
    for rank in (1, 0, 3, 2):  # any order: the rank comes from distributedInfo
        paths.append(tmp_path / f"rank{rank}.json")
        paths[-1].write_text(json.dumps(torch_trace(rank, 4, list(times[rank]))))
    read = read_step_times([str(p) for p in paths], ranks_per_node=2)
    assert read.format == "torch-profiler" and list(read.nodes) == [0, 0, 1, 1]
    assert np.allclose(read.times_s, times, rtol=1e-9)
    with pytest.raises(InputError, match=r"rank: rank 2 is missing: the run had 4 ranks"):
        read_step_times([str(p) for p in paths[:2]])


def bad_csv(tmp_path, change: str) -> str:
    times = synthetic_times()[:4, :10]
    rows = [[r, k, repr(float(times[r, k])), f"n{r // 2}"] for r in range(4) for k in range(10)]
    header = "rank,step,time_s,node"
    if change == "negative":
        rows[5][2] = "-0.1"
    elif change == "nan":
        rows[5][2] = "nan"
    elif change == "missing rank":
        rows = [row for row in rows if row[0] != 2]
    elif change == "missing step":
        rows = [row for row in rows if (row[0], row[1]) != (1, 4)]
    elif change == "unknown column":
        header = "rank,step,time_ms,node"
    elif change == "rank not an integer":
        rows[3][0] = "r1"
    elif change == "few steps":
        rows = [row for row in rows if row[1] < 5]
    elif change == "two nodes":
        rows[3][3] = "n9"
    elif change == "other work":  # a span cut off where the run stopped: a hundredth of the others
        rows[19][2] = repr(float(times[1, 9]) / 100)
    path = tmp_path / "bad.csv"
    path.write_text("\n".join([header] + [",".join(map(str, row)) for row in rows]) + "\n")
    return str(path)


@pytest.mark.parametrize("change, phrase", [
    ("negative", "line 7: time_s: must be greater than zero"),
    ("nan", "line 7: time_s: must be a finite number"),
    ("missing rank", "rank: rank 2 is missing"),
    ("missing step", "step: rank 1 has no step 4"),
    ("unknown column", "header: unknown column 'time_ms'"),
    ("rank not an integer", "line 5: rank: must be a non-negative integer"),
    ("few steps", "step: 5 steps per rank; fitting noise needs at least 8"),
    ("two nodes", "node: rank 0 appears on two nodes"),
    ("other work", "time_s: rank 1 step 9 took"),
])
def test_bad_input_is_one_line_naming_file_and_field_and_exit_2(tmp_path, capsys, change, phrase):
    path = bad_csv(tmp_path, change)
    assert main(["calibrate", "noise", path]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"simdist: error: {path}: ") and phrase in err


@pytest.mark.parametrize("argv", [["--threshold", "0.9"], ["--steps", "3"], ["--frobnicate"], ["--format", "osu"]])
def test_bad_options_exit_2(tmp_path, capsys, argv):
    with pytest.raises(SystemExit) as info:
        main(["calibrate", "noise", write_csv(tmp_path / "t.csv", synthetic_times()[:4, :10]), *argv])
    assert info.value.code == 2 and "error:" in capsys.readouterr().err


def test_steps_option_fits_runs_of_unequal_length(tmp_path, capsys):
    path = bad_csv(tmp_path, "missing step")  # rank 1 stops short of the others at step 4
    assert main(["calibrate", "noise", path, "--steps", "8"]) == 2  # 0..7 still misses rank 1's step 4
    long = synthetic_times()[:4, :20]
    rows = [f"{r},{k},{float(long[r, k])!r}" for r in range(4) for k in range(20 if r != 2 else 15)]
    (tmp_path / "uneven.csv").write_text("rank,step,time_s\n" + "\n".join(rows) + "\n")
    assert main(["calibrate", "noise", str(tmp_path / "uneven.csv")]) == 2
    assert "--steps N fits the first N" in capsys.readouterr().err
    assert main(["calibrate", "noise", str(tmp_path / "uneven.csv"), "--skip", "2", "--steps", "13"]) == 0
    assert "4 ranks on 4 node(s) (nodes unknown: one per rank), 13 steps each" in capsys.readouterr().out


@pytest.mark.parametrize("noise, field", [
    ({"correlation": 1.0}, "compute.noise.correlation"),
    ({"rank_sigma": -0.1}, "compute.noise.rank_sigma"),
    ({"node_sigma": ".nan"}, "compute.noise.node_sigma"),
    ({"rank_sigma": 0.1, "source": None}, "compute.noise"),
])
def test_bad_overlay_values_are_refused_naming_file_and_field(tmp_path, noise, field):
    data = timing_scenario()
    data["compute"] = {"noise": {"source": "x", **noise}}
    text = yaml.safe_dump(data).replace("'.nan'", ".nan")
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(InputError) as info:
        load_scenario(tmp_path / "s.yaml")
    assert str(info.value).startswith(f"{tmp_path / 's.yaml'}: {field}:")


# -- a compute profile's timed steps ---------------------------------------------------------

def write_profile(path, batches, seconds, models=("mlp",)) -> str:
    """A compute profile whose models carry ``timed_steps`` (as calibrate compute writes them)."""
    entry = {"t0_s": 1e-3, "t1_s": 1e-5, "timed_steps": {"batch": list(batches), "seconds": list(seconds)}}
    path.write_text(yaml.safe_dump({"device": "host-cpu", "models": {m: dict(entry) for m in models}}))
    return str(path)


def test_a_compute_profiles_timed_steps_fit_the_hosts_rank_noise(tmp_path):
    # steps timed round-robin over two batch sizes, one twice as long: each is centred on its own size
    rng = np.random.default_rng(5)
    batches = np.tile(np.repeat([64, 128], 4), 64)
    seconds = np.where(batches == 64, 0.01, 0.02) * np.exp(rng.normal(0.0, 0.05, len(batches)))
    times = read_step_times([write_profile(tmp_path / "p.yaml", batches.tolist(), seconds.tolist())])
    assert times.format == "compute-profile" and times.times_s.shape == (1, len(batches))
    assert list(times.batches[0]) == batches.tolist()
    fit = NoiseFit().fit(times)
    assert fit.rank_sigma_ == pytest.approx(0.05, rel=0.1) and fit.node_sigma_ == 0.0  # 512 draws: SE ~3 %
    assert fit.correlation_ < 0.1


def test_a_profile_measured_by_calibrate_compute_feeds_calibrate_noise(tmp_path, capsys):
    from test_calibrate_compute_scenario import TINY_BUDGET, write_scenario

    profile = tmp_path / "prof.yaml"
    assert main(["calibrate", "compute", "--scenario", write_scenario(tmp_path), *TINY_BUDGET,
                 "--out", str(profile)]) == 0
    timed = yaml.safe_load(profile.read_text())["models"]["mlp"]["timed_steps"]
    entry = yaml.safe_load(profile.read_text())["models"]["mlp"]
    assert len(timed["seconds"]) == sum(entry["samples"]) and sorted(set(timed["batch"])) == entry["batch_sizes"]
    out = tmp_path / "noise.yaml"
    assert main(["calibrate", "noise", str(profile), "--out", str(out)]) == 0
    noise = yaml.safe_load(out.read_text())["compute"]["noise"]
    assert noise["rank_sigma"] >= 0 and noise["node_sigma"] == 0 and sha256_file(profile) in noise["source"]


@pytest.mark.parametrize("models, timed, phrase", [
    (("mlp", "cnn"), None, "models: holds 2 models with timed_steps (cnn, mlp)"),
    (("mlp",), {"batch": [1, 2], "seconds": [0.1]}, "models.mlp.timed_steps: must hold the lists batch and seconds"),
    (("mlp",), {"batch": [64] * 9, "seconds": [0.1] * 8 + [-1]}, "models.mlp.timed_steps.seconds[8]: must be "
                                                                   "greater than zero"),
])
def test_a_bad_compute_profile_is_one_line_naming_file_and_field(tmp_path, capsys, models, timed, phrase):
    path = write_profile(tmp_path / "p.yaml", [64] * 9, [0.1] * 9, models)
    if timed is not None:
        document = yaml.safe_load(open(path))
        document["models"]["mlp"]["timed_steps"] = timed
        (tmp_path / "p.yaml").write_text(yaml.safe_dump(document))
    assert main(["calibrate", "noise", path]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and phrase in err and path in err
