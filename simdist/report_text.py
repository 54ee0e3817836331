"""The words and tables of a sweep report: Markdown written from the aggregated tables, and its HTML.

:func:`markdown` writes what :mod:`simdist.report` computed: the sweep and its seeds, the
common baseline (and why, when it is a fallback), the winner, the ranking and the per-point
table with every mean as ``mean ± half-width of its 95 % interval`` and ``n`` seeds, then
:func:`told_apart`'s sentences, then the figures with their captions.

:func:`told_apart` says, at each worker count (and sweep condition), which algorithm reaches
the target first and which others cannot be told apart from it (their paired per-seed
difference's interval contains 0, or, unpaired, their intervals overlap:
:func:`simdist.aggregate.compare_samples`), which are told apart (slower), which have the same
value in every seed (``asgd = dbs``) and which never reached the target; then the same for
speedup against the baseline. With one seed per point no interval exists and the report says
that nothing can be told apart.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from . import plot_style as style
from .aggregate import Comparison, Roles, compare_samples, estimate, groups, seed_index

__all__ = ["markdown", "told_apart", "html_page", "plus_minus"]



def plus_minus(mean: float, half_width: float, show: Callable[[float], str] = lambda v: f"{v:.4g}") -> str:
    """``"3.1 ± 0.2"``; ``"3.1"`` when the interval is undefined; ``"–"`` without a value."""
    if mean is None or not np.isfinite(mean):
        return "–"
    return show(mean) if half_width is None or not np.isfinite(half_width) else f"{show(mean)} ± {show(half_width)}"


def _duration(seconds: float) -> str:
    return style.format_duration(seconds)


def _samples(table: pd.DataFrame, roles: Roles, metric: str) -> dict[tuple[str, int], tuple[dict, pd.Series]]:
    """Per (condition, workers): {series: (group key, finite per-seed values of ``metric``)}."""
    out: dict[tuple[str, int], dict] = {}
    for key, rows in groups(table, roles):
        values = pd.Series(pd.to_numeric(rows[metric], errors="coerce").to_numpy(dtype=float),
                           index=seed_index(rows, roles))
        out.setdefault((str(key["condition"]), int(key["workers"])), {})[str(key["series"])] = (len(rows), values)
    return out


@dataclass(frozen=True)
class _Measure:
    """A metric the report tells algorithms apart on, and how its sentences read."""

    column: str
    lower_is_better: bool
    best: str  # "reaches 0.9 first"
    worse: str  # "Slower"
    show: Callable[[float], str]


def _sentence(where: str, series: dict[str, tuple[int, pd.Series]], measure: _Measure) -> str | None:
    """One line: the best series at ``where``, and how every other one compares with it."""
    complete = {s: v.dropna() for s, (n, v) in series.items() if v.notna().sum() == n and n > 0}
    if len(series) < 2 or not complete:
        return None
    sign = 1.0 if measure.lower_is_better else -1.0
    best = min(complete, key=lambda s: (sign * complete[s].mean(), s))
    verdicts: dict[str, list[tuple[str, Comparison]]] = {"identical": [], "overlap": [], "higher": [], "unknown": []}
    for name, values in complete.items():
        if name != best:
            found = compare_samples(sign * values, sign * complete[best])
            verdicts["higher" if found.verdict == "lower" else found.verdict].append((name, found))  # float ties
    head = " = ".join([best, *(name for name, _ in verdicts["identical"])])
    text = f"{where}: **{head}** {measure.best} ({_own(complete[best], measure)})."
    words = {"overlap": f"Cannot be told apart from {best}", "higher": f"{measure.worse} than {best}, told apart",
             "unknown": f"One seed, so not told apart from {best}"}
    for verdict, found in verdicts.items():
        if found and verdict != "identical":
            text += f" {words[verdict]}: {_joined(found, complete, measure, sign)}."
    partial = [f"{s} ({int(v.notna().sum())} of {n} seeds)" for s, (n, v) in series.items() if s not in complete]
    if partial:
        text += f" Not reached in every seed: {', '.join(partial)}."
    return text


def _own(values: pd.Series, measure: _Measure) -> str:
    est = estimate(values.to_numpy())
    return plus_minus(est.mean, est.half_width, measure.show)


def _difference(found: Comparison, measure: _Measure, sign: float) -> str:
    """``"+7.5 ns ± 7.4 ns (paired)"``: the difference from the best, in the metric's own sign."""
    diff = found.difference
    mean = sign * diff.mean
    text = ("+" if mean >= 0 else "-") + plus_minus(abs(mean), diff.half_width, measure.show)
    return text + (" paired" if found.paired and np.isfinite(diff.half_width) else "")


