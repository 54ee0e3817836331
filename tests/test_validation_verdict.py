"""simdist validate's verdict: the deciding figures of a summary, each judged against its target."""

import io

from rich.console import Console

from simdist.validation.verdict import (LEDGER_PART_PCT, LEDGER_SHARE_PCT, TARGET_MEDIAN_PCT, overall,
                                        print_verdict, verdict_rows)


def summary(median=4.0, p90=12.0, ledger=None):
    return {"algorithm": "sync", "workers": 2, "median_abs_iteration_error_pct": median,
            "p90_abs_iteration_error_pct": p90, "measured_total_s": 0.5, "predicted_total_s": 0.45,
            "total_time_error_pct": -10.0, "ledger": ledger or []}


def part(name, measured, predicted, share):
    error = None if measured == 0 else 100.0 * (predicted - measured) / measured
    return {"part": name, "measured_s": measured, "predicted_s": predicted, "error_pct": error, "share_pct": share}


def by_figure(rows):
    return {row["figure"]: row for row in rows}


def test_iteration_figures_pass_within_their_targets_and_fail_outside():
    rows = by_figure(verdict_rows(summary(median=TARGET_MEDIAN_PCT, p90=25.0)))
    assert rows["iteration time, median |error|"]["passed"] is True  # the bound itself passes
    assert rows["iteration time, p90 |error|"]["passed"] is False
    assert rows["total time"]["passed"] is None  # shown, judged through the iteration figures
    assert not overall(list(rows.values()))


def test_a_missing_error_fails_its_target():
    rows = by_figure(verdict_rows(summary(median=None)))
    assert rows["iteration time, median |error|"]["passed"] is False


def test_only_ledger_parts_of_a_sizeable_share_are_judged():
    ledger = [part("forward_backward", 1.0e-3, 1.1e-3, 60.0),   # +10 %: within 15 %
              part("comm_wire", 0.5e-3, 0.3e-3, 30.0),          # -40 %: fails
              part("pack", 0.04e-3, 0.2e-3, LEDGER_SHARE_PCT - 1),  # +400 % but too small to judge
              part("checkpoint", 0.0, 0.0, 0.0),                # charged by neither: not listed
              part("step", 1.7e-3, 1.6e-3, 100.0)]
    rows = verdict_rows(summary(ledger=ledger))
    figures = by_figure(rows)
    assert figures["forward_backward (60 % of step)"]["passed"] is True
    assert figures["comm_wire (30 % of step)"]["passed"] is False
    assert figures["pack (4 % of step)"]["passed"] is None
    assert figures["step (ledger)"]["passed"] is None
    assert not any(row["figure"].startswith("checkpoint") for row in rows)
    assert abs(figures["comm_wire (30 % of step)"]["error_pct"]) > LEDGER_PART_PCT
    assert not overall(rows)


def test_every_figure_within_target_passes_overall():
    ledger = [part("forward_backward", 1.0e-3, 1.05e-3, 80.0), part("step", 1.25e-3, 1.3e-3, 100.0)]
    assert overall(verdict_rows(summary(ledger=ledger)))


def test_the_printed_table_shows_values_errors_verdicts_and_where_the_summary_is():
    out = io.StringIO()
    ledger = [part("comm_wire", 0.5e-3, 0.3e-3, 30.0)]
    passed = print_verdict(summary(ledger=ledger), "results/v/validation.json",
                           console=Console(file=out, width=140, color_system=None))
    text = out.getvalue()
    assert passed is False
    assert "sync on 2 workers" in text
    assert "500us" in text and "300us" in text and "-40.0 %" in text
    assert "FAIL" in text and "pass" in text
    assert "some figures miss their target" in text and "results/v/validation.json" in text
