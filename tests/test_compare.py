"""simdist compare: variants of one scenario run side by side, overlays read from their results."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from simdist.cli import main
from simdist.comparison import run_comparison, variant_scenarios
from simdist.errors import InputError

PROFILE = str(Path(__file__).parent / "data" / "tiny_profile.yaml")


def scenario_file(tmp_path: Path, compare) -> Path:
    data = {
        "name": "cmp",
        "platform": {"preset": "laptop-cpu", "node": {"devices": 3}},
        "workers": 2,
        "workload": {"model": "mlp", "dataset": "digits", "batch_size": 32},
        "algorithm": {"name": "sync", "collective": "tree"},
        "stop": {"steps": 6},
        "evaluation": {"every_steps": 3},
        "compute": {"profiles": [PROFILE]},
        "outputs": {"plots": False},
        "compare": compare,
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


VARIANTS = [
    {"label": "sync-ring", "set": {"algorithm.collective": "ring"}},
    {"label": "asgd", "set": {"algorithm": {"name": "asgd"}}},
]


def test_variants_change_only_their_fields(tmp_path):
    variants = dict(variant_scenarios(scenario_file(tmp_path, VARIANTS)))
    assert variants["sync-ring"].algorithm["collective"] == "ring"
    assert variants["asgd"].algorithm["name"] == "asgd" and "collective" not in variants["asgd"].algorithm
    assert variants["asgd"].workload.batch_size == 32


def test_run_comparison_writes_each_variant_and_the_table(tmp_path):
    out = run_comparison(scenario_file(tmp_path, VARIANTS), tmp_path / "out")
    table = pd.read_csv(out / "compare.csv")
    assert list(table["label"]) == ["sync-ring", "asgd"]
    assert list(table["algorithm"]) == ["sync", "asgd"]
    assert (out / "sync-ring" / "summary.json").is_file() and (out / "asgd" / "steps.csv").is_file()
    for name in ("compare_accuracy_vs_time", "compare_accuracy_vs_step", "compare_staleness", "compare_time_per_step"):
        assert (out / "plots" / f"{name}.png").is_file()


def test_bad_variants_are_named(tmp_path):
    bad = [{"label": "x", "set": {"algorithm": {"name": "sync", "collective": "star"}}}]
    with pytest.raises(InputError, match=r"compare\[0\]\.set -> algorithm.collective.*variant 'x'"):
        variant_scenarios(scenario_file(tmp_path, bad))
    with pytest.raises(InputError, match="used twice"):
        variant_scenarios(scenario_file(tmp_path, VARIANTS + VARIANTS[:1]))
    with pytest.raises(InputError, match="no variant labelled 'nope'"):
        variant_scenarios(scenario_file(tmp_path, VARIANTS), only=["nope"])
    with pytest.raises(InputError, match="has no 'compare' variants"):
        variant_scenarios(scenario_file(tmp_path, []))


def test_cli_compare_refuses_to_overwrite_before_running(tmp_path, capsys):
    path, out = scenario_file(tmp_path, VARIANTS), tmp_path / "out"
    assert main(["compare", str(path), "--out", str(out), "--only", "sync-ring"]) == 0
    assert "sync-ring" in capsys.readouterr().out
    first = (out / "sync-ring" / "summary.json").read_bytes()
    (out / "asgd").mkdir()
    (out / "asgd" / "keep.txt").write_text("mine")
    # sync-ring is simdist's (replaced only with --overwrite); asgd is not (never replaced)
    for extra, words in (([], "pass --overwrite"), (["--overwrite"], "simdist did not write")):
        assert main(["compare", str(path), "--out", str(out), "--quiet", *extra]) == 2
        assert words in capsys.readouterr().err
        assert (out / "asgd" / "keep.txt").read_text() == "mine"
        assert (out / "sync-ring" / "summary.json").read_bytes() == first  # nothing simulated
