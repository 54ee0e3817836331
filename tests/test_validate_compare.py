"""The real-vs-simulated comparison table, on two simulated runs (no MPI needed)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from simdist.validation import compare, repeatability, summarize
from simdist.validation.run import _simulate

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "quickstart.yaml"
DBS = ["algorithm={name: dbs}", "workers=3", "stop.steps=40", "evaluation.max_samples=50"]


def test_iterations_given_other_work_are_shown_and_counted(tmp_path):
    # worker 2 twice as fast in the second run: dbs rescales its batch there, not in the first
    first = _simulate(SCENARIO, DBS, tmp_path / "first", False)
    second = _simulate(SCENARIO, DBS + ["platform.device_overrides=[{ranks: [2], speed: 2.0}]"],
                       tmp_path / "second", False)
    table = compare(first, second)
    differ = table[table["measured_batch_size"] != table["predicted_batch_size"]]
    assert len(differ) > 0 and set(differ["worker"]) == {2}
    assert (differ["predicted_batch_size"] > differ["measured_batch_size"]).all()
    assert summarize(table, first, second)["iterations_with_other_batch"] == len(differ[differ["iteration"] > 1])
    same = compare(first, first)
    assert summarize(same, first, first)["iterations_with_other_batch"] == 0
    assert same["iteration_error_pct"].abs().max() == 0


def _runs(first: list[float], again: list[float], worker: int = 0) -> pd.DataFrame:
    """A compare() table of two runs of one worker with the given iteration times."""
    return pd.DataFrame({"worker": worker, "iteration": range(1, len(first) + 1), "measured_iteration_s": first,
                         "predicted_iteration_s": again, "measured_batch_size": 64, "predicted_batch_size": 64})


def test_repeatability_separates_the_host_level_from_per_iteration_differences():
    first = [0.5, 0.10, 0.12, 0.10, 0.12, 0.10]
    slower = [5.0] + [1.1 * t for t in first[1:]]  # every steady iteration 10 % slower; the warm-up far off
    figures = repeatability(_runs(first, slower))
    assert figures["iterations_compared"] == 5  # the first iteration is warm-up
    assert figures["median_abs_iteration_difference_pct"] == pytest.approx(10.0)
    assert figures["level_ratio"] == pytest.approx(1 / 1.1)
    assert figures["level_matched_p90_abs_iteration_difference_pct"] == pytest.approx(0.0, abs=1e-9)


def test_repeatability_keeps_what_the_level_cannot_explain():
    first = [0.1, 0.10, 0.10, 0.10, 0.10]
    swapped = [0.1, 0.12, 0.08, 0.12, 0.08]  # the same total, iterations shifted by +-20 %
    figures = repeatability(_runs(first, swapped))
    assert figures["level_ratio"] == pytest.approx(1.0)
    assert figures["level_matched_median_abs_iteration_difference_pct"] == pytest.approx(20.0)
    assert figures["level_matched_p90_abs_iteration_difference_pct"] == pytest.approx(20.0)


def test_repeatability_counts_other_work_and_refuses_runs_with_nothing_in_common():
    table = _runs([0.1, 0.1, 0.1], [0.1, 0.1, 0.2])
    table.loc[2, "predicted_batch_size"] = 128
    assert repeatability(table)["iterations_with_other_batch"] == 1
    with pytest.raises(ValueError, match="no iteration in common"):
        repeatability(_runs([0.1], [0.1]))
