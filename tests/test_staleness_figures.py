"""Staleness small multiples: one panel per worker count, versions and seconds, identical series named together."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from simdist.staleness_figures import StalenessPoint, plot_staleness_panels, staleness_points


def run(algorithm, workers, staleness, virtual_time_s=1.0, steps=10):
    return SimpleNamespace(algorithm=algorithm, n_workers=workers, steps=pd.DataFrame({"staleness": staleness}),
                           summary={"virtual_time_s": virtual_time_s, "steps": steps})


def test_points_pool_seeds_and_price_a_version_at_the_run_s_time_per_step():
    points = staleness_points([run("asgd", 4, [3, 3, 2], 1.0, 10), run("asgd", 4, [3, 1], 3.0, 10),
                               run("sync", 4, [0, 0]), run("asgd", 8, [7])])
    by_key = {(p.algorithm, p.workers): p for p in points}
    assert list(by_key) == [("asgd", 4), ("sync", 4), ("asgd", 8)]
    asgd = by_key[("asgd", 4)]
    assert list(asgd.versions) == [3, 3, 2, 3, 1]
    assert asgd.seconds_per_version == pytest.approx(0.2)  # mean of 0.1 and 0.3 s per step
    assert asgd.seconds == pytest.approx([0.6, 0.6, 0.4, 0.6, 0.2])


def test_runs_without_staleness_rows_or_worker_counts_are_left_out():
    assert staleness_points([run("sync", None, [0]), run("asgd", 2, [])]) == []
    assert plot_staleness_panels([], "nothing") is None


def test_one_column_per_worker_count_two_rows_and_identical_series_named_together():
    same = np.array([0, 1, 1, 2])
    points = [StalenessPoint("asgd", 2, same, 0.01), StalenessPoint("dbs", 2, same.copy(), 0.01),
              StalenessPoint("sync", 2, np.zeros(4), 0.01), StalenessPoint("asgd", 4, np.array([3, 3]), 0.02)]
    fig = plot_staleness_panels(points, "demo: staleness by worker count")
    axes = fig.axes
    assert len(axes) == 4  # 2 worker counts x (versions, seconds)
    assert [ax.get_title() for ax in axes[:2]] == ["2 workers", "4 workers"]
    labels = [t.get_text() for t in axes[2].get_xticklabels()]  # bottom row, 2 workers
    assert labels == ["asgd = dbs", "sync"]
    assert axes[0].get_ylabel() == "staleness (versions)"
    assert axes[2].get_ylabel() == "staleness (ms)"  # 0.02 s x 3 versions = 60 ms at most
    fig.canvas.draw()
    for ax in axes:
        assert ax.yaxis.get_offset_text().get_text() == ""
        assert all(float(t.get_text().replace("−", "-")) == int(float(t.get_text().replace("−", "-")))
                   for t in axes[0].get_yticklabels() if t.get_text())  # versions: integer ticks



def test_labels_keep_two_variants_of_one_algorithm_apart():
    runs = [run("nsoftsync", 4, [0, 1]), run("nsoftsync", 4, [2, 3])]
    assert len(staleness_points(runs)) == 1  # by algorithm: pooled as seeds
    points = staleness_points(runs, ["n=1", "n=2"])
    assert [(p.algorithm, list(p.versions)) for p in points] == [("n=1", [0, 1]), ("n=2", [2, 3])]
