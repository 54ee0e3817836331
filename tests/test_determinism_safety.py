"""Determinism (same scenario and seed → same summary.json hash) and input safety.

``summary.json`` holds ``wall_time_s``, the host time of the run, which no rerun can repeat;
the hash is taken over the summary with that one key removed. Determinism across ``--jobs``
and sweep backends is tested with the sweeps (tests/test_sweep.py, tests/test_sweep_dask.py);
here a fault scenario is checked across ``--jobs 1`` and ``--jobs 2`` too.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from pathlib import Path

import pytest
import yaml

from simdist.cli import main
from simdist.errors import InputError
from simdist.scenario import scenario_from_dict
from simdist.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
PROFILE = str(Path(__file__).parent / "data" / "tiny_profile.yaml")


def summary_hash(result_dir: Path) -> str:
    summary = json.loads((result_dir / "summary.json").read_text())
    summary.pop("wall_time_s")
    return hashlib.sha256(json.dumps(summary, sort_keys=True).encode()).hexdigest()


def scenario_file(tmp_path: Path, **changes) -> Path:
    data = {
        "name": "determinism",
        "platform": {"preset": "laptop-cpu", "nodes": 5, "node": {"devices": 1}},
        "workers": 4,
        "workload": {"model": {"name": "mlp", "hidden": [8]},
                     "dataset": {"name": "synthetic", "samples": 200, "features": 6, "classes": 3}, "batch_size": 8},
        "algorithm": {"name": "asgd"},
        "stop": {"epochs": 1},
        "evaluation": {"every_steps": 5},
        "compute": {"profiles": [PROFILE], "noise_sigma": 0.3,
                    "stragglers": [{"ranks": [1], "factor": 3, "duration": "0.2ms", "random": {"mean_interval": "0.5ms"}}]},
        "faults": {"node_crash": [{"node": 2, "at": "1ms"}],
                   "link_degradation": [{"links": ["n0.*"], "factor": 0.3, "start": "0.2ms", "duration": "1ms"}]},
        "outputs": {"plots": False},
    }
    data.update(changes)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_rerun_gives_identical_summary_hash(tmp_path):
    path = scenario_file(tmp_path)
    hashes = []
    for name in ("a", "b", "c"):
        assert main(["run", str(path), "--out", str(tmp_path / name), "--quiet"]) == 0
        hashes.append(summary_hash(tmp_path / name))
    assert len(set(hashes)) == 1
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["status"] == "completed"


def test_seed_changes_the_summary(tmp_path):
    path = scenario_file(tmp_path)
    assert main(["run", str(path), "--out", str(tmp_path / "a"), "--quiet"]) == 0
    assert main(["run", str(path), "--out", str(tmp_path / "b"), "--quiet", "--set", "seed=7"]) == 0
    assert summary_hash(tmp_path / "a") != summary_hash(tmp_path / "b")


@pytest.mark.skipif(importlib.util.find_spec("simdist.sweeps") is None, reason="simdist.sweeps not available")
def test_sweep_jobs_1_and_2_give_identical_point_summaries(tmp_path):
    from simdist.sweeps import run_sweep

    path = scenario_file(tmp_path, sweep={"grid": {"seed": [0, 1]}})
    hashes = {}
    for jobs in (1, 2):
        out = tmp_path / f"jobs{jobs}"
        run_sweep(path, out, jobs=jobs)
        hashes[jobs] = sorted(summary_hash(d) for d in (out / "points").iterdir())
        assert not [p for p in out.rglob("*") if ".tmp" in p.name]
    assert hashes[1] == hashes[2] and len(hashes[1]) == 2


# -- safety -------------------------------------------------------------------------


def test_no_unsafe_yaml_pickle_or_eval_in_the_package():
    for path in (ROOT / "simdist").rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"yaml\.(unsafe_load|full_load|load_all)\(|Loader=yaml\.(Loader|FullLoader|UnsafeLoader)",
                             text), path
        assert not re.search(r"(?<![.\w])(eval|exec)\(", text), path
        assert "pickle.load" not in text and "marshal.load" not in text, path
        if "yaml.load(" in text:
            assert path.name == "yamlio.py", path  # the one loader: SafeLoader with an alias limit


def test_yaml_tags_are_refused(tmp_path, capsys):
    path = tmp_path / "tagged.yaml"
    path.write_text("name: !!python/object/apply:os.system ['touch pwned']\n")
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "could not determine a constructor" in capsys.readouterr().err
    assert not (tmp_path / "pwned").exists()


def _base(**changes):
    data = {
        "platform": {"preset": "laptop-cpu", "node": {"devices": 2}},
        "workload": {"model": "mlp", "dataset": {"name": "synthetic", "samples": 60, "features": 4, "classes": 2}},
        "algorithm": "sync", "stop": {"steps": 1}, "compute": {"profiles": [PROFILE]},
    }
    data.update(changes)
    return data


def test_model_import_needs_the_opt_in_flag():
    scenario = scenario_from_dict(_base(workload={"model": "collections:OrderedDict", "dataset": "digits"}))
    with pytest.raises(InputError, match="allow_code_import"):
        simulate(scenario)
    opted_in = scenario_from_dict(_base(workload={"model": "collections:OrderedDict", "dataset": "digits",
                                                  "allow_code_import": True}))
    with pytest.raises(InputError, match="not a torch.nn.Module"):  # imported and called: code execution
        simulate(opted_in)


@pytest.mark.parametrize("name", ["../escape", "a/b", "..", "/abs", "x/../../y"])
def test_scenario_name_cannot_steer_the_default_output_outside_results(tmp_path, monkeypatch, capsys, name):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_base(name=name)))
    assert main(["run", str(path), "--quiet"]) == 2
    assert "name" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["s.yaml"]


def test_results_stay_inside_out_and_no_temporary_is_left(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_base(name="safe", outputs={"plots": False})))
    out = tmp_path / "nested" / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    assert sorted(p.name for p in (tmp_path / "nested").iterdir()) == ["out"]
    for item in out.rglob("*"):
        assert item.resolve().is_relative_to(out.resolve()) and not item.is_symlink()


def test_compare_labels_cannot_escape(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_base(compare=[{"label": "../../x", "set": {}}])))
    assert main(["compare", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "compare[0].label" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
