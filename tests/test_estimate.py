"""The work estimate: counts from the scenario alone, and refusals that name the field to change."""

from __future__ import annotations

from pathlib import Path

import pytest

from simdist.errors import InputError
from simdist.estimate import MAX_WALL_S, check_work, estimate_work
from simdist.scenario import load_scenario, scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"


def quickstart(*overrides: str):
    return load_scenario(QUICKSTART, list(overrides))


def test_quickstart_counts_follow_from_its_fields():
    scenario = quickstart()
    estimate = estimate_work(scenario)
    # MLP 64-128-10: 64*128 + 128 + 128*10 + 10 parameters
    assert estimate.params == 64 * 128 + 128 + 128 * 10 + 10
    train = 1797 - round(1797 * 0.2)  # the test split rounds to whole samples
    assert estimate.passes == pytest.approx(20 * (train / 32 + 4))
    assert estimate.evaluations == pytest.approx(estimate.passes / 4 / 10 + 1)
    assert estimate.memory_bytes < 64 * 2**20 and estimate.wall_s < 60
    check_work(scenario, estimate)


def test_steps_bound_the_passes_when_they_come_first():
    estimate = estimate_work(quickstart("stop.steps=10"))
    assert estimate.passes == 40 and estimate.passes_field == "stop.steps"


def test_virtual_time_alone_is_bounded_by_the_fastest_compute_step():
    short = estimate_work(quickstart("stop.epochs=null", "stop.virtual_time=10ms"))
    long = estimate_work(quickstart("stop.epochs=null", "stop.virtual_time=1s"))
    assert short.passes_field == "stop.virtual_time"
    assert long.passes == pytest.approx(100 * short.passes, rel=0.05)


def test_two_layers_of_sixteen_million_units_are_refused_for_memory_naming_the_model():
    scenario = quickstart("workload.model.hidden=[16000000, 16000000]")
    estimate = estimate_work(scenario)
    assert estimate.params > 2.5e14
    with pytest.raises(InputError, match="of memory") as err:
        check_work(scenario, estimate)
    assert err.value.field == "workload.model" and "--force" in str(err.value)
    check_work(scenario, estimate, force=True)  # the user's call


def test_a_nanosecond_evaluation_interval_is_refused_naming_it():
    scenario = quickstart("evaluation.every_time=1ns", "evaluation.every_steps=null")
    estimate = estimate_work(scenario)
    assert estimate.wall_s > MAX_WALL_S
    with pytest.raises(InputError, match="raise evaluation.every_time") as err:
        check_work(scenario, estimate)
    assert err.value.field == "evaluation.every_time"


def test_memory_limit_is_the_hosts_unless_given():
    scenario = quickstart()
    estimate = estimate_work(scenario)
    with pytest.raises(InputError, match="more than"):
        check_work(scenario, estimate, memory_limit_bytes=estimate.memory_bytes / 2)


def test_timing_only_holds_one_model_and_labels_but_no_replicas():
    scenario = load_scenario(ROOT / "scenarios" / "resnet50_horovod_timing.yaml")
    estimate = estimate_work(scenario)
    assert estimate.params == pytest.approx(25.6e6, rel=0.01)
    one_model, labels = estimate.params * 4 * 3, 1_281_167 * 8
    assert estimate.evaluations == 0 and one_model + labels < estimate.memory_bytes < 1.2 * (one_model + labels) + 2**26


def test_an_imported_model_is_estimated_without_its_parameters():
    data = {"platform": "laptop-cpu", "workload": {"model": "os.path:join", "allow_code_import": True},
            "algorithm": "sync", "stop": {"steps": 2}}
    estimate = estimate_work(scenario_from_dict(data))
    assert estimate.params is None and estimate.passes == 2 * estimate.ranks  # laptop-cpu: 4 workers


def _scenario_file(tmp_path, **extra) -> Path:
    import yaml

    data = yaml.safe_load(QUICKSTART.read_text())
    data["stop"] = {"steps": 2}
    data.update(extra)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("command", ["sweep", "compare"])
def test_sweeps_and_comparisons_refuse_an_oversized_point_before_running_any(command, tmp_path, capsys):
    from simdist.cli import main

    huge = {"workload.model.hidden": [16000000, 16000000]}
    extra = ({"sweep": {"points": [{"seed": 1}, huge]}} if command == "sweep"
             else {"compare": [{"label": "small", "set": {"seed": 1}}, {"label": "huge", "set": huge}]})
    path = _scenario_file(tmp_path, **extra)
    assert main([command, str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    line, = capsys.readouterr().err.strip().splitlines()
    assert "of memory" in line and "--force" in line
    assert not (tmp_path / "out").exists()  # nothing ran, nothing was written


def test_run_with_force_skips_the_refusal(tmp_path, monkeypatch, capsys):
    from simdist import estimate
    from simdist.cli import main

    path = _scenario_file(tmp_path)
    monkeypatch.setattr(estimate, "MAX_WALL_S", 1e-9)  # every run is "too long"
    assert main(["run", str(path), "--out", str(tmp_path / "a"), "--quiet"]) == 2
    assert "would take" in capsys.readouterr().err
    assert main(["run", str(path), "--out", str(tmp_path / "b"), "--quiet", "--force"]) == 0
