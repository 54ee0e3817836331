"""Accuracy small multiples: a panel per run, the others grey behind it, identical curves named together."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from simdist.accuracy_figures import accuracy_curves, plot_accuracy_panels
from simdist.overlay_figures import MAX_OVERLAID, variant_labels


def run(algorithm, accuracy, times_s=(0.0, 0.002, 0.004), workers=4, target=0.9, folder=None):
    evals = pd.DataFrame({"time_s": list(times_s) * 2, "step": [0, 10, 20] * 2, "worker": [0] * 3 + [1] * 3,
                          "test_accuracy": list(accuracy) + [a + 0.1 for a in accuracy]})
    return SimpleNamespace(algorithm=algorithm, n_workers=workers, evals=evals, path=Path(folder or algorithm),
                           summary={"target_accuracy": target})


def test_a_curve_is_the_mean_over_evaluated_workers_and_identical_curves_merge():
    curves = accuracy_curves([run("asgd", [0.1, 0.5, 0.8]), run("dbs", [0.1, 0.5, 0.8]), run("sync", [0.1, 0.6, 0.9])])
    assert [name for name, _ in curves] == ["asgd = dbs", "sync"]
    assert list(curves[1][1].to_numpy()) == pytest.approx([0.15, 0.65, 0.95])
    steps = accuracy_curves([run("sync", [0.1, 0.6, 0.9])], x="step")
    assert list(steps[0][1].index) == [0, 10, 20]


def test_runs_without_evaluations_are_left_out():
    empty = SimpleNamespace(algorithm="sync", n_workers=2, path=Path("x"), summary={},
                            evals=pd.DataFrame(columns=["time_s", "step", "worker", "test_accuracy"]))
    assert accuracy_curves([empty]) == []
    assert plot_accuracy_panels([empty], "nothing") is None


def test_a_panel_per_curve_the_others_grey_the_target_dashed_and_time_in_its_unit():
    runs = [run(name, [0.1, 0.3 + i / 10, 0.5 + i / 10]) for i, name in enumerate(
        ["sync", "asgd", "nsoftsync", "dbs", "dcs3gd"])]
    fig = plot_accuracy_panels(runs, "demo: test accuracy vs virtual time, 4 workers each")
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in visible] == ["sync", "asgd", "nsoftsync", "dbs", "dcs3gd"]
    assert len(fig.axes) == 8  # two rows of four, the last three hidden
    first = visible[0]
    lines = first.get_lines()
    assert len(lines) == 6  # four grey, the target, its own
    assert lines[-1].get_marker() == "o" and lines[-1].get_color() != lines[0].get_color()
    assert [line.get_linestyle() for line in lines if list(line.get_ydata()) == [0.9, 0.9]] == ["--"]
    fig.canvas.draw()
    assert visible[-1].get_xlabel() == "virtual time (ms)"  # the run lasts 4 ms
    ticks = [t.get_text() for t in visible[-1].get_xticklabels()]
    assert "4" in ticks and not any("." in t for t in ticks)  # whole milliseconds, not 0.004 s
    assert visible[0].get_xlabel() == "" and visible[4].get_ylabel() == "test accuracy"  # outer labels only
    assert fig.get_suptitle() == "demo: test accuracy vs virtual time, 4 workers each"
    for ax in visible:
        assert ax.xaxis.get_offset_text().get_text() == "" and ax.yaxis.get_offset_text().get_text() == ""


def test_compare_names_variants_by_their_folders_and_overlays_only_a_few():
    assert variant_labels([run("dbs", [0.1] * 3, folder="dbs-8"), run("dbs", [0.1] * 3, folder="dbs-8-weighted")]) \
        == ["dbs-8", "dbs-8-weighted"]
    assert variant_labels([run("dbs", [0.1] * 3, folder="x"), run("sync", [0.1] * 3, folder="x")]) == ["dbs", "sync"]
    assert MAX_OVERLAID == 3
