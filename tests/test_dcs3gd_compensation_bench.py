"""The DC-S3GD compensation benchmark: its statistics on known numbers, and its core run on tiny
settings (one epoch, two seeds, λ0 in {0, 0.2} and sync): compensation off records λ = 0 and
trains along a different path than λ0 = 0.2 from the same seed, at the same staleness and the
same simulated time; the same seed gives the same numbers; the outputs have their structure."""

from __future__ import annotations

import argparse
import csv
import math

import pytest

from helpers import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("dcs3gd_compensation")


@pytest.fixture(scope="module")
def quick(bench):
    seeds = list(range(bench.QUICK_SEEDS))
    return bench.run_benchmark(bench.DEFAULT_SCENARIO, seeds, bench.QUICK_STRENGTHS, list(bench.QUICK_OVERRIDES))


# --------------------------------------------------------------------------- pure functions


def test_t_interval_on_known_numbers(bench):
    mean, half = bench.t_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    # t(0.975, 4) = 2.7764451; sd = sqrt(2.5); n = 5
    assert mean == pytest.approx(3.0)
    assert half == pytest.approx(2.7764451 * math.sqrt(2.5) / math.sqrt(5), rel=1e-6)
    assert bench.t_interval([2.0, 2.0, 2.0]) == (2.0, 0.0)
    mean, half = bench.t_interval([0.7])
    assert mean == 0.7 and math.isnan(half)
    wider = bench.t_interval([1.0, 2.0, 3.0, 4.0, 5.0], confidence=0.99)[1]
    assert wider > bench.t_interval([1.0, 2.0, 3.0, 4.0, 5.0])[1]
    with pytest.raises(ValueError):
        bench.t_interval([])


def test_paired_difference_pairs_by_seed_and_ignores_unpaired(bench):
    a = {0: 0.9, 1: 0.8, 2: 0.7, 3: 0.1}
    b = {0: 0.8, 1: 0.7, 2: 0.6}  # seed 3 has no partner
    mean, half = bench.paired_difference(a, b)
    assert mean == pytest.approx(0.1) and half == pytest.approx(0.0, abs=1e-12)


def test_verdict_needs_the_interval_to_exclude_zero(bench):
    assert bench.verdict(0.03, 0.02) == "higher"
    assert bench.verdict(-0.03, 0.02) == "lower"
    assert bench.verdict(0.01, 0.02) == "no resolvable difference"
    assert bench.verdict(0.01, math.nan) == "no interval (one seed)"


def test_accuracy_at_is_the_latest_evaluation_at_or_before(bench):
    evals = [(0.0, 0.1), (1e-4, 0.5), (2e-4, 0.7), (2.5e-4, 0.9)]
    assert bench.accuracy_at(evals, 0.0) == 0.1
    assert bench.accuracy_at(evals, 1.5e-4) == 0.5
    assert bench.accuracy_at(evals, 0.1 + 0.2 - 0.3 + 2e-4) == 0.7  # grid rounding tolerated
    assert bench.accuracy_at(evals, 1.0) == 0.9
    with pytest.raises(ValueError):
        bench.accuracy_at([(1e-4, 0.5)], 0.0)


def test_configurations_label_off_default_and_sync(bench):
    configs = bench.configurations([0.0, 0.1, 0.2], default=0.2)
    assert [c.label for c in configs] == ["sync", "λ0 = 0 (off)", "λ0 = 0.1", "λ0 = 0.2 (default)"]
    assert configs[0].overrides == ["algorithm=sync"] and configs[0].lambda0 is None
    assert configs[1].overrides == ["algorithm.lambda0=0.0"]
    assert bench.default_lambda0() == 0.2


def _point(label, lambda0, seed, evals, end_s):
    return {"configuration": label, "lambda0": lambda0, "seed": seed, "evals": evals, "final_accuracy": evals[-1][1],
            "end_s": end_s, "mean_d_norm": None if lambda0 is None else 1.0, "mean_lambda": lambda0,
            "eval_every_s": 1e-4}