def _joined(found: list[tuple[str, Comparison]], complete: dict[str, pd.Series], measure: _Measure,
            sign: float) -> str:
    """Each name with its mean and its difference from the best; names whose values are identical
    in every seed are joined with ``=``."""
    parts: list[tuple[str, str, Comparison]] = []
    for name, comparison in found:
        twin = next((i for i, (_, first, _) in enumerate(parts)
                     if compare_samples(complete[name], complete[first]).verdict == "identical"), None)
        if twin is None:
            parts.append((name, name, comparison))
        else:
            label, first, kept = parts[twin]
            parts[twin] = (f"{label} = {name}", first, kept)
    return ", ".join(f"{label} ({_own(complete[first], measure)}; {_difference(c, measure, sign)})"
                     for label, first, c in parts)


def _rate(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def told_apart(table: pd.DataFrame, roles: Roles, target: Any) -> list[str]:
    """The "which can be told apart" lines of the report (see module doc)."""
    measures = [_Measure("throughput_samples_per_s", False, "has the highest throughput", "Lower",
                         lambda v: f"{_rate(v)} samples/s")]
    if "time_to_accuracy_s" in table and target is not None:
        measures.insert(0, _Measure("time_to_accuracy_s", True, f"reaches {target} first", "Slower", _duration))
    lines: list[str] = []
    for measure in measures:
        for (condition, workers), series in _samples(table, roles, measure.column).items():
            where = f"{workers} worker{'s' if workers != 1 else ''}" + (f" [{condition}]" if condition else "")
            line = _sentence(where, series, measure)
            lines += [f"* {line}"] if line else []
    return lines


def _seeds_sentence(summary: pd.DataFrame, roles: Roles) -> str:
    counts = sorted({int(n) for n in summary["n"]})
    if counts == [1]:
        return ("Each point ran under one seed, so no confidence interval exists and no two algorithms can be told "
                "apart: sweep a seed axis (`--set 'sweep.grid.seed=[0,1,2]'`) to compare them.")
    axes = ", ".join(f"`{c}`" for c in roles.seeds)
    many = str(counts[0]) if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
    return (f"Every value is a mean over {many} seeds (axis {axes}) ± the half-width of its 95 % confidence "
            "interval (Student t); never-reached runs are counted, not averaged.")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(r) + " |" for r in rows), ""]


def _ranking_rows(ranking: pd.DataFrame) -> list[list[str]]:
    rows = []
    for _, r in ranking.iterrows():
        seeds = int(r["seeds"])
        reached = int(r["reached"])
        tta = plus_minus(r["time_to_accuracy_s"], r["time_to_accuracy_ci95_s"], _duration) if reached == seeds \
            else f"not reached ({reached} of {seeds} seeds)"
        rows.append([str(r["rank"]), str(r["algorithm"]), tta, str(r["workers"]), str(seeds),
                     plus_minus(r["best_test_accuracy"], r["best_test_accuracy_ci95"]),
                     plus_minus(r["mean_staleness"], math.nan),
                     plus_minus(r["speedup_at_max_workers"], r["speedup_ci95"]), _int(r["max_workers"])])
    return rows


def _int(value: Any) -> str:
    return "–" if value is None or (isinstance(value, float) and not np.isfinite(value)) else str(int(value))


def _point_rows(summary: pd.DataFrame) -> list[list[str]]:
    rows = []
    for _, r in summary.iterrows():
        reached = f"{int(r['reached'])}/{int(r['n'])}"
        rows.append([r["label"], str(int(r["workers"])), str(int(r["n"])), reached,
                     plus_minus(r["time_to_accuracy_s"], r["time_to_accuracy_s_ci95"], _duration),
                     plus_minus(r["throughput_samples_per_s"], r["throughput_samples_per_s_ci95"], _rate),
                     plus_minus(r["speedup"], r["speedup_ci95"]), plus_minus(r["efficiency"], r["efficiency_ci95"]),
                     plus_minus(r["final_test_accuracy"], r["final_test_accuracy_ci95"])])
    return rows


