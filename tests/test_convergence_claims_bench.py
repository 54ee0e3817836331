"""The convergence-claims benchmark: its summary over seeds on hand-made rows, and one quick run
(2 epochs, one seed) that must write every configuration."""

from __future__ import annotations

import pandas as pd
import pytest

from helpers import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("convergence_claims")


def test_summary_counts_the_seeds_that_reached_the_target(bench):
    rows = [{"claim": "nnt", "label": "a", "seed": s, "virtual_time_s": 1.0 + s, "final_acc": 0.9,
             "time_to_target_s": t} for s, t in ((0, 0.5), (1, None), (2, 0.7))]
    row = bench.summary_table(rows).iloc[0]
    assert (row["seeds"], row["reached"]) == (3, 2)
    assert row["time_to_target_s"] == pytest.approx(0.6) and row["virtual_time_s_max"] == 3.0


def test_daso_points_hold_s_zero_for_every_b_and_every_s_at_b_8(bench):
    labels = [label for label, _ in bench.daso_points(quick=False)]
    assert labels[:5] == ["daso B1 S0", "daso B2 S0", "daso B4 S0", "daso B8 S0", "daso B16 S0"]
    assert labels[5:] == ["daso B8 S1", "daso B8 S2", "daso B8 S4", "daso B8 S8"]


def test_a_quick_run_writes_every_configuration(bench, tmp_path):
    out = tmp_path / "claims.csv"
    assert bench.main(["--quick", "--out", str(out)]) == 0
    table = pd.read_csv(out)
    expected = [label for label, _ in bench.daso_points(quick=True)] + [label for label, _ in bench.nnt_points()]
    assert list(table["label"]) == expected
    assert (table["final_acc"].between(0, 1)).all() and (table["virtual_time_s"] > 0).all()
