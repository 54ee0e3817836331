"""Reports from a sweep folder: figures, a ranking table, Markdown and HTML; never a re-run.

``simdist report DIR`` reads ``DIR/sweep.json``, ``DIR/sweep.csv`` and the point result
directories that ``simdist sweep`` wrote, and writes ``reports/<name>/``:

=======================  =====================================================================
``index.md``             the report: ranking table, then each figure with a sentence
``index.html``           the same, self-contained apart from the PNGs beside it
``ranking.csv``          the ranking table
``figures/``             PNG + SVG: ``speedup``, ``efficiency``, ``time_to_accuracy``,
                         ``staleness`` (overlaid histograms), ``accuracy_vs_time`` (overlaid)
=======================  =====================================================================

The ranking answers "which algorithm wins on this cluster": each algorithm's fastest time to
the target accuracy over all its points (with the worker count that achieved it), ranked
ascending; algorithms that never reached the target come last, ordered by best accuracy.
Overlays of staleness and accuracy use each algorithm's point with the most workers.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .errors import InputError
from .outdir import staged_dir
from .plot_common import new_figure, save_figure
from .plots import (ledger_bars, overlay_accuracy, overlay_staleness, plot_efficiency, plot_speedup,
                    plot_time_to_accuracy)
from .result_files import load_result_dir

__all__ = ["ranking_table", "write_report", "scaling_mode"]

RANKING_COLUMNS = ("rank", "algorithm", "time_to_accuracy_s", "workers", "best_test_accuracy",
                   "mean_staleness", "speedup_at_max_workers", "max_workers")


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


def ranking_table(table: pd.DataFrame) -> pd.DataFrame:
    """Algorithms ranked by their fastest time to the target accuracy (see module doc)."""
    from .plots import scaling_table

    data = table.copy()
    for column in ("time_to_accuracy_s", "workers", "best_test_accuracy", "mean_staleness"):
        data[column] = pd.to_numeric(data.get(column), errors="coerce")
    scaled = scaling_table(data)
    rows = []
    for name, part in data.groupby("algorithm", sort=False):
        reached = part.dropna(subset=["time_to_accuracy_s"])
        best = reached.loc[reached["time_to_accuracy_s"].idxmin()] if len(reached) else part.loc[
            part["best_test_accuracy"].fillna(-1).idxmax()]
        mine = scaled[scaled["algorithm"] == name]
        top = mine.loc[mine["workers"].idxmax()] if len(mine) else None
        rows.append({"algorithm": name,
                     "time_to_accuracy_s": best["time_to_accuracy_s"] if len(reached) else np.nan,
                     "workers": int(best["workers"]),
                     "best_test_accuracy": part["best_test_accuracy"].max(),
                     "mean_staleness": best["mean_staleness"],
                     "speedup_at_max_workers": None if top is None else float(top["speedup"]),
                     "max_workers": None if top is None else int(top["workers"])})
    ranked = pd.DataFrame(rows)
    ranked["_reached"] = ranked["time_to_accuracy_s"].notna()
    ranked = ranked.sort_values(["_reached", "time_to_accuracy_s", "best_test_accuracy"],
                                ascending=[False, True, False], kind="stable").drop(columns="_reached")
    ranked.insert(0, "rank", range(1, len(ranked) + 1))
    return ranked.reset_index(drop=True)[list(RANKING_COLUMNS)]


def _largest_points(meta: dict[str, Any], table: pd.DataFrame, sweep_dir: Path) -> list:
    """Each algorithm's point with the most workers, loaded (for overlays)."""
    chosen = []
    data = table.assign(_w=pd.to_numeric(table["workers"], errors="coerce"))
    for _, part in data.groupby("algorithm", sort=False):
        row = part.loc[part["_w"].idxmax()]
        chosen.append(load_result_dir(sweep_dir / "points" / str(row["key"])))
    return chosen


def _worker_ranks(loaded) -> list[int]:
    """The ranks of a loaded run that trained (workers.csv), not its servers."""
    return [int(w) for w in loaded.workers["worker"]] if "worker" in loaded.workers else []


def _figures(meta: dict[str, Any], table: pd.DataFrame, sweep_dir: Path, out: Path) -> dict[str, str]:
    """Draw the figures; returns {figure name: caption} of those drawn."""
    figures = out / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    mode = scaling_mode(table)
    drawn: dict[str, str] = {}
    multi_workers = pd.to_numeric(table["workers"], errors="coerce").nunique() > 1
    loaded = _largest_points(meta, table, sweep_dir)
    most = max((r.n_workers or 0) for r in loaded) if loaded else 0
    drawers = []
    if multi_workers:
        drawers += [("speedup", lambda ax: plot_speedup(table, ax, scaling=mode),
                     f"{mode.capitalize()} scaling: speedup against workers (throughput relative to the fewest "
                     "workers), with the ideal linear speedup dashed."),
                    ("efficiency", lambda ax: plot_efficiency(table, ax, scaling=mode),
                     "Parallel efficiency (speedup / workers); 1.0 is ideal.")]
    if pd.to_numeric(table.get("target_accuracy"), errors="coerce").notna().any():
        drawers.append(("time_to_accuracy", lambda ax: plot_time_to_accuracy(table, ax),
                        "Virtual time until the test accuracy first reaches the target, per algorithm and "
                        "worker count (hatched ×: never reached)."))
    if any(len(r.steps) for r in loaded):
        drawers.append(("staleness", lambda ax: overlay_staleness(loaded, ax),
                        f"Staleness of applied updates, each algorithm at its largest worker count (up to {most})."))
    if any(len(r.evals) for r in loaded):
        drawers.append(("accuracy_vs_time", lambda ax: overlay_accuracy(loaded, ax, x="time_s"),
                        f"Test accuracy against virtual time, each algorithm at its largest worker count "
                        f"(up to {most})."))
    ledgers = {f"{r.algorithm} ({r.n_workers})": r.ledger[r.ledger["rank"].isin(_worker_ranks(r))]
               for r in loaded if r.ledger is not None and not r.ledger.empty}
    if ledgers:
        drawers.append(("time_per_step", lambda ax: ledger_bars(ledgers, ax),
                        "Where the time goes: a worker's mean step, stacked by ledger part (ledger.csv), each "
                        f"algorithm at its largest worker count (up to {most})."))
    for name, draw, caption in drawers:
        fig, ax = new_figure()
        draw(ax)
        save_figure(fig, figures / name)
        drawn[name] = caption
    return drawn


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "not reached" if value is not None else "–"
    if isinstance(value, (float, np.floating)):
        return f"{value:.4g}"
    return str(value)


