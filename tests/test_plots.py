"""Figures are drawn from a result directory, and figures without data are skipped."""

from __future__ import annotations

import re
import time

import numpy as np
import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.container import ErrorbarContainer

from simdist import plot_style as style
from simdist.plot_common import new_figure, save_figure
from simdist.plots import (FIGURES, overlay_accuracy, overlay_staleness, plot_efficiency, plot_result_dir,
                           plot_speedup, plot_tables, plot_time_to_accuracy)
from simdist.scaling_figures import NOT_REACHED_Y
from simdist.recorder import Recorder
from simdist.results import load_result_dir, write_result_dir

try:
    from test_metrics import make_result
except ImportError:  # tests/ collected as a package
    from .test_metrics import make_result

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _names(paths):
    return sorted(p.name for p in paths)


def _all(figures):
    return sorted(f"{f}.{ext}" for f in figures for ext in ("png", "svg"))


# make_result's batch sizes stay constant (≤ 2 sizes per worker), so no batch-size figure
DRAWN = tuple(f for f in FIGURES if f != "batch_size_vs_time")


def test_write_result_dir_draws_every_figure(tmp_path):
    out = write_result_dir(make_result(), tmp_path / "run")
    assert _names((out / "plots").iterdir()) == _all(DRAWN)
    for figure in DRAWN:
        assert (out / "plots" / f"{figure}.png").read_bytes().startswith(PNG_MAGIC)
        assert b"<svg" in (out / "plots" / f"{figure}.svg").read_bytes()[:2000]


def test_plot_result_dir_reads_the_directory_deterministically(tmp_path):
    out = write_result_dir(make_result(), tmp_path / "run", plots=False)
    paths = plot_result_dir(out)
    assert _names(paths) == _all(DRAWN)
    assert all(p.parent == out / "plots" and p.stat().st_size > 0 for p in paths)
    elsewhere = plot_result_dir(out, tmp_path / "figs")
    assert _names(elsewhere) == _all(DRAWN) and all(p.parent == tmp_path / "figs" for p in elsewhere)
    assert {p.name: p.read_bytes() for p in paths} == {p.name: p.read_bytes() for p in elsewhere}


def test_timing_only_run_skips_loss_and_accuracy(tmp_path):
    out = write_result_dir(make_result(timing_only=True), tmp_path / "run")
    assert _names((out / "plots").iterdir()) == _all(["staleness_hist", "staleness_vs_time", "iteration_times",
                                                       "timeline", "time_per_step", "link_utilisation"])


def test_run_without_updates_skips_staleness_but_keeps_test_loss(tmp_path):
    out = write_result_dir(make_result(updates=False), tmp_path / "run")
    assert _names((out / "plots").iterdir()) == _all(["loss_vs_time", "accuracy_vs_time", "timeline",
                                                       "time_per_step", "link_utilisation"])


def test_missing_trace_skips_the_timeline(tmp_path):
    out = write_result_dir(make_result(), tmp_path / "run", plots=False)
    (out / "trace.json").unlink()
    paths = plot_tables(load_result_dir(out), tmp_path / "figs")
    assert _names(paths) == _all(["loss_vs_time", "accuracy_vs_time", "staleness_hist", "staleness_vs_time",
                                  "iteration_times", "time_per_step", "link_utilisation"])


def test_run_with_nothing_draws_nothing(tmp_path):
    result = make_result(updates=False, evals=False, link_usage=False)
    result.recorder.spans.clear()
    out = write_result_dir(result, tmp_path / "run")
    assert list((out / "plots").iterdir()) == []


def test_overlays_label_runs_by_algorithm(tmp_path):
    a = make_result()
    b = make_result()
    b.algorithm = "sync"
    runs = [load_result_dir(write_result_dir(r, tmp_path / r.algorithm, plots=False)) for r in (a, b)]
    ax = overlay_accuracy(runs)
    assert isinstance(ax, Axes)
    assert [line.get_label() for line in ax.get_lines()] == ["asgd", "sync"]
    assert list(ax.get_lines()[0].get_ydata()) == pytest.approx([0.55, 0.85])  # mean over workers
    ax2 = overlay_staleness(runs, ax=None)
    assert [p.get_label() for p in ax2.patches] == ["asgd", "sync"]
    ax2.figure.savefig(tmp_path / "overlay.png")
    assert (tmp_path / "overlay.png").read_bytes().startswith(PNG_MAGIC)


def test_overlay_labels_stay_distinct_for_the_same_algorithm(tmp_path):
    runs = [load_result_dir(write_result_dir(make_result(), tmp_path / name, plots=False)) for name in ("x", "y")]
    labels = [line.get_label() for line in overlay_accuracy(runs).get_lines()]
    assert len(set(labels)) == 2 and all(label.startswith("asgd") for label in labels)


