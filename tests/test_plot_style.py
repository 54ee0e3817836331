"""The look of a run's figures: units chosen from the data, no axis offsets, integer ticks for
counted quantities, degenerate data described in words, and byte-identical PNG and SVG files."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure

import simdist
from simdist import plot_style as style
from simdist.plots import FIGURES, MIN_SPAN_PX, figure, plot_result_dir
from simdist.result_files import load_result_dir

from helpers import tiny_scenario

DRAWN = ("loss_vs_time", "accuracy_vs_time", "staleness_hist", "staleness_vs_time", "iteration_times", "timeline",
         "time_per_step", "link_utilisation")


def _run(tmp_path_factory, name: str, **changes):
    out = tmp_path_factory.mktemp(name) / "run"
    scenario = tiny_scenario(name=name, evaluation={"every_steps": 2},
                             outputs={"plots": True, "trace": True}, **changes)
    simdist.run(scenario, out=out)
    return out


@pytest.fixture(scope="module")
def sync_dir(tmp_path_factory):
    """Six steps of sync on 2 ranks: every iteration takes the same time, every staleness is 0."""
    return _run(tmp_path_factory, "style-sync", stop={"steps": 6})


@pytest.fixture(scope="module")
def asgd_dir(tmp_path_factory):
    """asgd with 3 workers and a server: staleness 0, 1 and 2, and a server that waits."""
    return _run(tmp_path_factory, "style-asgd", algorithm="asgd", workers=3,
                platform={"preset": "laptop-cpu", "node": {"devices": 4}}, stop={"steps": 12})


def _drawn(loaded, name) -> Figure:
    fig = figure(loaded, name)
    assert fig is not None, name
    fig.canvas.draw()  # tick labels and offsets exist only once drawn
    return fig


def _texts(fig: Figure) -> str:
    ax = fig.axes[0]
    legend = ax.get_legend()
    parts = [ax.get_title(), *(t.get_text() for t in ax.texts)]
    parts += [t.get_text() for t in legend.get_texts()] if legend is not None else []
    return " | ".join(parts)


@pytest.mark.parametrize(("seconds", "text"), [(1.04e-4, "104 µs"), (2.5e-2, "25 ms"), (3.0, "3 s"),
                                               (90.0, "90 s"), (150.0, "2.5 min"), (3 * 3600.0, "3 h"),
                                               (4e-9, "4 ns"), (0.0, "0 s")])
def test_durations_read_in_the_unit_that_fits(seconds, text):
    assert style.format_duration(seconds) == text


def test_units_for_axes_bytes_and_rates():
    assert style.time_unit(2.5e-2) == ("ms", 1e-3)
    assert style.time_unit(1.04e-4) == ("µs", 1e-6)
    assert style.format_size(3 * 2**20) == "3 MiB" and style.format_size(512) == "512 B"
    assert style.format_size(1.5 * 2**30) == "1.5 GiB"
    assert style.format_rate(2.5e10) == "25 GB/s" and style.format_rate(1.25e8) == "125 MB/s"


def test_a_25_ms_axis_is_labelled_in_whole_milliseconds():
    fig = Figure()
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.plot([0.0, 0.025], [0.0, 1.0])
    assert style.time_axis(ax.xaxis, "virtual time", 0.025) == "ms"
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert ax.xaxis.get_label_text() == "virtual time (ms)"
    assert "25" in labels and "0" in labels and all("." not in t and "e" not in t for t in labels)
    assert ax.xaxis.get_offset_text().get_text() == ""


def test_bytes_and_rate_axes():
    fig = Figure()
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.plot([0.0, 3 * 2**20], [0.0, 2.5e10])
    assert style.bytes_axis(ax.xaxis, "payload", 3 * 2**20) == "MiB"
    assert style.rate_axis(ax.yaxis, "bandwidth", 2.5e10) == "GB/s"
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert {"1.0", "1.5", "3.0"} <= set(labels)  # ticks on half MiB, not on powers of ten of bytes
    assert ax.yaxis.get_label_text() == "bandwidth (GB/s)"


def test_float_noise_is_a_constant_but_a_real_spread_is_not():
    assert style.constant_value(np.full(5, 1.040454e-4) + np.arange(5) * 1e-13) == pytest.approx(1.040454e-4)
    assert style.constant_value(np.array([1.0e-4, 1.2e-4])) is None
    assert style.constant_value(np.zeros(3)) == 0.0


def test_no_axis_of_any_figure_has_an_offset_and_titles_name_the_scenario(sync_dir, asgd_dir):
    for directory, scenario in ((sync_dir, "style-sync"), (asgd_dir, "style-asgd")):
        loaded = load_result_dir(directory)
        for name in DRAWN:
            fig = _drawn(loaded, name)
            for ax in fig.axes:
                assert ax.xaxis.get_offset_text().get_text() == "", (scenario, name)
                assert ax.yaxis.get_offset_text().get_text() == "", (scenario, name)
                ticks = [t.get_text() for t in (*ax.get_xticklabels(), *ax.get_yticklabels())]
                assert not any("e-" in t or "e+" in t for t in ticks), (scenario, name, ticks)
            assert fig.axes[0].get_title().startswith(scenario), name


def test_constant_iteration_times_are_one_marked_value(sync_dir):
    fig = _drawn(load_result_dir(sync_dir), "iteration_times")
    text = _texts(fig)
    assert "every iteration took" in text and "(10 iterations)" in text  # 2 workers × 5 intervals
    ax = fig.axes[0]
    assert ax.get_ylim()[0] == 0.0 and ax.yaxis.get_label_text().endswith("(µs)")
    assert not [p for p in ax.patches]  # no boxes drawn from floating-point noise


def test_sync_staleness_says_every_update_has_staleness_0(sync_dir):
    fig = _drawn(load_result_dir(sync_dir), "staleness_hist")
    assert "every update has staleness 0 (12 updates)" in _texts(fig)
    ax = fig.axes[0]
    assert [p.get_height() for p in ax.patches] == [12]
    assert all(float(t).is_integer() for t in ax.get_xticks())


def test_staleness_axes_have_integer_ticks(asgd_dir):
    loaded = load_result_dir(asgd_dir)
    fig = _drawn(loaded, "staleness_hist")
    ax = fig.axes[0]
    for axis in (ax.xaxis, ax.yaxis):
        ticks = [t for t in axis.get_majorticklocs()]
        assert ticks and all(float(t).is_integer() for t in ticks)
        assert all("." not in label.get_text() for label in axis.get_ticklabels())
    assert "every update" not in _texts(fig)  # staleness varies: drawn, not summarised
    assert sorted(p.get_x() + p.get_width() / 2 for p in ax.patches) == [0.0, 1.0, 2.0]


def test_timeline_colours_kinds_and_widens_thin_spans(asgd_dir):
    fig = _drawn(load_result_dir(asgd_dir), "timeline")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:3] == ["compute", "communication", "waiting"]
    colours = {tuple(np.round(c.get_facecolor()[0][:3], 3)) for c in ax.collections}
    assert len(colours) >= 3  # compute, comm and wait each in their own colour
    end_s = ax.get_xlim()[1]
    axes_px = ax.get_window_extent().width
    for bars in ax.collections:
        assert isinstance(bars, PolyCollection)
        widths_px = [np.ptp(path.vertices[:, 0]) / end_s * axes_px for path in bars.get_paths()]
        assert min(widths_px) >= 0.99 * MIN_SPAN_PX * fig.dpi / style.DPI  # at least a pixel or so, at any dpi
    assert ax.xaxis.get_label_text() == "virtual time (µs)"


def test_a_sync_timeline_says_it_never_waits(sync_dir):
    fig = _drawn(load_result_dir(sync_dir), "timeline")
    assert "waiting (none)" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_two_draws_give_identical_png_and_svg(sync_dir, tmp_path):
    first = plot_result_dir(sync_dir, tmp_path / "a")
    second = plot_result_dir(sync_dir, tmp_path / "b")
    assert sorted(p.name for p in first) == sorted(f"{f}.{e}" for f in DRAWN for e in ("png", "svg"))
    assert {p.name: p.read_bytes() for p in first} == {p.name: p.read_bytes() for p in second}
    written = {p.name: p.read_bytes() for p in first}
    assert all(written[f"{f}.png"].startswith(b"\x89PNG") and b"<svg" in written[f"{f}.svg"][:2000] for f in DRAWN)
    assert all(name.split(".")[0] in FIGURES for name in written)


def test_staleness_over_time_shows_each_update_and_a_running_mean_or_says_it_never_varies(asgd_dir, sync_dir):
    fig = _drawn(load_result_dir(asgd_dir), "staleness_vs_time")
    ax = fig.axes[0]
    dots, running = ax.lines[0], ax.lines[1]
    assert len(dots.get_xdata()) == len(load_result_dir(asgd_dir).steps)
    assert running.get_label().startswith("mean of the last")
    assert all(float(t).is_integer() for t in ax.yaxis.get_majorticklocs())
    sync = _drawn(load_result_dir(sync_dir), "staleness_vs_time")
    assert "every update has staleness 0 (12 updates)" in _texts(sync) and len(sync.axes[0].lines) == 1