def _markdown(meta: dict[str, Any], ranking: pd.DataFrame, table: pd.DataFrame, figures: dict[str, str],
              sweep_dir: Path) -> str:
    target = meta.get("target_accuracy")
    lines = [f"# {meta.get('name', 'sweep')}: which algorithm wins on this cluster", ""]
    if meta.get("description"):
        lines += [str(meta["description"]), ""]
    lines += [f"Sweep of `{meta.get('scenario', '?')}` over {', '.join(f'`{a}`' for a in meta.get('axes', []))}: "
              f"{len(table)} of {len(meta.get('points', []))} points complete. Generated by `simdist report` from "
              f"`{sweep_dir}` (nothing re-simulated).", ""]
    if len(ranking):
        winner = ranking.iloc[0]
        if np.isfinite(winner["time_to_accuracy_s"]):
            lines += [f"**Winner: {winner['algorithm']}** reaches test accuracy {target} after "
                      f"{winner['time_to_accuracy_s']:.4g} s of virtual time with {winner['workers']} workers.", ""]
        else:
            lines += [f"No algorithm reached the target accuracy {target}.", ""]
    lines += ["## Ranking by time to accuracy", "",
              "| " + " | ".join(RANKING_COLUMNS) + " |", "|" + "---|" * len(RANKING_COLUMNS)]
    for _, row in ranking.iterrows():
        lines.append("| " + " | ".join(_fmt(row[c]) for c in RANKING_COLUMNS) + " |")
    lines.append("")
    for name, caption in figures.items():
        lines += [f"## {name.replace('_', ' ').capitalize()}", "", f"![{name}](figures/{name}.png)", "", caption, ""]
    return "\n".join(lines)


def _html(markdown: str, title: str) -> str:
    """A small Markdown-to-HTML rendering of what :func:`_markdown` writes (headings, tables, images, text)."""
    body: list[str] = []
    rows: list[list[str]] = []

    def flush_table():
        if rows:
            head, *rest = rows
            body.append("<table><thead><tr>" + "".join(f"<th>{c}</th>" for c in head) + "</tr></thead><tbody>"
                        + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rest)
                        + "</tbody></table>")
            rows.clear()

    for line in markdown.splitlines():
        if line.startswith("|"):
            cells = [html.escape(c.strip()) for c in line.strip("|").split("|")]
            if not all(set(c) <= {"-"} for c in cells):
                rows.append(cells)
            continue
        flush_table()
        if line.startswith("## "):
            body.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line.startswith("# "):
            body.append(f"<h1>{html.escape(line[2:])}</h1>")
        elif line.startswith("!["):
            alt, src = line[2:].split("](", 1)
            body.append(f'<img src="{html.escape(src.rstrip(")"))}" alt="{html.escape(alt)}">')
        elif line.strip():
            text = html.escape(line)
            while text.count("**") >= 2:
                text = text.replace("**", "<strong>", 1).replace("**", "</strong>", 1)
            while text.count("`") >= 2:
                text = text.replace("`", "<code>", 1).replace("`", "</code>", 1)
            body.append(f"<p>{text}</p>")
    flush_table()
    style = ("body{font-family:sans-serif;max-width:60em;margin:2em auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #bbb;padding:.3em .6em;text-align:right}img{max-width:100%}")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write_report(sweep_dir: str | os.PathLike[str], reports_dir: str | os.PathLike[str] = "reports", *,
                 name: str | None = None) -> Path:
    """Write ``reports_dir/<name>/index.md`` (and ``index.html``, ``ranking.csv``, ``figures/``); returns index.md.

    The folder is written whole and moved into place (:mod:`simdist.outdir`); it replaces an
    earlier report of that name, never a folder simdist did not write.
    """
    sweep = Path(sweep_dir)
    meta, table = _read_sweep(sweep)
    name = name or str(meta.get("name") or sweep.name)
    if not name or "/" in name or name.startswith("."):
        raise InputError(f"report name {name!r} must be a plain folder name", source="--name")
    out = Path(reports_dir) / name
    with staged_dir(out, kind="report", regenerate=True) as tmp:  # replaces only an earlier report
        ranking = ranking_table(table)
        ranking.to_csv(tmp / "ranking.csv", index=False, float_format="%.6g")
        figures = _figures(meta, table, sweep, tmp)
        markdown = _markdown(meta, ranking, table, figures, sweep)
        (tmp / "index.md").write_text(markdown, encoding="utf-8")
        (tmp / "index.html").write_text(_html(markdown, name), encoding="utf-8")
    return out / "index.md"
