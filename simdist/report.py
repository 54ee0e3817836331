"""Reports from a sweep folder: figures, a ranking, per-point tables, Markdown and HTML; never a re-run.

``simdist report DIR`` reads ``DIR/sweep.json``, ``DIR/sweep.csv`` and the point result
directories that ``simdist sweep`` wrote, and writes ``reports/<name>/``:

=======================  =====================================================================
``index.md``             the report: seeds and baseline, ranking, which algorithms can be told
                         apart, every point, then each figure with a sentence
``index.html``           the same, self-contained apart from the PNGs beside it
``ranking.csv``          the ranking table
``points.csv``           every group of points that differ only in their seed: n, reached, and
                         mean, standard deviation and 95 % half-width of each metric, speedup
                         and efficiency against the baseline
``figures/``             PNG + SVG: ``speedup``, ``efficiency``, ``time_to_accuracy`` (error bars:
                         95 % intervals over seeds), ``staleness`` (box plots per worker count,
                         in versions and seconds: :mod:`simdist.staleness_figures`),
                         ``accuracy_vs_time`` (a panel per algorithm:
                         :mod:`simdist.accuracy_figures`), ``time_per_step`` (ledger parts stacked,
                         a panel per worker count: :mod:`simdist.ledger_figures`)
=======================  =====================================================================

Honest comparisons: every value is a mean over the seeds of its point (a ``seed`` sweep axis;
:mod:`simdist.aggregate`), never the best seed, with the half-width of its 95 % confidence
interval and the number of seeds; a seed that never reached the target is counted as such,
not averaged away. Speedup and efficiency are measured against one common baseline
(:mod:`simdist.speedup`: the single-worker sync point by default, ``baseline=`` to choose
another; a stated fallback where the sweep has none), and the report says, per worker count,
which algorithms cannot be told apart (:mod:`simdist.report_text`).

The ranking answers "which algorithm wins on this cluster": each algorithm at the worker count
where its mean time to the target accuracy is lowest among those where every seed reached it,
ranked ascending; algorithms that never reached it in every seed come last, ordered by mean
best accuracy. The accuracy panels use each algorithm's point with the most workers (its
first seed); staleness (seeds pooled) and the ledger bars (first seed) are drawn for every
worker count, a panel each.
"""

from __future__ import annotations

import json
import math
import os
import textwrap
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from . import plot_style as style
from .accuracy_figures import plot_accuracy_panels
from .aggregate import aggregate, column_roles
from .errors import InputError
from .outdir import staged_dir
from .plot_common import new_figure, save_figure
from .plots import ledger_panels, plot_efficiency, plot_speedup, plot_time_to_accuracy
from .report_text import html_page, markdown, told_apart
from .result_files import load_result_dir
from .speedup import DEFAULT_BASELINE, resolve_baselines, speedup_table
from .staleness_figures import plot_staleness_panels, staleness_points

__all__ = ["RANKING_COLUMNS", "ranking_table", "points_table", "write_report", "scaling_mode"]

RANKING_COLUMNS = ("rank", "algorithm", "time_to_accuracy_s", "time_to_accuracy_ci95_s", "workers", "seeds",
                   "reached", "best_test_accuracy", "best_test_accuracy_ci95", "mean_staleness",
                   "speedup_at_max_workers", "speedup_ci95", "max_workers")
_TITLE_CHARS = 90  # about what a 10-point title holds across a 7-inch figure


def _read_sweep(sweep_dir: Path) -> tuple[dict[str, Any], pd.DataFrame]:
    meta_path, csv_path = sweep_dir / "sweep.json", sweep_dir / "sweep.csv"
    if not meta_path.is_file() or not csv_path.is_file():
        raise InputError("not a sweep folder (sweep.json and sweep.csv written by simdist sweep are missing)",
                         source=str(sweep_dir))
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        table = pd.read_csv(csv_path)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the sweep: {exc}", source=str(sweep_dir)) from None
    if table.empty:
        raise InputError("sweep.csv has no completed points yet; run simdist sweep first", source=str(sweep_dir))
    return meta, table


