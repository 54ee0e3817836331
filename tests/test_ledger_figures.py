"""Ledger bars of many runs: a panel per worker count, one legend, each part in its fixed colour."""

from __future__ import annotations

import pandas as pd
import pytest


def test_ledger_panels_draw_a_panel_per_worker_count_with_one_legend_and_fixed_part_colours():
    from simdist.ledger import PARTS
    from simdist.ledger_figures import ledger_panels
    from simdist.plot_style import PART_STYLES

    def ledger(forward, wait):
        rows = pd.DataFrame({part: [0.0, 0.0] for part in PARTS})
        rows["forward_backward"], rows["wait"] = forward, wait
        return rows

    fig = ledger_panels({4: {"sync": ledger(0.1, 0.0), "asgd": ledger(0.1, 0.05)}, 2: {"sync": ledger(0.1, 0.02)}},
                        "demo: where a step's time goes")
    assert [ax.get_title() for ax in fig.axes] == ["2 workers", "4 workers"]  # sorted by workers
    assert [t.get_text() for t in fig.axes[1].get_xticklabels()] == ["sync", "asgd"]
    bars = {c.get_label(): c for c in fig.axes[1].containers}
    assert set(bars) == {"forward backward", "wait"}  # parts with no time anywhere are left out
    assert [p.get_height() for p in bars["wait"]] == pytest.approx([0.0, 0.05])
    assert bars["wait"].patches[0].get_facecolor()[:3] == pytest.approx(
        tuple(int(PART_STYLES["wait"]["color"][i:i + 2], 16) / 255 for i in (1, 3, 5)))
    assert len(fig.legends) == 1
    assert ledger_panels({}, "nothing") is None
