"""The real-vs-simulated comparison table, on two simulated runs (no MPI needed)."""

from __future__ import annotations

from pathlib import Path

from simdist.real.validate import _simulate, compare, summarize

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
