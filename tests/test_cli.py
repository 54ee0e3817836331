"""The command line: runs write a result directory; bad input is one line on stderr, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simdist.cli import main

TINY_PROFILE = str(Path(__file__).parent / "data" / "tiny_profile.yaml")


def scenario_file(tmp_path: Path, **changes) -> Path:
    data = {
        "name": "cli",
        "platform": {"preset": "laptop-cpu", "node": {"devices": 2}},
        "workload": {"model": "mlp", "dataset": "digits", "batch_size": 16},
        "algorithm": "sync",
        "stop": {"steps": 4},
        "evaluation": {"every_steps": 2},
        "compute": {"profiles": [TINY_PROFILE]},
        "outputs": {"plots": False},
    }
    data.update(changes)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simdist", *args], capture_output=True, text=True, timeout=120)


def test_run_writes_the_result_contract(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(scenario_file(tmp_path)), "--out", str(out)]) == 0
    for name in ("manifest.json", "summary.json", "steps.csv", "evals.csv", "workers.csv", "links.csv", "trace.json"):
        assert (out / name).is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["workers"] == 2 and summary["status"] == "step_limit"
    assert "wrote" in capsys.readouterr().out


def test_same_seed_gives_identical_summary(tmp_path):
    path = scenario_file(tmp_path)
    texts = []
    for name in ("a", "b"):
        assert main(["run", str(path), "--out", str(tmp_path / name), "--quiet"]) == 0
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        summary.pop("wall_time_s")
        texts.append(json.dumps(summary))
    assert texts[0] == texts[1]


def test_existing_output_is_kept_without_overwrite(tmp_path, capsys):
    path, out = scenario_file(tmp_path), tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    for extra in ([], ["--overwrite"]):  # a folder simdist did not write is never replaced
        assert main(["run", str(path), "--out", str(out), *extra]) == 2
        assert (out / "precious.txt").read_text() == "keep me"
        assert "simdist did not write" in capsys.readouterr().err
    mine = tmp_path / "mine"
    assert main(["run", str(path), "--out", str(mine), "--quiet"]) == 0
    (mine / "stale.txt").write_text("from the earlier run")
    assert main(["run", str(path), "--out", str(mine)]) == 2
    assert "--overwrite" in capsys.readouterr().err and (mine / "stale.txt").exists()
    assert main(["run", str(path), "--out", str(mine), "--overwrite", "--quiet"]) == 0
    assert not (mine / "stale.txt").exists() and (mine / "summary.json").exists()


@pytest.mark.parametrize(
    "args, words",
    [
        (["run", "missing.yaml"], "not found"),
        (["run", "{scenario}", "--set", "workload.batch_size=-3"], "workload.batch_size"),
        (["run", "{scenario}", "--set", "algorithm.name=dasso"], "unknown algorithm 'dasso'"),
        (["run", "{scenario}", "--set", "platform.preset=nope"], "unknown platform preset"),
        (["run", "{scenario}", "--set", "nonsense"], "expected dotted.key=value"),
        (["list", "gizmos"], "invalid choice"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line_exit_2_no_traceback(tmp_path, args, words):
    scenario = scenario_file(tmp_path)
    out = tmp_path / "never"
    args = [a.replace("{scenario}", str(scenario)) for a in args]
    if args[0] == "run":
        args += ["--out", str(out)]
    proc = run_cli(*args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert words in lines[0]
    assert not out.exists()


def test_list_and_schema(capsys):
    assert main(["list", "algorithms"]) == 0
    assert "sync" in capsys.readouterr().out
    assert main(["list", "platforms"]) == 0
    listed = capsys.readouterr().out
    assert "laptop-cpu" in listed and "dgx-a100" in listed and "cluster-a100-hdr" in listed
    assert main(["schema"]) == 0
    assert "workload" in json.loads(capsys.readouterr().out)["properties"]


def test_plot_redraws_from_tables(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(scenario_file(tmp_path)), "--out", str(out), "--quiet"]) == 0
    assert main(["plot", str(out), "--out", str(tmp_path / "figs")]) == 0
    assert (tmp_path / "figs" / "accuracy_vs_time.png").is_file()
    assert main(["plot", str(tmp_path / "nowhere")]) == 2
