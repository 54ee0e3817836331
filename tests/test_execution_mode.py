"""How the workers were simulated (one lockstep process, or one process per rank) is chosen
automatically, said with its reason in the manifest (``execution``), and can be forced with
``simdist run --per-rank`` / ``simdist.run(per_rank=True)``, which gives the same results."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

import simdist
from simdist.scenario import scenario_from_dict
from simdist.simulate import simulate

from helpers import tiny_scenario


def _sync(**changes) -> dict:
    platform = {"preset": "laptop-cpu", "node": {"devices": 4}, **changes.pop("platform", {})}
    return tiny_scenario(platform=platform, workload={
        "model": "mlp", "dataset": {"name": "synthetic", "samples": 200, "features": 4, "classes": 2},
        "batch_size": 8, "timing_only": True}, stop={"steps": 6}, **changes)


def _execution(data: dict, per_rank: bool = False) -> dict:
    return simulate(scenario_from_dict(data), per_rank=per_rank).extra["execution"]


def test_sync_runs_its_workers_in_lockstep_and_says_so():
    assert _execution(_sync()) == {"mode": "lockstep",
                                   "why": "every worker runs the same step: one process moves them all"}


@pytest.mark.parametrize("changes, why", [
    ({"algorithm": "nnt", "workers": 4}, "algorithm 'nnt' has no lockstep form"),
    ({"platform": {"node": {"devices": 4, "cores": 2}}}, "node cores are shared"),
    ({"platform": {"device_overrides": [{"ranks": [0], "cpus": 0.5}]}}, "own work differs by rank"),
])
def test_otherwise_one_process_per_rank_with_the_reason(changes, why):
    execution = _execution(_sync(**changes))
    assert execution["mode"] == "per_rank" and why in execution["why"]


@pytest.mark.parametrize("algorithm", ["sync", "dcs3gd"])
def test_per_rank_is_forced_from_the_cli_gives_the_same_results_and_is_recorded(tmp_path, algorithm):
    path = tmp_path / "run.yaml"  # dc-s3gd with noise: its workers start each forward/backward at their own time
    changes = {} if algorithm == "sync" else {"algorithm": {"name": "dcs3gd"}, "compute": {"noise_sigma": 0.2}}
    path.write_text(yaml.safe_dump(_sync(**changes)))
    summaries, manifests = {}, {}
    for mode, extra in (("lockstep", []), ("per_rank", ["--per-rank"])):
        out = tmp_path / mode
        done = subprocess.run([sys.executable, "-m", "simdist", "run", str(path), "--out", str(out), "--quiet", *extra],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        summaries[mode] = json.loads((out / "summary.json").read_text())
        manifests[mode] = json.loads((out / "manifest.json").read_text())
        assert (out / "steps.csv").is_file()
    assert manifests["lockstep"]["execution"]["mode"] == "lockstep"
    assert manifests["per_rank"]["execution"] == {"mode": "per_rank", "why": "forced: one process per rank (--per-rank)"}
    for summary in summaries.values():
        summary.pop("wall_time_s")
    assert summaries["lockstep"] == summaries["per_rank"]
    assert (tmp_path / "lockstep" / "steps.csv").read_text() == (tmp_path / "per_rank" / "steps.csv").read_text()


def test_the_python_api_forces_it_too():
    result = simdist.run(_sync(), per_rank=True)
    assert result.manifest["execution"]["mode"] == "per_rank"
