"""Real run against simulation, iteration by iteration: the tables and figures of ``simdist validate``.

* an *iteration* of a worker is one turn of its loop: from the start of one of its
  forward/backwards to the start of the next (the last one, cut by the stop, is left out);
  its compute / comm / wait are the worker's blocking spans in ``trace.json`` inside that
  window, its step, staleness and loss those of the worker's row in ``steps.csv`` for that
  gradient (the k-th row with a batch: nnt's neighbour-gradient rows have batch 0). Rows
  alone would not do: a parameter server writes them when it applies a gradient, and
  n-softsync applies two gradients of a fast worker in one update, at one instant;
* :func:`compare` pairs two result directories' iterations (``validation.csv``),
  :func:`summarize` gives the error figures, :func:`repeatability` the run-to-run floor of two
  real runs, :func:`plot_timelines` both runs' spans on one axis.

These read result directories only: they run nothing and work on any two runs of a scenario.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..outdir import write_file_atomically
from ..tracefile import span_events

__all__ = ["iteration_table", "compare", "summarize", "repeatability", "plot_timelines"]

_COLUMNS = ("iteration_s", "compute_s", "comm_s", "wait_s")


def _spans(result_dir: Path) -> pd.DataFrame:
    """Blocking spans of ``trace.json``: rank, kind, name, start_s, end_s."""
    rows = [(e["tid"], e.get("cat", ""), e.get("name", ""), e["ts"] * 1e-6, (e["ts"] + e.get("dur", 0.0)) * 1e-6)
            for e in span_events(result_dir) if (e.get("args") or {}).get("blocking", True) is not False]
    return pd.DataFrame(rows, columns=["rank", "kind", "name", "start_s", "end_s"])


def _overlap(spans: pd.DataFrame, start: float, end: float) -> float:
    if spans.empty:
        return 0.0
    return float((np.minimum(spans["end_s"], end) - np.maximum(spans["start_s"], start)).clip(lower=0).sum())


def iteration_table(result_dir: str | Path) -> pd.DataFrame:
    """Per worker and iteration: time_s, step, batch_size, iteration_s, compute_s, comm_s, wait_s, staleness, loss."""
    result_dir = Path(result_dir)
    steps = pd.read_csv(result_dir / "steps.csv")
    steps = steps[steps["batch_size"] > 0]  # a worker's own gradients (nnt also logs neighbours' as batch 0)
    spans = _spans(result_dir)
    rows = []
    for worker, own in steps.sort_values("time_s", kind="stable").groupby("worker", sort=True):
        mine = spans[spans["rank"] == worker]
        by_kind = {k: mine[mine["kind"] == k] for k in ("compute", "comm", "wait")}
        starts = sorted(mine[(mine["kind"] == "compute") & (mine["name"] == "forward/backward")]["start_s"])
        own = list(own.itertuples(index=False))
        for k, (begin, end) in enumerate(zip(starts, starts[1:]), start=1):
            row = own[k - 1] if k <= len(own) else None
            rows.append(dict(worker=int(worker), iteration=k, step=None if row is None else int(row.step), time_s=end,
                             batch_size=None if row is None else int(row.batch_size), iteration_s=end - begin,
                             compute_s=_overlap(by_kind["compute"], begin, end),
                             comm_s=_overlap(by_kind["comm"], begin, end),
                             wait_s=_overlap(by_kind["wait"], begin, end),
                             staleness=None if row is None else row.staleness,
                             loss=None if row is None else row.loss))
    return pd.DataFrame(rows)


def compare(real_dir: str | Path, sim_dir: str | Path) -> pd.DataFrame:
    """``validation.csv``: measured_* and predicted_* per (worker, iteration), and the % error.

    Iterations are paired by their index per worker. Where an algorithm's choices depend on
    timing (dbs rescales a worker's batch from the iteration times it has seen), the two runs
    can give the same iteration different work: ``measured_batch_size`` and
    ``predicted_batch_size`` show where.
    """
    real, sim = iteration_table(real_dir), iteration_table(sim_dir)
    keys = ["worker", "iteration"]
    merged = real.merge(sim, on=keys, how="inner", suffixes=("_measured", "_predicted"))
    out = merged[keys].copy()
    for column in ("step", "batch_size") + _COLUMNS + ("staleness", "loss"):
        out[f"measured_{column}"] = merged[f"{column}_measured"]
        out[f"predicted_{column}"] = merged[f"{column}_predicted"]
    out["iteration_error_pct"] = 100.0 * (out["predicted_iteration_s"] - out["measured_iteration_s"]) \
        / out["measured_iteration_s"].where(out["measured_iteration_s"] > 0)
    return out


def summarize(table: pd.DataFrame, real_dir: str | Path, sim_dir: str | Path, *, skip_first: int = 1) -> dict[str, Any]:
    """Error figures of a :func:`compare` table; the first ``skip_first`` iterations (warm-up) are left out."""
    real_summary = json.loads((Path(real_dir) / "summary.json").read_text())
    sim_summary = json.loads((Path(sim_dir) / "summary.json").read_text())
    steady = table[table["iteration"] > skip_first]
    errors = steady["iteration_error_pct"].abs().dropna()
    real_steps, sim_steps = pd.read_csv(Path(real_dir) / "steps.csv"), pd.read_csv(Path(sim_dir) / "steps.csv")
    budget = int(min(real_steps["step"].max(), sim_steps["step"].max())) if len(real_steps) and len(sim_steps) else 0

    def at_budget(steps: pd.DataFrame) -> pd.DataFrame:
        rows = steps[(steps["step"] == budget) & steps["loss"].notna()]
        return rows.groupby("worker", as_index=False)["loss"].mean()

    # workers that logged the budget step in both runs (a simulation stops at the first row reaching it)
    common = at_budget(real_steps).merge(at_budget(sim_steps), on="worker", suffixes=("_real", "_sim"))
    if len(common):
        real_loss, sim_loss = float(common["loss_real"].mean()), float(common["loss_sim"].mean())
    else:  # asynchronous: whoever delivered the budget step
        real_rows, sim_rows = at_budget(real_steps), at_budget(sim_steps)
        real_loss = float(real_rows["loss"].mean()) if len(real_rows) else None
        sim_loss = float(sim_rows["loss"].mean()) if len(sim_rows) else None
    both = table.dropna(subset=["measured_loss", "predicted_loss"])
    same_step = both[both["measured_step"] == both["predicted_step"]]
    t_real, t_sim = float(real_summary["virtual_time_s"]), float(sim_summary["virtual_time_s"])
    return {
        "algorithm": real_summary.get("algorithm"),
        "workers": real_summary.get("workers"),
        "iterations_compared": int(len(steady)),
        "iterations_with_other_batch": _other_batch(steady),
        "median_abs_iteration_error_pct": float(errors.median()) if len(errors) else None,
        "p90_abs_iteration_error_pct": float(errors.quantile(0.9)) if len(errors) else None,
        "measured_total_s": t_real,
        "predicted_total_s": t_sim,
        "total_time_error_pct": 100.0 * (t_sim - t_real) / t_real if t_real > 0 else None,
        "step_budget": budget,
        "measured_final_loss": real_loss,
        "predicted_final_loss": sim_loss,
        "final_loss_difference": None if real_loss is None or sim_loss is None else sim_loss - real_loss,
        "max_loss_difference_same_step": float((same_step["measured_loss"] - same_step["predicted_loss"]).abs().max())
        if len(same_step) else None,
        "measured_mean_staleness": real_summary.get("mean_staleness"),
        "predicted_mean_staleness": sim_summary.get("mean_staleness"),
    }


def repeatability(table: pd.DataFrame, *, skip_first: int = 1) -> dict[str, Any]:
    """How far two real runs of one scenario differ per iteration (a :func:`compare` table of
    the first run as ``measured`` and the second as ``predicted``).

    ``*_abs_iteration_difference_pct`` pair the runs as they are. The host's speed drifts
    between runs (other virtual machines), which moves every iteration of the second run by
    the same factor; ``level_ratio`` is that factor (the first run's total iteration time over
    the second's, over the compared iterations), and ``level_matched_*`` are the differences
    after the second run is scaled by it. What is left is the run-to-run variation a
    prediction cannot follow: which of two core-mates got the core first, which worker's
    message reached the server first. A simulation calibrated to the right level cannot be
    expected to come closer to one run, iteration by iteration, than another run of the
    same scenario does.
    """
    steady = table[table["iteration"] > skip_first].dropna(subset=["measured_iteration_s", "predicted_iteration_s"])
    steady = steady[steady["measured_iteration_s"] > 0]
    if steady.empty:
        raise ValueError("the two runs have no iteration in common after the warm-up")
    first, again = steady["measured_iteration_s"], steady["predicted_iteration_s"]
    level = float(first.sum() / again.sum())
    raw = (100.0 * (again - first) / first).abs()
    matched = (100.0 * (again * level - first) / first).abs()
    return {
        "iterations_compared": int(len(steady)),
        "iterations_with_other_batch": _other_batch(steady),
        "median_abs_iteration_difference_pct": float(raw.median()),
        "p90_abs_iteration_difference_pct": float(raw.quantile(0.9)),
        "level_ratio": level,
        "level_matched_median_abs_iteration_difference_pct": float(matched.median()),
        "level_matched_p90_abs_iteration_difference_pct": float(matched.quantile(0.9)),
    }


def _other_batch(table: pd.DataFrame) -> int:
    """How many compared iterations had a different batch size in the two runs."""
    measured, predicted = table["measured_batch_size"], table["predicted_batch_size"]
    return int((measured.notna() & predicted.notna() & (measured != predicted)).sum())


def plot_timelines(real_dir: str | Path, sim_dir: str | Path, path: str | Path, *, max_s: float | None = None) -> Path:
    """Measured (upper bar) and simulated (lower bar) spans of every rank on one time axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"compute": "tab:blue", "comm": "tab:orange", "wait": "tab:grey"}
    real, sim = _spans(Path(real_dir)), _spans(Path(sim_dir))
    ranks = sorted(set(real["rank"]) | set(sim["rank"]))
    fig, ax = plt.subplots(figsize=(10, 1 + 0.8 * len(ranks)))
    for y, rank in enumerate(ranks):
        for offset, spans in ((0.05, real), (-0.4, sim)):
            mine = spans[spans["rank"] == rank]
            if max_s is not None:
                mine = mine[mine["start_s"] < max_s]
            for kind, colour in colours.items():
                part = mine[mine["kind"] == kind]
                ax.broken_barh(list(zip(part["start_s"], part["end_s"] - part["start_s"])), (y + offset, 0.35),
                               facecolors=colour, label=kind if (y, offset) == (0, 0.05) else None)
    ax.set_yticks([y + 0.0 for y in range(len(ranks))], [f"rank {r}\nmeasured / sim" for r in ranks])
    ax.set_xlabel("time (s)")
    ax.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    path = Path(path)
    write_file_atomically(path, lambda tmp: fig.savefig(tmp, dpi=100, format=path.suffix.lstrip(".") or "png"))
    plt.close(fig)
    return path
