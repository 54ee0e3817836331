"""simdist report: figures, ranking and Markdown/HTML from a sweep folder, never a re-run."""

from __future__ import annotations

import argparse

import pandas as pd
import pytest

from simdist.errors import InputError
from simdist.plots import scaling_table
from simdist.report import ranking_table, scaling_mode, write_report
from simdist.sweeps import run_sweep
from simdist.sweep_cli import add_sweep_parsers

from test_sweep import sweep_file


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    sweep = {"grid": {"algorithm.name": ["sync", "asgd"], "workers,workload.batch_size": [[1, 64], [2, 32], [4, 16]]}}
    run_sweep(sweep_file(tmp, sweep, stop={"steps": 12, "target_accuracy": 0.5, "stop_at_target": False}),
              tmp / "out", jobs=1)
    return tmp / "out"


def test_scaling_table_speedup_and_efficiency():
    table = pd.DataFrame({"algorithm": ["a", "a", "a", "b", "b"], "workers": [1, 2, 4, 2, 4],
                          "throughput_samples_per_s": [10.0, 18.0, 30.0, 20.0, 40.0]})
    scaled = scaling_table(table)
    assert list(scaled["speedup"]) == pytest.approx([1.0, 1.8, 3.0, 2.0, 4.0])
    assert list(scaled["efficiency"]) == pytest.approx([1.0, 0.9, 0.75, 1.0, 1.0])


def test_ranking_puts_the_fastest_to_target_first_and_unreached_last():
    table = pd.DataFrame({"algorithm": ["a", "a", "b", "c"], "workers": [1, 2, 1, 1],
                          "throughput_samples_per_s": [1.0, 2.0, 1.0, 1.0],
                          "time_to_accuracy_s": [5.0, 3.0, 4.0, None], "best_test_accuracy": [0.9, 0.95, 0.9, 0.5],
                          "mean_staleness": [0, 0, 1, 2]})
    ranked = ranking_table(table)
    assert list(ranked["algorithm"]) == ["a", "b", "c"] and list(ranked["rank"]) == [1, 2, 3]
    assert ranked["workers"].iloc[0] == 2 and ranked["time_to_accuracy_s"].iloc[0] == 3.0
    assert pd.isna(ranked["time_to_accuracy_s"].iloc[2])


def test_scaling_mode_from_the_global_batch():
    strong = pd.DataFrame({"algorithm": ["a", "a"], "workers": [1, 2], "workload.batch_size": [64, 32]})
    weak = pd.DataFrame({"algorithm": ["a", "a"], "workers": [1, 2], "workload.batch_size": [32, 32]})
    assert scaling_mode(strong) == "strong" and scaling_mode(weak) == "weak"
    assert scaling_mode(pd.DataFrame({"algorithm": ["a"], "workers": [1]})) == "weak"


def test_report_writes_markdown_html_figures_and_ranking(sweep_dir, tmp_path, monkeypatch):
    import simdist.simulate

    monkeypatch.setattr(simdist.simulate, "simulate", lambda *a, **k: pytest.fail("a report never simulates"))
    index = write_report(sweep_dir, tmp_path / "reports")
    assert index == tmp_path / "reports" / "sw" / "index.md"
    text = index.read_text()
    assert "## Ranking by time to accuracy" in text and "Strong scaling" in text
    for name in ("speedup", "efficiency", "time_to_accuracy", "staleness", "accuracy_vs_time"):
        assert f"![{name}](figures/{name}.png)" in text
        assert (index.parent / "figures" / f"{name}.png").stat().st_size > 1000
    html = (index.parent / "index.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "<table>" in html and 'src="figures/speedup.png"' in html
    ranking = pd.read_csv(index.parent / "ranking.csv")
    assert sorted(ranking["algorithm"]) == ["asgd", "sync"] and list(ranking["rank"]) == [1, 2]


def test_report_cli_and_bad_folder(sweep_dir, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    add_sweep_parsers(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["report", str(sweep_dir), "--out", str(tmp_path / "r"), "--name", "mine"])
    assert args.func(args) == 0
    assert "r/mine/index.md" in capsys.readouterr().out
    with pytest.raises(InputError, match="not a sweep folder"):
        write_report(tmp_path, tmp_path / "r")
