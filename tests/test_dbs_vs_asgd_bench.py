"""The DBS-vs-asgd benchmark: its equal-point interpolation and summary on hand-made curves, and
one quick run end to end (3 epochs of the heterogeneous digits scenario, about 10 s)."""

from __future__ import annotations

import pandas as pd
import pytest

from helpers import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("dbs_vs_asgd")


def curve(steps, samples, times, losses):
    return pd.DataFrame({"step": steps, "samples": samples, "time_s": times, "test_loss": losses})


def test_equal_points_interpolate_each_run_at_fractions_of_the_shortest(bench):
    short = {"seed": 0, "curve": curve([0, 10], [0, 100], [0.0, 1.0], [2.0, 1.0])}
    long = {"seed": 0, "curve": curve([0, 40], [0, 200], [0.0, 4.0], [2.0, 0.0])}
    bench.add_equal_points([short, long])
    assert short["loss@steps50"] == pytest.approx(1.5) and long["loss@steps50"] == pytest.approx(1.75)  # step 5
    assert short["loss@samples25"] == pytest.approx(1.75) and long["loss@samples25"] == pytest.approx(1.75)
    assert long["loss@time50"] == pytest.approx(1.75)  # at 0.5 s, half the shorter run


def test_summary_is_the_mean_and_range_over_seeds(bench):
    runs = [{"label": "a", "seed": s, "epochs": 1, "epoch_s": v, "curve": None} for s, v in ((0, 1.0), (1, 3.0))]
    summary = bench.summarise(runs)
    row = summary.iloc[0]
    assert (row["seeds"], row["epoch_s"], row["epoch_s_min"], row["epoch_s_max"]) == (2, 2.0, 1.0, 3.0)


def test_a_quick_run_shows_the_pool_s_batches_and_writes_the_table(bench, tmp_path, capsys):
    out = tmp_path / "dbs.csv"
    assert bench.main(["--quick", "--out", str(out)]) == 0
    table = pd.read_csv(out).set_index("label")
    assert list(table.index) == bench.QUICK
    assert (table["epoch_s"] > 0).all() and table.loc["sync-4", "p95_stale"] == 0
    assert table.loc["asgd-4", "compute_spread"] == pytest.approx(1.5, rel=0.02)  # 1.5 vs 1 CPU, nothing resized
    assert "wrote" in capsys.readouterr().out
