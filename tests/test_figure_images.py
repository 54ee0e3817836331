"""Every figure type, drawn from small deterministic data, compared with its baseline image.

A change that moves an axis, a label, a colour or a unit shows up here as an image difference
(matplotlib.testing.compare, RMS tolerance :data:`TOLERANCE`), and every axis is checked for an
offset text. Baselines are PNGs at a low resolution in ``tests/data/figure_baselines/``; after an
intended change of a figure, re-record them with::

    SIMDIST_RECORD_FIGURES=1 python -m pytest tests/test_figure_images.py

and look at the new images before committing them.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from matplotlib.testing.compare import compare_images

from simdist import plot_style as style
from simdist.accuracy_figures import plot_accuracy_panels
from simdist.api import run
from simdist.ledger import PARTS
from simdist.ledger_figures import ledger_panels
from simdist.plot_common import new_figure
from simdist.result_files import load_result_dir
from simdist.run_figures import FIGURES, figure
from simdist.scaling_figures import plot_efficiency, plot_speedup, plot_time_to_accuracy
from simdist.staleness_figures import StalenessPoint, plot_staleness_panels

BASELINES = Path(__file__).parent / "data" / "figure_baselines"
RECORD = os.environ.get("SIMDIST_RECORD_FIGURES") == "1"
DPI = 40  # small files; still enough to see a moved axis or a changed colour
TOLERANCE = 6.0  # RMS of the 0..255 pixel difference


@pytest.fixture(scope="module")
def async_run(tmp_path_factory):
    """An asgd run with heterogeneous workers: staleness, changing iteration times, a server."""
    out = tmp_path_factory.mktemp("figures") / "asgd"
    run("scenarios/quickstart.yaml", set={"algorithm": {"name": "asgd"}, "workers": 3, "stop.steps": 24,
                                          "stop.epochs": None, "evaluation.every_steps": 6,
                                          "platform.device_overrides": [{"ranks": [2], "cpus": 0.5}]}, out=out)
    return load_result_dir(out)


SWEEP = pd.DataFrame({
    "algorithm": ["sync"] * 6 + ["asgd"] * 6, "workers": [1, 1, 2, 2, 4, 4] * 2, "seed": [0, 1] * 6,
    "throughput_samples_per_s": [100, 104, 180, 186, 300, 310, 95, 97, 150, 160, 170, 190],
    "time_to_accuracy_s": [5.0, 5.2, 3.0, 3.1, 2.0, 2.2, 5.5, 5.6, 4.0, None, None, None],
    "best_test_accuracy": [0.95] * 12, "target_accuracy": [0.9] * 12, "mean_staleness": [0] * 6 + [0, 0, 1, 1, 3, 3],
})


def _ledger(forward: float, wait: float) -> pd.DataFrame:
    rows = pd.DataFrame({part: [0.0, 0.0] for part in PARTS})
    rows["forward_backward"], rows["wait"], rows["comm_wire"] = forward, wait, forward / 4
    return rows


def _accuracy_run(algorithm: str, accuracy: list[float]) -> SimpleNamespace:
    evals = pd.DataFrame({"time_s": [0.0, 0.002, 0.004, 0.006], "step": [0, 8, 16, 24], "test_accuracy": accuracy})
    return SimpleNamespace(algorithm=algorithm, n_workers=4, evals=evals, path=Path(algorithm),
                           summary={"target_accuracy": 0.8})


def _scaling(draw):
    def make():
        with style.style_context():
            fig, ax = new_figure()
            draw(SWEEP, ax)
            return fig
    return make


SYNTHETIC = {
    "speedup": _scaling(lambda t, ax: plot_speedup(t, ax)),
    "efficiency": _scaling(lambda t, ax: plot_efficiency(t, ax)),
    "time_to_accuracy": _scaling(lambda t, ax: plot_time_to_accuracy(t, ax)),
    "staleness_panels": lambda: plot_staleness_panels(
        [StalenessPoint("sync", 2, np.zeros(8), 0.01), StalenessPoint("asgd", 2, np.array([0, 1, 1, 1, 2, 1]), 0.01),
         StalenessPoint("asgd", 4, np.array([2, 3, 3, 4, 3, 3]), 0.005)], "demo: staleness by worker count"),
    "accuracy_panels": lambda: plot_accuracy_panels(
        [_accuracy_run("sync", [0.1, 0.5, 0.8, 0.9]), _accuracy_run("asgd", [0.1, 0.7, 0.85, 0.9]),
         _accuracy_run("dbs", [0.1, 0.7, 0.85, 0.9]), _accuracy_run("dcs3gd", [0.1, 0.3, 0.6, 0.7]),
         _accuracy_run("nnt", [0.1, 0.6, 0.6, 0.95])], "demo: test accuracy vs virtual time, 4 workers each"),
    "ledger_panels": lambda: ledger_panels({2: {"sync": _ledger(0.1, 0.01), "asgd": _ledger(0.1, 0.03)},
                                            4: {"sync": _ledger(0.1, 0.02)}}, "demo: where a step's time goes"),
}


def _check(fig, name: str, tmp_path: Path) -> None:
    fig.canvas.draw()
    for ax in fig.axes:  # never an offset or a scientific multiplier on an axis
        assert ax.xaxis.get_offset_text().get_text() == "" and ax.yaxis.get_offset_text().get_text() == "", name
    baseline = BASELINES / f"{name}.png"
    if RECORD:
        BASELINES.mkdir(parents=True, exist_ok=True)
        fig.savefig(baseline, dpi=DPI, metadata=style.save_metadata("png"))
        return
    assert baseline.is_file(), f"no baseline image for {name}: record it (see this module's docstring)"
    actual = tmp_path / f"{name}.png"
    fig.savefig(actual, dpi=DPI, metadata=style.save_metadata("png"))
    difference = compare_images(str(baseline), str(actual), tol=TOLERANCE)
    assert difference is None, difference


@pytest.mark.parametrize("name", [f for f in FIGURES if f != "batch_size_vs_time"])
def test_a_run_figure_matches_its_baseline(async_run, name, tmp_path):
    with style.style_context():
        fig = figure(async_run, name)
    assert fig is not None, name
    _check(fig, f"run_{name}", tmp_path)


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_a_comparison_figure_matches_its_baseline(name, tmp_path):
    _check(SYNTHETIC[name](), name, tmp_path)