def _big_result(n_updates: int = 20_000, n_workers: int = 8):
    result = make_result()
    rec = Recorder()
    rng = np.random.default_rng(0)
    clock = np.zeros(n_workers)
    for i in range(n_updates):
        w = i % n_workers
        start = clock[w]
        mid = start + rng.uniform(0.01, 0.02)
        clock[w] = mid + 0.005
        rec.span(w, "compute", "forward/backward", start, mid)
        rec.span(w, "comm", "push", mid, clock[w])
        rec.update(time_s=clock[w], worker=w, step=i + 1, version=i, staleness=int(rng.integers(0, 10)),
                   batch_size=32, loss=float(2.0 * np.exp(-i / 5000) + rng.normal(0, 0.1)))
    for k in range(50):
        for w in range(n_workers):
            rec.evaluation(time_s=k * 0.5, step=k * 100, worker=w, test_loss=1.0, test_accuracy=k / 50)
    result.recorder = rec
    result.ranks = [type(result.ranks[0])(w, w // 2, "cpu") for w in range(n_workers)]
    result.virtual_time_s = float(clock.max())
    return result


@pytest.mark.slow
def test_plotting_20k_updates_is_fast(tmp_path):
    out = write_result_dir(_big_result(), tmp_path / "run", plots=False)
    loaded = load_result_dir(out)
    start = time.perf_counter()
    paths = plot_tables(loaded, tmp_path / "figs")
    elapsed = time.perf_counter() - start
    assert set(_all(DRAWN)) <= set(_names(paths))
    assert elapsed < 4.0  # about 1.5 s on a laptop-class core; generous for shared CI machines


def test_changing_batch_sizes_draw_the_batch_size_figure(tmp_path):
    result = make_result()
    for i, size in enumerate((40, 30, 20)):
        result.recorder.update(time_s=11.0 + i, worker=1, step=6 + i, version=5 + i, staleness=0,
                               batch_size=size, loss=1.0)
    out = write_result_dir(result, tmp_path / "run")
    assert (out / "plots" / "batch_size_vs_time.png").read_bytes().startswith(PNG_MAGIC)


SWEEP = pd.DataFrame({
    "algorithm": ["sync"] * 6 + ["asgd"] * 6 + ["dbs"] * 6 + ["nsoftsync"] * 6,
    "workers": [1, 1, 2, 2, 4, 4] * 4, "seed": [0, 1] * 12,
    "throughput_samples_per_s": [10.0, 12.0, 18.0, 20.0, 30.0, 34.0] + [9.0, 11.0, 19.0, 23.0, 35.0, 37.0] * 2
    + [8.0, 9.0, 12.0, 14.0, 15.0, 16.0],
    "time_to_accuracy_s": [5.0, 6.0, 3.0, 3.2, 2.0, 2.2] + [5.5, 6.5, 2.0, 2.5, 1.0, None] * 2
    + [7.0, 7.5, None, None, None, None],
    "target_accuracy": [0.9] * 24,
})


def _tick_texts(ax: Axes) -> list[str]:
    ax.figure.canvas.draw()
    texts = [t.get_text() for axis in (ax.xaxis, ax.yaxis) for t in axis.get_ticklabels() if t.get_text()]
    assert ax.xaxis.get_offset_text().get_text() == "" and ax.yaxis.get_offset_text().get_text() == ""
    return texts


@pytest.mark.parametrize("draw", [plot_speedup, plot_efficiency, plot_time_to_accuracy])
def test_scaling_figures_have_error_bars_merged_twins_and_plain_ticks(draw):
    ax = draw(SWEEP)
    labels = ax.get_legend_handles_labels()[1]
    assert "asgd = dbs" in labels and "asgd" not in labels and "dbs" not in labels
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert {c.get_label() for c in bars} >= {"sync", "asgd = dbs"}
    caps = [seg for c in bars if c.get_label() == "sync" for seg in c.lines[2][0].get_segments()]
    assert any(abs(seg[1][1] - seg[0][1]) > 0 for seg in caps)  # two seeds that differ: a visible interval
    for text in _tick_texts(ax):
        assert re.fullmatch(r"[0-9.,]+", text), text  # no offset, no exponent, no mathtext
    assert "seeds" in ax.get_title()


def test_speedup_is_against_one_baseline_with_the_ideal_line():
    ax = plot_speedup(SWEEP)
    assert "against sync@1" in ax.get_title() and "over 2 seeds" in ax.get_title()
    ideal = next(line for line in ax.get_lines() if line.get_label() == "ideal")
    assert list(ideal.get_xdata()) == [1, 2, 4] and list(ideal.get_ydata()) == [1, 2, 4]
    sync = next(c for c in ax.containers if c.get_label() == "sync")
    assert list(sync.lines[0].get_ydata()) == pytest.approx([1.0, (1.8 + 20 / 12) / 2, (3.0 + 34 / 12) / 2])
    other = plot_speedup(SWEEP, baseline="asgd@1")
    assert "against asgd@1" in other.get_title()


def test_time_to_accuracy_draws_never_reached_at_the_top_and_counts_partial_seeds():
    ax = plot_time_to_accuracy(SWEEP)
    texts = [t.get_text() for t in ax.texts]
    assert "not reached" in texts and "1/2" in texts  # asgd = dbs reached at 4 workers in one seed of two
    top = [line for line in ax.get_lines() if list(line.get_ydata()) == [NOT_REACHED_Y] * 2]
    assert len(top) == 2  # the dotted line and nsoftsync's hollow markers at 2 and 4 workers
    assert any(line.get_label().startswith("baseline sync@1") for line in ax.get_lines())


def test_scaling_figures_redraw_byte_identical(tmp_path):
    def draw(stem):
        with style.style_context():
            fig, ax = new_figure()
            plot_speedup(SWEEP, ax)
            return save_figure(style.finish_axes(fig), stem)

    first, second = draw(tmp_path / "a"), draw(tmp_path / "b")
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]
