"""simdist report: figures, ranking and Markdown/HTML from a sweep folder, never a re-run."""

from __future__ import annotations

import argparse

import pandas as pd
import pytest

from simdist.errors import InputError
from simdist.plots import scaling_table
from simdist.aggregate import column_roles
from simdist.report import ranking_table, scaling_mode, write_report
from simdist.report_text import told_apart
from simdist.sweeps import run_sweep
from simdist.sweep_cli import add_sweep_parsers

from test_sweep import sweep_file


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    sweep = {"grid": {"algorithm.name": ["sync", "asgd"], "workers,workload.batch_size": [[1, 64], [2, 32], [4, 16]],
                      "seed": [0, 1]}}
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
    assert list(ranking["seeds"]) == [2, 2]
    points = pd.read_csv(index.parent / "points.csv")
    assert len(points) == 6 and set(points["n"]) == {2} and set(points["baseline"]) == {"sync@1"}
    assert "Every value is a mean over 2 seeds" in text and "against one common baseline: `sync@1`." in text
    assert "## Can they be told apart?" in text and " ± " in text


def test_report_cli_and_bad_folder(sweep_dir, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    add_sweep_parsers(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["report", str(sweep_dir), "--out", str(tmp_path / "r"), "--name", "mine"])
    assert args.func(args) == 0
    assert "r/mine/index.md" in capsys.readouterr().out
    with pytest.raises(InputError, match="not a sweep folder"):
        write_report(tmp_path, tmp_path / "r")


def test_report_baseline_is_selectable_and_an_absent_one_writes_nothing(sweep_dir, tmp_path):
    index = write_report(sweep_dir, tmp_path / "reports", baseline="asgd@2")
    text = index.read_text()
    assert "against one common baseline: `asgd@2`." in text
    assert set(pd.read_csv(index.parent / "points.csv")["baseline"]) == {"asgd@2"}
    with pytest.raises(InputError, match=r"--baseline: baseline 'daso@1' is not a point of this sweep; name one of: "
                                         r"sync@1, sync@2, sync@4, asgd@1, asgd@2, asgd@4"):
        write_report(sweep_dir, tmp_path / "other", baseline="daso@1")
    assert not (tmp_path / "other").exists()



def test_the_report_command_takes_a_baseline_and_refuses_an_absent_one(sweep_dir, tmp_path, capsys):
    from simdist.cli import main

    assert main(["report", str(sweep_dir), "--out", str(tmp_path / "cli"), "--baseline", "sync@2"]) == 0
    assert "against one common baseline: `sync@2`." in next((tmp_path / "cli").rglob("index.md")).read_text()
    capsys.readouterr()
    assert main(["report", str(sweep_dir), "--out", str(tmp_path / "none"), "--baseline", "daso@1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--baseline" in err[0] and "daso@1" in err[0]
    assert not (tmp_path / "none").exists()

SEEDED = pd.DataFrame({
    "algorithm": ["sync"] * 6 + ["asgd"] * 6 + ["dbs"] * 6,
    "workers": [1, 1, 1, 4, 4, 4] * 3, "seed": [0, 1, 2] * 6,
    "throughput_samples_per_s": [10.0, 11.0, 12.0, 30.0, 31.0, 32.0] + [9.0, 10.0, 11.0, 39.0, 40.0, 41.0] * 2,
    "time_to_accuracy_s": [5.0, 5.2, 5.4, 2.0, 2.1, 2.2] + [5.0, 5.5, 5.3, None, 1.0, 1.1] * 2,
    "best_test_accuracy": [0.95] * 18, "target_accuracy": [0.9] * 18,
})


def test_told_apart_says_both_cannot_be_told_apart_and_told_apart():
    lines = told_apart(SEEDED, column_roles(SEEDED), 0.9)
    one, four = (next(line for line in lines if line.startswith(f"* {n} worker") and "reaches" in line)
                 for n in (1, 4))
    # 1 worker: sync 5.2 s vs asgd = dbs 5.27 s; per-seed differences 0, 0.3, -0.1 s: their interval holds 0
    assert "**sync** reaches 0.9 first" in one and "Cannot be told apart from sync: asgd = dbs" in one
    # 4 workers: asgd and dbs reached in 2 of 3 seeds only; sync reached in all three
    assert "**sync** reaches 0.9 first" in four and "Not reached in every seed: asgd (2 of 3 seeds)" in four
    throughput = next(line for line in lines if line.startswith("* 4 workers") and "throughput" in line)
    assert "**asgd = dbs** has the highest throughput" in throughput
    assert "Lower than asgd, told apart: sync (31 samples/s ± 2.484 samples/s; -9 samples/s ± 0 samples/s paired)" \
        in throughput


def test_one_seed_per_point_says_nothing_can_be_told_apart():
    first = SEEDED[SEEDED["seed"] == 0].drop(columns="seed")
    lines = told_apart(first, column_roles(first), 0.9)
    assert any("One seed, so not told apart from" in line for line in lines)
    assert not any("told apart:" in line.replace("not told apart", "") for line in lines)


def test_ranking_counts_never_reached_seeds_and_shows_intervals():
    ranked = ranking_table(SEEDED).set_index("algorithm")
    assert ranked.loc["sync", "rank"] == 1 and ranked.loc["sync", "workers"] == 4  # asgd's 4 missed one seed
    assert ranked.loc["sync", "time_to_accuracy_s"] == pytest.approx(2.1)
    assert ranked.loc["sync", "time_to_accuracy_ci95_s"] == pytest.approx(4.3027 * 0.1 / 3**0.5)
    assert ranked.loc["asgd", "workers"] == 1 and ranked.loc["asgd", "reached"] == 3
    assert ranked.loc["sync", "speedup_at_max_workers"] == pytest.approx((3.0 + 31 / 11 + 32 / 12) / 3)