def markdown(meta: dict[str, Any], ranking: pd.DataFrame, summary: pd.DataFrame, roles: Roles,
             apart: list[str], baselines: list[str], figures: dict[str, str], sweep_dir: Path,
             n_points: int) -> str:
    """The report's Markdown (see module doc)."""
    target = meta.get("target_accuracy")
    lines = [f"# {meta.get('name', 'sweep')}: which algorithm wins on this cluster", ""]
    if meta.get("description"):
        lines += [str(meta["description"]), ""]
    lines += [f"Sweep of `{meta.get('scenario', '?')}` over {', '.join(f'`{a}`' for a in meta.get('axes', []))}: "
              f"{n_points} of {len(meta.get('points', []))} points complete. Generated by `simdist report` from "
              f"`{sweep_dir}` (nothing re-simulated).", "", _seeds_sentence(summary, roles), "",
              "Speedup and efficiency are measured against one common baseline: " + "; ".join(baselines) + ".", ""]
    lines += _winner(ranking, target)
    lines += ["## Ranking by time to accuracy", "", "Each algorithm at the worker count where its mean time to "
              f"accuracy {target} is lowest, among those where every seed reached it.", ""]
    lines += _table(["rank", "algorithm", "time to accuracy", "workers", "seeds", "best test accuracy",
                     "mean staleness", "speedup at max workers", "max workers"], _ranking_rows(ranking))
    lines += ["## Can they be told apart?", "", "At each worker count, the best algorithm and how each other one "
              "compares with it at 95 % confidence (paired by seed where both ran the same seeds).", "",
              *(apart or ["Fewer than two algorithms share a worker count: nothing to compare."]), ""]
    lines += ["## Every point", ""]
    lines += _table(["algorithm", "workers", "seeds", "reached", "time to accuracy", "throughput (samples/s)",
                     "speedup", "efficiency", "final test accuracy"], _point_rows(summary))
    for name, caption in figures.items():
        lines += [f"## {name.replace('_', ' ').capitalize()}", "", f"![{name}](figures/{name}.png)", "", caption, ""]
    return "\n".join(lines)


def _winner(ranking: pd.DataFrame, target: Any) -> list[str]:
    if not len(ranking):
        return []
    top = ranking.iloc[0]
    if int(top["reached"]) != int(top["seeds"]) or not np.isfinite(top["time_to_accuracy_s"]):
        return [f"No algorithm reached the target accuracy {target} in every seed.", ""]
    when = plus_minus(top["time_to_accuracy_s"], top["time_to_accuracy_ci95_s"], _duration)
    return [f"**Winner: {top['algorithm']}** reaches test accuracy {target} after {when} of virtual time with "
            f"{top['workers']} workers (lowest mean; see below whether the next can be told apart).", ""]


def html_page(text: str, title: str) -> str:
    """A small Markdown-to-HTML rendering of what :func:`markdown` writes (headings, tables, lists, images, text)."""
    body: list[str] = []
    rows: list[list[str]] = []

    def flush_table():
        if rows:
            head, *rest = rows
            body.append("<table><thead><tr>" + "".join(f"<th>{c}</th>" for c in head) + "</tr></thead><tbody>"
                        + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rest)
                        + "</tbody></table>")
            rows.clear()

    for line in text.splitlines():
        if line.startswith("|"):
            cells = [_inline(c.strip()) for c in line.strip("|").split("|")]
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
        elif line.startswith("* "):
            body.append(f"<li>{_inline(line[2:])}</li>")
        elif line.strip():
            body.append(f"<p>{_inline(line)}</p>")
    flush_table()
    style_sheet = ("body{font-family:sans-serif;max-width:60em;margin:2em auto}table{border-collapse:collapse}"
                   "td,th{border:1px solid #bbb;padding:.3em .6em;text-align:right}img{max-width:100%}")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{style_sheet}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def _inline(line: str) -> str:
    text = html.escape(line)
    while text.count("**") >= 2:
        text = text.replace("**", "<strong>", 1).replace("**", "</strong>", 1)
    while text.count("`") >= 2:
        text = text.replace("`", "<code>", 1).replace("`", "</code>", 1)
    return text
