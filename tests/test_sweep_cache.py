"""A sweep reuses a point only while everything its numbers depend on is unchanged.

The content hash covers the resolved scenario and platform, the bytes of the files they
name (compute profiles, imported code) and simdist's version (simdist.content_hash); a
point whose stored hash differs is computed again, saying which input changed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

import pandas as pd
import yaml

import simdist
from simdist.content_hash import content_hash, input_changes, run_inputs, scenario_content_hash
from simdist.scenario import scenario_from_dict
from simdist.sweeps import POINTS_DIR, run_sweep, sweep_points
from simdist.sweep_cli import add_sweep_parsers

TINY_PROFILE = Path(__file__).parent / "data" / "tiny_profile.yaml"
PROFILES = ("fast.yaml", "slow.yaml")


def sweep_dir(tmp_path: Path) -> Path:
    """A scenario in ``tmp_path`` sweeping two points, each with a profile copied next to it."""
    for name in PROFILES:
        shutil.copy(TINY_PROFILE, tmp_path / name)
    data = {
        "name": "cache",
        "platform": {"preset": "laptop-cpu", "node": {"devices": 2}},
        "workload": {"model": "mlp", "dataset": "digits", "batch_size": 16},
        "algorithm": {"name": "sync"},
        "workers": 2,
        "stop": {"steps": 3},
        "evaluation": {"every_steps": 3, "max_samples": 64},
        "outputs": {"plots": False, "trace": False},
        "sweep": {"grid": {"compute.profiles": [[name] for name in PROFILES]}},
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return tmp_path / "s.yaml"


def point_dirs(path: Path, out: Path) -> dict[str, Path]:
    """Profile name -> that point's result directory."""
    _, points = sweep_points(path)
    return {p.scenario.compute.profiles[0]: out / POINTS_DIR / p.key for p in points}


def manifest(directory: Path) -> dict:
    return json.loads((directory / "manifest.json").read_text())


def cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    add_sweep_parsers(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def slow_down(profile: Path) -> None:
    """Make the profile's MLP ten times slower per sample (new bytes, a different run)."""
    data = yaml.safe_load(profile.read_text())
    data["models"]["mlp"]["t1_s"] *= 10
    profile.write_text(yaml.safe_dump(data))


def test_unchanged_inputs_are_reused_and_a_changed_profile_recomputes_its_point(tmp_path):
    path = sweep_dir(tmp_path)
    out = tmp_path / "out"
    first = run_sweep(path, out, jobs=1)
    assert first.ok and len(first.ran) == 2
    dirs = point_dirs(path, out)
    written = {name: (d / "manifest.json").stat().st_mtime_ns for name, d in dirs.items()}
    before = {name: manifest(d) for name, d in dirs.items()}

    again = run_sweep(path, out, jobs=1)
    assert again.ran == [] and len(again.skipped) == 2 and again.stale == {}
    assert {name: (d / "manifest.json").stat().st_mtime_ns for name, d in dirs.items()} == written

    slow_down(tmp_path / "slow.yaml")
    stale = []
    third = run_sweep(path, out, jobs=1, on_stale=lambda point, reason: stale.append((point.key, reason)))
    slow_key = dirs["slow.yaml"].name
    assert third.ran == [slow_key] and third.skipped == [dirs["fast.yaml"].name]
    assert stale == [(slow_key, "profile slow.yaml changed")]
    assert (dirs["fast.yaml"] / "manifest.json").stat().st_mtime_ns == written["fast.yaml"]
    after = manifest(dirs["slow.yaml"])
    assert after["content_hash"] != before["slow.yaml"]["content_hash"]
    assert after["summary"]["virtual_time_s"] > before["slow.yaml"]["summary"]["virtual_time_s"]  # new bytes used
    table = pd.read_csv(out / "sweep.csv")
    assert list(table["virtual_time_s"]) == [before["fast.yaml"]["summary"]["virtual_time_s"],
                                             after["summary"]["virtual_time_s"]]


def test_the_manifest_lists_every_hashed_file(tmp_path):
    path = sweep_dir(tmp_path)
    run_sweep(path, tmp_path / "out", jobs=1)
    _, points = sweep_points(path)
    point = next(p for p in points if p.scenario.compute.profiles == ["fast.yaml"])
    written = manifest(tmp_path / "out" / POINTS_DIR / point.key)
    files = written["inputs"]["files"]
    own = [f for f in files if f["name"] == "fast.yaml"]
    assert own == [{"kind": "profile", "name": "fast.yaml", "path": str(tmp_path / "fast.yaml"),
                    "sha256": hashlib.sha256((tmp_path / "fast.yaml").read_bytes()).hexdigest()}]
    shipped = [f for f in files if f["name"].startswith("calibration/profiles/")]
    assert len(shipped) == len(files) - 1
    for entry in shipped:
        assert entry["sha256"] == hashlib.sha256(Path(entry["path"]).read_bytes()).hexdigest()
    assert written["inputs"]["simdist_version"] == simdist.__version__ == written["simdist_version"]
    assert written["content_hash"] == scenario_content_hash(point.scenario)[0]
    assert written["content_hash"] == content_hash(written["scenario"], written["platform"], written["seed"],
                                                   written["inputs"])


def test_the_hashed_profiles_are_the_ones_a_simulation_reads(tmp_path):
    from simdist.assembly import profile_paths

    _, points = sweep_points(sweep_dir(tmp_path))
    for point in points:
        listed = [f["path"] for f in run_inputs(point.scenario)["files"] if f["kind"] == "profile"]
        assert listed == [str(p) for p in profile_paths(point.scenario)]


def test_a_changed_simdist_version_changes_the_hash_and_recomputes(tmp_path, monkeypatch):
    path = sweep_dir(tmp_path)
    run_sweep(path, tmp_path / "out", jobs=1)
    _, points = sweep_points(path)
    old_hash, old_inputs = scenario_content_hash(points[0].scenario)
    original = simdist.__version__
    monkeypatch.setattr(simdist, "__version__", "99.0.0")
    new_hash, new_inputs = scenario_content_hash(points[0].scenario)
    assert new_hash != old_hash and input_changes(old_inputs, new_inputs) == [f"simdist version {original} -> 99.0.0"]
    stale = {}
    outcome = run_sweep(path, tmp_path / "out", jobs=1, on_stale=lambda p, why: stale.setdefault(p.key, why))
    assert sorted(outcome.ran) == sorted(stale) == sorted(p.key for p in points)
    assert set(stale.values()) == {f"simdist version {original} -> 99.0.0"}
    assert manifest(tmp_path / "out" / POINTS_DIR / points[0].key)["simdist_version"] == "99.0.0"


def test_an_old_style_manifest_is_recomputed_with_a_message(tmp_path, capsys):
    path = sweep_dir(tmp_path)
    out = tmp_path / "out"
    run_sweep(path, out, jobs=1)
    _, points = sweep_points(path)
    old = out / POINTS_DIR / points[0].key / "manifest.json"
    written = json.loads(old.read_text())
    del written["inputs"]  # as results were written before they listed their files
    written["content_hash"] = content_hash(written["scenario"], written["platform"], written["seed"])
    old.write_text(json.dumps(written))
    assert cli(["sweep", str(path), "--out", str(out), "--jobs", "1"]) == 0
    printed = capsys.readouterr().out
    lines = [line for line in printed.splitlines() if "recomputing" in line]
    assert len(lines) == 1 and points[0].key in lines[0] and points[0].label in lines[0]
    assert "written before results recorded the files they read" in lines[0]
    assert "2 points, 1 already done, 1 to run" in printed
    assert "inputs" in manifest(old.parent)  # computed again, with today's manifest


def test_cli_counts_a_stale_point_as_to_run(tmp_path, capsys):
    path = sweep_dir(tmp_path)
    out = tmp_path / "out"
    assert cli(["sweep", str(path), "--out", str(out), "--jobs", "1", "--quiet"]) == 0
    slow_down(tmp_path / "fast.yaml")
    assert cli(["sweep", str(path), "--out", str(out), "--jobs", "1"]) == 0
    printed = capsys.readouterr().out
    assert "2 points, 1 already done, 1 to run" in printed
    assert "recomputing compute.profiles=[\"fast.yaml\"]" in printed and "profile fast.yaml changed" in printed


def test_a_stale_point_that_fails_to_recompute_leaves_the_table(tmp_path):
    path = sweep_dir(tmp_path)
    out = tmp_path / "out"
    run_sweep(path, out, jobs=1)
    (tmp_path / "slow.yaml").write_text("device: [not, a, profile\n")
    outcome = run_sweep(path, out, jobs=1)
    slow = point_dirs(path, out)["slow.yaml"].name
    assert list(outcome.failures) == [slow] and "profile slow.yaml changed" in outcome.stale[slow]
    table = pd.read_csv(out / "sweep.csv")
    assert slow not in set(table["key"]) and len(table) == 1  # the stale numbers are not shown as current
    assert list(pd.read_csv(out / "failures.csv")["key"]) == [slow]


def test_a_sweep_folder_moved_with_its_scenario_is_still_reused(tmp_path):
    here = tmp_path / "here"
    here.mkdir()
    path = sweep_dir(here)
    run_sweep(path, here / "out", jobs=1)
    shutil.copytree(here, tmp_path / "there")
    moved = run_sweep(tmp_path / "there" / "s.yaml", tmp_path / "there" / "out", jobs=1)
    assert moved.ran == [] and len(moved.skipped) == 2  # names and bytes are hashed, not where files lie


def test_imported_model_code_is_hashed_only_where_importing_is_allowed(tmp_path, monkeypatch):
    module = tmp_path / "cache_toy_model.py"
    module.write_text("import torch\n\n\ndef build(input_shape, num_classes):\n"
                      "    return torch.nn.Linear(64, num_classes)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "cache_toy_model", raising=False)

    def scenario(allow: bool):
        return scenario_from_dict({"platform": "laptop-cpu", "algorithm": "sync", "stop": {"steps": 1},
                                   "workload": {"model": "cache_toy_model:build", "allow_code_import": allow}},
                                  source=str(tmp_path / "s.yaml"), base_dir=tmp_path)

    assert [f for f in run_inputs(scenario(False))["files"] if f["kind"] != "profile"] == []
    assert "cache_toy_model" not in sys.modules  # nothing was imported to hash it
    before_hash, before = scenario_content_hash(scenario(True))
    code = [f for f in before["files"] if f["kind"] == "model code"]
    assert code == [{"kind": "model code", "name": "cache_toy_model", "path": str(module),
                     "sha256": hashlib.sha256(module.read_bytes()).hexdigest()}]
    module.write_text(module.read_text().replace("64", "65"))
    after_hash, after = scenario_content_hash(scenario(True))
    assert after_hash != before_hash and input_changes(before, after) == ["model code cache_toy_model changed"]


def test_input_changes_names_added_and_removed_files():
    stored = {"simdist_version": "1", "files": [{"kind": "profile", "name": "a.yaml", "sha256": "x"}]}
    current = {"simdist_version": "1", "files": [{"kind": "profile", "name": "b.yaml", "sha256": "x"}]}
    assert input_changes(stored, current) == ["profile b.yaml added", "profile a.yaml removed"]
    assert input_changes(stored, stored) == []
