"""simdist sweep: axes to points, validation before running, resume, failures, the table."""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import pytest
import yaml

from simdist.errors import InputError
from simdist.sweeps import POINTS_DIR, run_sweep, sweep_points
from simdist.sweep_cli import add_sweep_parsers

PROFILE = str(Path(__file__).parent / "data" / "tiny_profile.yaml")


def sweep_file(tmp_path: Path, sweep, **fields) -> Path:
    data = {
        "name": "sw",
        "platform": {"preset": "laptop-cpu", "node": {"devices": 5}},
        "workload": {"model": "mlp", "dataset": "digits", "batch_size": 32},
        "algorithm": {"name": "sync"},
        "stop": {"steps": 4, "target_accuracy": 0.2, "stop_at_target": False},
        "evaluation": {"every_steps": 2},
        "compute": {"profiles": [PROFILE]},
        "outputs": {"plots": False, "trace": False},
        "sweep": sweep,
        **fields,
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


GRID = {"grid": {"algorithm.name": ["sync", "asgd"], "workers": [1, 2]}}


def cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    add_sweep_parsers(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def test_grid_linked_axes_and_points(tmp_path):
    sweep = {"grid": {"algorithm.name": ["sync", "asgd"], "workers,workload.batch_size": [[1, 64], [2, 32]]},
             "points": [{"algorithm.name": "nsoftsync", "workers": 4}]}
    _, points = sweep_points(sweep_file(tmp_path, sweep))
    assert [p.label for p in points] == [
        "algorithm.name=sync,workers=1,workload.batch_size=64", "algorithm.name=sync,workers=2,workload.batch_size=32",
        "algorithm.name=asgd,workers=1,workload.batch_size=64", "algorithm.name=asgd,workers=2,workload.batch_size=32",
        "algorithm.name=nsoftsync,workers=4"]
    assert [(p.scenario.worker_count, p.scenario.workload.batch_size) for p in points][:2] == [(1, 64), (2, 32)]
    assert points[-1].scenario.workload.batch_size == 32
    assert len({p.key for p in points}) == 5 and all(len(p.key) == 16 for p in points)


def test_key_is_the_content_hash_of_the_resolved_scenario(tmp_path):
    _, first = sweep_points(sweep_file(tmp_path, GRID))
    _, again = sweep_points(sweep_file(tmp_path, {"grid": {"workers": [2, 1], "algorithm.name": ["asgd", "sync"]}}))
    assert {p.key for p in first} == {p.key for p in again}  # same scenarios, however the axes are written


@pytest.mark.parametrize("sweep, field", [
    ({"grid": {"workload.batch_sise": [1, 2]}}, "sweep.grid.workload.batch_sise"),
    ({"grid": {"workers": [1, 9]}}, "sweep.grid.workers"),
    ({"grid": {"workers,workload.batch_size": [[1, 8], [2, 0]]}}, "sweep.grid.workers,workload.batch_size"),
    ({"points": [{"workers": 1}, {"algorithm.name": "dasso"}]}, "sweep.points[1].algorithm.name"),
])
def test_bad_points_are_named_before_anything_runs(tmp_path, sweep, field):
    path = sweep_file(tmp_path, sweep)
    with pytest.raises(InputError) as info:
        run_sweep(path, tmp_path / "out")
    assert info.value.field == field
    assert not (tmp_path / "out").exists()


def test_bad_sweep_section_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="sweep.grid"):
        sweep_points(sweep_file(tmp_path, {"grid": {"workers": []}}))
    with pytest.raises(InputError, match="links 2 fields"):
        sweep_points(sweep_file(tmp_path, {"grid": {"workers,workload.batch_size": [[1, 2, 3]]}}))
    with pytest.raises(InputError, match="no sweep axes"):
        sweep_points(sweep_file(tmp_path, {}))


def test_sweep_writes_a_directory_per_point_and_the_table(tmp_path):
    outcome = run_sweep(sweep_file(tmp_path, GRID), tmp_path / "out", jobs=1)
    table = pd.read_csv(tmp_path / "out" / "sweep.csv")
    assert outcome.ok and len(outcome.ran) == 4
    assert list(table.columns[:4]) == ["point", "key", "algorithm.name", "axis.workers"]
    assert list(table["algorithm"]) == ["sync", "sync", "asgd", "asgd"]
    assert list(table["workers"]) == list(table["axis.workers"]) == [1, 2, 1, 2]
    assert "wall_time_s" not in table and "time_to_accuracy_s" in table
    for key in table["key"]:
        assert (tmp_path / "out" / POINTS_DIR / key / "summary.json").is_file()
    assert not (tmp_path / "out" / "failures.csv").exists()


def test_interrupted_sweep_resumes_and_equals_an_uninterrupted_run(tmp_path):
    path = sweep_file(tmp_path, GRID)
    full = run_sweep(path, tmp_path / "full", jobs=1)
    seen = []

    def kill_after_two(point, result):
        seen.append(point.key)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(path, tmp_path / "part", jobs=1, on_point=kill_after_two)
    partial = pd.read_csv(tmp_path / "part" / "sweep.csv")
    assert list(partial["key"]) == seen  # the table is valid after the interruption
    resumed = run_sweep(path, tmp_path / "part", jobs=1)
    assert resumed.skipped == seen and sorted(resumed.ran) == sorted(set(full.ran) - set(seen))
    assert (tmp_path / "part" / "sweep.csv").read_text() == (tmp_path / "full" / "sweep.csv").read_text()
    again = run_sweep(path, tmp_path / "part", jobs=1)
    assert again.ran == [] and len(again.skipped) == 4


def test_a_failing_point_is_reported_and_the_others_are_kept(tmp_path):
    sweep = {"grid": {"workers": [1, 2]}, "points": [{"compute.profiles": ["missing.yaml"]}]}
    outcome = run_sweep(sweep_file(tmp_path, sweep), tmp_path / "out", jobs=1)
    assert len(outcome.failures) == 1 and "missing.yaml" in next(iter(outcome.failures.values()))
    table = pd.read_csv(tmp_path / "out" / "sweep.csv")
    failures = pd.read_csv(tmp_path / "out" / "failures.csv")
    assert len(table) == 2 and list(failures.columns) == ["point", "key", "error"]
    assert failures["point"].iloc[0].startswith("compute.profiles=")
    assert "not found" in failures["error"].iloc[0]


@pytest.mark.slow  # ~10 s: spawned processes import torch
def test_local_process_pool_equals_in_process(tmp_path):
    path = sweep_file(tmp_path, GRID)
    run_sweep(path, tmp_path / "serial", jobs=1)
    run_sweep(path, tmp_path / "pool", jobs=2)
    assert (tmp_path / "pool" / "sweep.csv").read_text() == (tmp_path / "serial" / "sweep.csv").read_text()


def test_cli_sweep_prints_the_table_and_exits_1_on_failures(tmp_path, capsys):
    path = sweep_file(tmp_path, {"grid": {"workers": [1, 2]}})
    assert cli(["sweep", str(path), "--out", str(tmp_path / "out"), "--jobs", "1"]) == 0
    out = capsys.readouterr()
    assert "2 points, 0 already done" in out.out and "sweep.csv (2 of 2 points)" in out.out
    assert out.err == ""  # no progress bar when stderr is not a terminal
    assert cli(["sweep", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    bad = sweep_file(tmp_path, {"points": [{"compute.profiles": ["missing.yaml"]}]})
    assert cli(["sweep", str(bad), "--out", str(tmp_path / "bad"), "--jobs", "1", "--quiet"]) == 1
    assert "FAILED" in capsys.readouterr().err


def test_unknown_backend_and_scheduler_without_dask(tmp_path):
    from simdist.backends import run_tasks

    with pytest.raises(InputError, match="unknown backend"):
        list(run_tasks([], backend="slurm"))
    with pytest.raises(InputError, match="--backend dask"):
        run_sweep(sweep_file(tmp_path, {"grid": {"workers": [1]}}), tmp_path / "out", scheduler="tcp://x:1")


@pytest.mark.slow  # a real SIGKILL of the command line mid-sweep, then a rerun
def test_killed_cli_sweep_finishes_the_rest_on_rerun(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    sweep = {"grid": {"algorithm.name": ["sync", "asgd"], "workers": [1, 2, 3, 4]}}
    path = sweep_file(tmp_path, sweep, stop={"steps": 60})
    command = [sys.executable, "-m", "simdist", "sweep", str(path), "--jobs", "1", "--quiet"]
    assert cli(["sweep", str(path), "--out", str(tmp_path / "full"), "--jobs", "1", "--quiet"]) == 0
    proc = subprocess.Popen([*command, "--out", str(tmp_path / "part")])
    points = tmp_path / "part" / POINTS_DIR
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len([p for p in points.glob("*") if not p.name.startswith(".")]) < 2:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = {p.name for p in points.glob("*") if not p.name.startswith(".")}
    assert 2 <= len(done) < 8
    outcome = run_sweep(path, tmp_path / "part", jobs=1)
    assert set(outcome.skipped) == done and len(outcome.ran) == 8 - len(done)
    assert (tmp_path / "part" / "sweep.csv").read_text() == (tmp_path / "full" / "sweep.csv").read_text()