def scaling_mode(table: pd.DataFrame) -> str:
    """``strong`` when every algorithm's global batch (batch x workers) is constant over its points, else ``weak``."""
    batch = pd.to_numeric(table.get("workload.batch_size"), errors="coerce") if "workload.batch_size" in table else None
    if batch is None or batch.isna().all():
        return "weak"
    global_batch = batch * pd.to_numeric(table["workers"], errors="coerce")
    return "strong" if all(g.nunique() == 1 for _, g in global_batch.groupby(table["algorithm"])) else "weak"


def points_table(table: pd.DataFrame, baseline: str | None = None, axes: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per group of points differing only in their seed: :func:`simdist.aggregate.aggregate`'s
    columns, a ``label`` (series, with its condition where there are several) and the speedup and
    efficiency columns of :func:`simdist.speedup.speedup_table`."""
    summary = aggregate(table, axes)
    speed = speedup_table(table, baseline, axes)
    keys = ["series", "workers", "condition"]
    merged = summary.merge(speed[[*keys, "baseline", "paired", "speedup", "speedup_ci95", "efficiency",
                                  "efficiency_ci95"]], on=keys, how="left")
    label = merged["series"].where(merged["condition"] == "", merged["series"] + " [" + merged["condition"] + "]")
    return merged.assign(label=label)


def _best_group(part: pd.DataFrame) -> tuple[pd.Series, bool]:
    """The group with the lowest mean time to accuracy among those where every seed reached the
    target; else the one where most seeds reached it, then with the best mean accuracy."""
    complete = part[(part["reached"] == part["n"]) & part["time_to_accuracy_s"].notna()]
    if len(complete):
        return complete.loc[complete["time_to_accuracy_s"].idxmin()], True
    order = part.assign(_share=part["reached"] / part["n"], _acc=part["best_test_accuracy"].fillna(-1.0))
    return part.loc[order.sort_values(["_share", "_acc"], ascending=False, kind="stable").index[0]], False


def ranking_table(table: pd.DataFrame, baseline: str | None = None, axes: Sequence[str] | None = None) -> pd.DataFrame:
    """Algorithms ranked by their lowest mean time to the target accuracy (see module doc)."""
    points = points_table(table, baseline, axes)
    rows = []
    for label, part in points.groupby("label", sort=False):
        best, reached = _best_group(part)
        top = part.loc[part["workers"].idxmax()]
        rows.append({"algorithm": label, "time_to_accuracy_s": best["time_to_accuracy_s"] if reached else math.nan,
                     "time_to_accuracy_ci95_s": best["time_to_accuracy_s_ci95"] if reached else math.nan,
                     "workers": int(best["workers"]), "seeds": int(best["n"]), "reached": int(best["reached"]),
                     "best_test_accuracy": best["best_test_accuracy"],
                     "best_test_accuracy_ci95": best["best_test_accuracy_ci95"],
                     "mean_staleness": best["mean_staleness"], "speedup_at_max_workers": top["speedup"],
                     "speedup_ci95": top["speedup_ci95"], "max_workers": int(top["workers"])})
    ranked = pd.DataFrame(rows, columns=[c for c in RANKING_COLUMNS if c != "rank"])
    ranked["_reached"] = ranked["time_to_accuracy_s"].notna()
    ranked = ranked.sort_values(["_reached", "time_to_accuracy_s", "best_test_accuracy"],
                                ascending=[False, True, False], kind="stable").drop(columns="_reached")
    ranked.insert(0, "rank", range(1, len(ranked) + 1))
    return ranked.reset_index(drop=True)[list(RANKING_COLUMNS)]


def _largest_points(table: pd.DataFrame, sweep_dir: Path) -> list:
    """Each algorithm's point with the most workers (the first such row: its first seed), loaded."""
    chosen = []
    data = table.assign(_w=pd.to_numeric(table["workers"], errors="coerce"))
    for _, part in data.groupby("algorithm", sort=False):
        row = part.loc[part["_w"].idxmax()]
        chosen.append(load_result_dir(sweep_dir / "points" / str(row["key"])))
    return chosen


def _worker_ranks(loaded) -> list[int]:
    """The ranks of a loaded run that trained (workers.csv), not its servers."""
    return [int(w) for w in loaded.workers["worker"]] if "worker" in loaded.workers else []


def _scaling_drawers(table: pd.DataFrame, baseline: str | None, axes: Sequence[str], against: str) -> list:
    mode = scaling_mode(table)
    drawers = []
    if pd.to_numeric(table["workers"], errors="coerce").nunique() > 1:
        drawers += [("speedup", lambda ax: plot_speedup(table, ax, scaling=mode, baseline=baseline, axes=axes),
                     f"{mode.capitalize()} scaling: speedup against workers, each algorithm's throughput over "
                     f"{against}'s (one common baseline), mean and 95 % interval over seeds, the ideal dashed."),
                    ("efficiency", lambda ax: plot_efficiency(table, ax, scaling=mode, baseline=baseline, axes=axes),
                     f"Parallel efficiency against {against}: speedup / (workers / baseline workers); 1.0 is ideal.")]
    if pd.to_numeric(table.get("target_accuracy"), errors="coerce").notna().any():
        drawers.append(("time_to_accuracy",
                        lambda ax: plot_time_to_accuracy(table, ax, baseline=baseline, axes=axes),
                        "Virtual time until the test accuracy first reaches the target: mean and 95 % interval over "
                        "the seeds that reached it (k/n beside a point reached in some seeds only), points never "
                        f"reached on the dotted line at the top, {against}'s time dash-dotted."))
    return drawers


def _figures(meta: dict[str, Any], table: pd.DataFrame, sweep_dir: Path, out: Path, baseline: str | None,
             against: str) -> dict[str, str]:
    """Draw the figures; returns {figure name: caption} of those drawn."""
    figures = out / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    drawers = _scaling_drawers(table, baseline, meta.get("axes") or None, against)
    drawn: dict[str, str] = {}
    scenario = meta.get("name") or sweep_dir.name
    for name, draw, caption in drawers:
        with style.style_context():
            fig, ax = new_figure()
            draw(ax)
            ax.set_title(_fit_title(f"{scenario}: {ax.get_title()}"))  # every figure names its scenario
            save_figure(style.finish_axes(fig), figures / name)
        drawn[name] = caption
    runs = [load_result_dir(sweep_dir / "points" / str(key)) for key in table["key"]]
    with style.style_context():
        drawn.update(_accuracy_figure(_largest_points(table, sweep_dir), scenario, figures))
        bars = ledger_panels(_ledgers_by_workers(runs), f"{scenario}: where a step's time goes")
        if bars is not None:
            save_figure(style.finish_axes(bars), figures / "time_per_step")
            drawn["time_per_step"] = ("Where the time goes: a worker's mean step stacked by ledger part (ledger.csv), "
                                      "one panel per worker count, a bar per algorithm (its first seed).")
        panels = plot_staleness_panels(staleness_points(runs),
                                       f"{scenario}: staleness by worker count")
        if panels is not None:
            save_figure(style.finish_axes(panels), figures / "staleness")
            drawn["staleness"] = ("Staleness of every applied update, one panel per worker count, seeds pooled: box = "
                                  "quartiles and median, whiskers = 5th-95th percentile, diamond = mean; top in model "
                                  "versions, bottom in seconds (versions x the run's virtual time per step). "
                                  "Algorithms with identical staleness are named together.")
    return drawn


def _fit_title(title: str) -> str:
    """A title longer than :data:`_TITLE_CHARS` broken before its last parenthesis (else at a space), so
    that it stays inside a 7-inch figure."""
    if len(title) <= _TITLE_CHARS:
        return title
    cut = title.rfind(" (")
    return title[:cut] + "\n" + title[cut + 1:] if cut > 0 else textwrap.fill(title, _TITLE_CHARS)


def _accuracy_figure(loaded: list, scenario: str, figures: Path) -> dict[str, str]:
    """Each algorithm's largest point (first seed), a panel each; {name: caption} if drawn."""
    sizes = {r.n_workers for r in loaded}
    same = len(sizes) == 1 and None not in sizes
    held = (f"{_workers_text(next(iter(sizes)))} each" if same else "each algorithm at its most workers")
    labels = None if same else [f"{r.algorithm} ({_workers_text(r.n_workers)})" for r in loaded]
    fig = plot_accuracy_panels(loaded, f"{scenario}: test accuracy vs virtual time, {held} (first seed)", labels)
    if fig is None:
        return {}
    save_figure(fig, figures / "accuracy_vs_time")
    return {"accuracy_vs_time": f"Mean test accuracy of the evaluated workers against virtual time, a panel per "
                                f"algorithm ({held}, its first seed) with the others grey behind it, the target "
                                f"dashed; algorithms with identical curves share a panel."}


def _workers_text(n: int | None) -> str:
    return "? workers" if n is None else f"{n} worker{'s' if n != 1 else ''}"


def _ledgers_by_workers(runs: list) -> dict[int, dict[str, pd.DataFrame]]:
    """workers -> {algorithm: its workers' ledger rows}, each algorithm's first run (first seed) at that size."""
    groups: dict[int, dict[str, pd.DataFrame]] = {}
    for run in runs:
        if run.ledger is None or run.ledger.empty or run.n_workers is None:
            continue
        groups.setdefault(run.n_workers, {}).setdefault(
            run.algorithm, run.ledger[run.ledger["rank"].isin(_worker_ranks(run))])
    return groups


def _baseline_sentences(table: pd.DataFrame, baseline: str | None, axes: Sequence[str] | None) -> list[str]:
    chosen = resolve_baselines(table, baseline, axes)
    out = []
    for condition, base in chosen.items():
        text = f"`{base.label}`" + (f" under {condition}" if condition else "")
        if base.fallback:
            text += f" ({base.fallback}; `{DEFAULT_BASELINE}` is the default)"
        out.append(text)
    return out


def write_report(sweep_dir: str | os.PathLike[str], reports_dir: str | os.PathLike[str] = "reports", *,
                 name: str | None = None, baseline: str | None = None) -> Path:
    """Write ``reports_dir/<name>/index.md`` (and ``index.html``, ``ranking.csv``, ``points.csv``,
    ``figures/``); returns index.md.

    ``baseline``: ``ALGORITHM@WORKERS`` or ``ALGORITHM`` (at its fewest workers) that speedup and
    efficiency are measured against; default the single-worker sync point, or a fallback the
    report names (:mod:`simdist.speedup`). A baseline that is not a point of the sweep is an
    :class:`~simdist.errors.InputError`. The folder is written whole and moved into place
    (:mod:`simdist.outdir`); it replaces an earlier report of that name, never a folder simdist
    did not write.
    """
    sweep = Path(sweep_dir)
    meta, table = _read_sweep(sweep)
    name = name or str(meta.get("name") or sweep.name)
    if not name or "/" in name or name.startswith("."):
        raise InputError(f"report name {name!r} must be a plain folder name", source="--name")
    axes = meta.get("axes") or None
    baselines = _baseline_sentences(table, baseline, axes)  # a bad baseline fails before anything is written
    against = ", ".join(dict.fromkeys(b.label for b in resolve_baselines(table, baseline, axes).values()))
    out = Path(reports_dir) / name
    with staged_dir(out, kind="report", regenerate=True) as tmp:  # replaces only an earlier report
        ranking = ranking_table(table, baseline, axes)
        ranking.to_csv(tmp / "ranking.csv", index=False, float_format="%.6g")
        points = points_table(table, baseline, axes)
        points.drop(columns="label").to_csv(tmp / "points.csv", index=False, float_format="%.6g")
        figures = _figures(meta, table, sweep, tmp, baseline, against)
        apart = told_apart(table, column_roles(table, axes), meta.get("target_accuracy"))
        text = markdown(meta, ranking, points, column_roles(table, axes), apart, baselines, figures, sweep, len(table))
        (tmp / "index.md").write_text(text, encoding="utf-8")
        (tmp / "index.html").write_text(html_page(text, name), encoding="utf-8")
    return out / "index.md"