def test_summary_rows_and_table_times_on_hand_made_runs(bench):
    points = [_point("λ0 = 0 (off)", 0.0, s, [(0.0, 0.1), (1e-4, 0.2 + s / 10), (4e-4, 0.5 + s / 10)], 4e-4)
              for s in range(3)]
    points += [_point("λ0 = 0.2 (default)", 0.2, s, [(0.0, 0.1), (1e-4, 0.3 + s / 10), (4e-4, 0.6 + s / 10)], 4e-4)
               for s in range(3)]
    times = bench.table_times(points, fractions=(0.3, 0.5))  # 1.2e-4, 2e-4 rounded down to the 1e-4 grid
    assert times == pytest.approx([1e-4, 2e-4])
    rows = bench.summary_rows(points, times, "λ0 = 0 (off)")
    off, on = rows
    assert off["vs_reference"] is None and off["seeds"] == 3
    assert on["at"][0][0] == pytest.approx(0.4) and off["at"][1][0] == pytest.approx(0.3)
    assert on["final"][0] == pytest.approx(0.7)
    assert on["vs_reference"][0] == pytest.approx(0.1) and on["vs_reference"][1] == pytest.approx(0.0, abs=1e-12)
    assert on["mean_lambda"] == pytest.approx(0.2)
    assert [d[0] for d in on["at_vs_reference"]] == pytest.approx([0.1, 0.1])
    table = bench.summary_table(rows, times)
    assert "| λ0 = 0.2 (default) | 3 | 40.0 ± 24.8 | 40.0 ± 24.8 | 70.0 ± 24.8 | 10.0 ± 0.0 |" in table[3]


# --------------------------------------------------------------------------- the runs


def _by(out, lambda0):
    return {p["seed"]: p for p in out["points"] if p["lambda0"] == lambda0}


def test_off_records_no_lambda_and_trains_differently_from_the_default(quick):
    off, default, sync = _by(quick, 0.0), _by(quick, 0.2), _by(quick, None)
    assert set(off) == set(default) == set(sync) == {0, 1}
    for seed in off:
        assert off[seed]["mean_lambda"] == 0.0 and off[seed]["mean_d_norm"] > 0.0
        assert default[seed]["mean_lambda"] > 0.0
        assert off[seed]["evals"] != default[seed]["evals"]  # the compensation changes the trajectory
        assert off[seed]["evals"][0] == default[seed]["evals"][0]  # from the same initial model
        # equal staleness (1) and equal simulated time: only the gradient differs
        assert off[seed]["max_staleness"] == default[seed]["max_staleness"] == 1
        assert off[seed]["end_s"] < default[seed]["end_s"]  # off skips the compensation pass, and its time
        assert sync[seed]["max_staleness"] == 0 and sync[seed]["mean_lambda"] is None


def test_the_same_seed_gives_the_same_numbers(bench, quick):
    config = bench.configurations([0.2], bench.default_lambda0())[1]
    again = bench.run_point(bench.DEFAULT_SCENARIO, config, 1, list(bench.QUICK_OVERRIDES))
    first = _by(quick, 0.2)[1]
    assert again["evals"] == first["evals"] and again["mean_lambda"] == first["mean_lambda"]
    assert _by(quick, 0.2)[0]["evals"] != first["evals"]  # another seed, another run


def test_outputs_have_their_structure(bench, quick, tmp_path):
    stem = tmp_path / "dc"
    args = argparse.Namespace(out=stem, scenario=bench.DEFAULT_SCENARIO, quick=True, seeds=None)
    conclusion = bench.findings(quick["rows"], quick["default"], quick["times"])
    bench.write_outputs(quick, args, [0, 1], list(bench.QUICK_OVERRIDES), conclusion)
    rows = list(csv.DictReader(stem.with_suffix(".csv").open(encoding="utf-8")))
    assert tuple(rows[0]) == bench.CSV_COLUMNS
    assert {r["configuration"] for r in rows} == {"sync", "λ0 = 0 (off)", "λ0 = 0.2 (default)"}
    assert sum(int(r["final"]) for r in rows) == 6  # one final evaluation per run
    assert stem.with_suffix(".png").stat().st_size > 10_000
    report = stem.with_suffix(".md").read_text(encoding="utf-8")
    assert "python benchmarks/dcs3gd_compensation.py --quick" in report and "![accuracy vs simulated time](dc.png)" in report
    assert "| λ0 = 0 (off) | 2 |" in report and "max recorded: 1" in report
    assert any(line.startswith("Compensation at the default λ0 = 0.2") for line in conclusion)
    assert "Rigazzi" in conclusion[-1] and any(line.startswith("At the fixed times") for line in conclusion)
