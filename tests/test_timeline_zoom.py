"""The timeline zooms on steady iterations below an overview strip of the whole run, with a scale bar."""

from __future__ import annotations

import pandas as pd
import pytest
from mpl_toolkits.axes_grid1.anchored_artists import AnchoredSizeBar

from simdist.api import run
from simdist.result_files import load_result_dir
from simdist.timeline_figure import WARMUP_ITERATIONS, ZOOM_ITERATIONS, draw_timeline, zoom_window


def spans_of(starts, rank=0):
    return pd.DataFrame({"rank": rank, "kind": "compute", "name": "forward/backward", "start_s": starts,
                         "end_s": [s + 0.5 for s in starts], "blocking": True})


def test_the_window_skips_the_warm_up_and_covers_the_next_iterations_of_the_first_rank():
    spans = pd.concat([spans_of([0.0, 1.0, 2.0, 3.5, 4.0, 5.0, 6.0]), spans_of([0.0, 9.0], rank=1)])
    assert zoom_window(spans, 10.0) == (float(WARMUP_ITERATIONS), [0.0, 1.0, 2.0, 3.5, 4.0, 5.0][
        WARMUP_ITERATIONS + ZOOM_ITERATIONS])


def test_too_few_iterations_give_no_zoom():
    assert zoom_window(spans_of([0.0, 1.0, 2.0]), 3.0) is None


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tl") / "qs"
    run("scenarios/quickstart.yaml", set={"stop.steps": 20, "stop.epochs": None}, out=out)
    return load_result_dir(out)


def test_a_long_run_draws_the_overview_strip_and_the_zoom_with_a_scale_bar(long_run):
    fig = draw_timeline(long_run)
    overview, zoom = fig.axes[0], fig.axes[1]
    assert overview.get_xlim()[0] == 0.0 and overview.get_xlim()[1] >= long_run.summary["virtual_time_s"] * 0.999
    low, high = zoom.get_xlim()
    assert 0 < low < high < overview.get_xlim()[1]  # the zoom is a window inside the run
    assert "zoom: iterations 3-5 of rank 0" in overview.get_title()
    bars = [a for a in zoom.artists if isinstance(a, AnchoredSizeBar)]
    assert len(bars) == 1 and bars[0].txt_label.get_text() in {"scale: 1 µs", "scale: 2 µs", "scale: 5 µs",
                                                               "scale: 10 µs", "scale: 20 µs", "scale: 50 µs",
                                                               "scale: 100 µs", "scale: 200 µs", "scale: 500 µs"}
    fig.canvas.draw()  # right of the zoom, where it covers no span and no tick label
    assert bars[0].get_window_extent().x0 >= zoom.get_window_extent().x1
    assert zoom.xaxis.get_label_text() == "virtual time (µs)"
