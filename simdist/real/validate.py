"""Real run vs simulation of one scenario: ``validation.csv``, a summary and a timeline overlay.

:func:`validate` runs the scenario for real under mpiexec (:mod:`.launch`), simulates it on
the calibrated platform (the host's compute profile, the shared-memory network fit) with the
same seed and data order, and compares the two result directories iteration by iteration:

* an *iteration* of a worker ends at each of its rows in ``steps.csv`` with a batch (nnt's
  neighbour-gradient rows have batch 0 and are left out) and starts at its previous one (0 for the first); its compute / comm / wait are the worker's blocking spans
  in ``trace.json`` inside that window;
* ``validation.csv``: per worker and iteration, measured and predicted iteration time,
  compute, comm, wait, staleness and loss, and the iteration time's % error;
* summary (``validation.json``): median and p90 absolute % error of iteration time, error of
  total time, final-loss difference at the common step budget, the largest per-step loss
  difference (sync: the same math, so float noise only), mean staleness of both runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..errors import InputError

__all__ = ["iteration_table", "compare", "summarize", "validate", "plot_timelines", "DEFAULT_OVERLAY"]

_REPO = Path(__file__).resolve().parents[2]
DEFAULT_OVERLAY = _REPO / "calibration" / "platforms" / "host-shm.yaml"
_COLUMNS = ("iteration_s", "compute_s", "comm_s", "wait_s")


def _spans(result_dir: Path) -> pd.DataFrame:
    """Blocking spans of ``trace.json``: rank, kind, start_s, end_s."""
    data = json.loads((result_dir / "trace.json").read_text(encoding="utf-8"))
    events = data["traceEvents"] if isinstance(data, dict) else data
    rows = [(e["tid"], e.get("cat", ""), e["ts"] * 1e-6, (e["ts"] + e.get("dur", 0.0)) * 1e-6)
            for e in events if e.get("ph") == "X" and (e.get("args") or {}).get("blocking", True) is not False]
    return pd.DataFrame(rows, columns=["rank", "kind", "start_s", "end_s"])


def _overlap(spans: pd.DataFrame, start: float, end: float) -> float:
    if spans.empty:
        return 0.0
    return float((np.minimum(spans["end_s"], end) - np.maximum(spans["start_s"], start)).clip(lower=0).sum())


def iteration_table(result_dir: str | Path) -> pd.DataFrame:
    """Per worker and iteration: time_s, step, iteration_s, compute_s, comm_s, wait_s, staleness, loss."""
    result_dir = Path(result_dir)
    steps = pd.read_csv(result_dir / "steps.csv")
    steps = steps[steps["batch_size"] > 0]  # a worker's own gradients (nnt also logs neighbours' as batch 0)
    spans = _spans(result_dir)
    rows = []
    for worker, own in steps.sort_values("time_s", kind="stable").groupby("worker", sort=True):
        mine = spans[spans["rank"] == worker]
        by_kind = {k: mine[mine["kind"] == k] for k in ("compute", "comm", "wait")}
        previous = 0.0
        for k, row in enumerate(own.itertuples(index=False), start=1):
            end = float(row.time_s)
            rows.append(dict(worker=int(worker), iteration=k, step=int(row.step), time_s=end,
                             iteration_s=end - previous,
                             compute_s=_overlap(by_kind["compute"], previous, end),
                             comm_s=_overlap(by_kind["comm"], previous, end),
                             wait_s=_overlap(by_kind["wait"], previous, end),
                             staleness=row.staleness, loss=row.loss))
            previous = end
    return pd.DataFrame(rows)


def compare(real_dir: str | Path, sim_dir: str | Path) -> pd.DataFrame:
    """``validation.csv``: measured_* and predicted_* per (worker, iteration), and the % error."""
    real, sim = iteration_table(real_dir), iteration_table(sim_dir)
    keys = ["worker", "iteration"]
    merged = real.merge(sim, on=keys, how="inner", suffixes=("_measured", "_predicted"))
    out = merged[keys].copy()
    for column in ("step",) + _COLUMNS + ("staleness", "loss"):
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
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def calibrate_compute(scenario_obj: Any, path: Path, *, threads: int, repeats: int = 40) -> Path:
    """Measure the scenario's own model (its options, its dataset) at ``threads`` threads on this
    machine around its batch size and write a host-cpu profile overlay to ``path``."""
    from ..calibrate.compute_profile import measure_profile, profile_document, steady_allocator, write_profile
    from ..simulate import Simulation

    workload = Simulation(scenario_obj, None).workload
    batch = int(scenario_obj.workload.batch_size)
    sizes = sorted({max(1, batch // 4), max(2, batch // 2), batch, batch * 2})
    allocator = "glibc mmap/trim thresholds raised (steady)" if steady_allocator() else "default"
    profile = measure_profile(workload, sizes, repeats=repeats, warmup=3, threads=threads, rounds=4, statistic="p25")
    profile["options"] = workload.model_config.model_dump(mode="json")
    profile["dataset"] = workload.dataset.name
    profile["t1_s"] = max(profile["t1_s"], 1e-12)  # the loader refuses a flat line
    document = profile_document({workload.model_name: profile}, threads, "host-cpu", allocator=allocator)
    write_profile(path, document, "simdist validate (compute calibration of the scenario's model)")
    return path


def validate(scenario: str | Path, ranks: int, out: str | Path, *, overrides: Sequence[str] = (),
             threads: int | None = None, affinity: str | None = None, overlay: str | Path | None = None,
             profile: str | Path | None = None, cores: int | None = None,
             timeout_s: float = 600.0, plots: bool = True) -> dict[str, Any]:
    """Real run + simulation of ``scenario`` on ``ranks`` ranks; writes ``out`` and returns the summary.

    ``profile``: a compute profile to simulate with (default: measure the scenario's model here,
    :func:`calibrate_compute`); ``overlay``: the network fit (default host-shm.yaml); ``cores``:
    the host's cores the ranks share (default ``os.cpu_count()``; ranks > cores share them).
    """
    import os

    from ..results import write_result_dir
    from ..scenario import load_scenario
    from ..simulate import simulate
    from .launch import run_real

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    overrides = [f"platform.node.devices={ranks}", *overrides]
    overlay = Path(overlay) if overlay else (DEFAULT_OVERLAY if DEFAULT_OVERLAY.is_file() else None)
    if overlay is not None:
        if not overlay.is_file():
            raise InputError(f"network overlay {str(overlay)!r} not found", source="--network-overlay")
        overrides.append(f"platform.overlays=[{overlay.resolve()}]")
    if threads:
        overrides.append(f"compute.threads={threads}")
    scenario_obj = load_scenario(scenario, list(overrides))
    if scenario_obj.workload.timing_only:
        raise InputError("real runs need tensors; timing_only is not supported", source=str(scenario),
                         field="workload.timing_only")
    if profile is None:
        profile = calibrate_compute(scenario_obj, out / "calibration" / "host-cpu.yaml",
                                    threads=threads or scenario_obj.compute.threads)
    elif not Path(profile).is_file():
        raise InputError(f"compute profile {str(profile)!r} not found", source="--profile")
    sim_overrides = list(overrides) + [f"compute.profiles=[{Path(profile).resolve()}]",
                                       f"platform.node.cores={cores or os.cpu_count() or 1}"]
    sim_scenario = load_scenario(scenario, sim_overrides)
    real_dir = run_real(scenario, ranks, out / "real", overrides=overrides, threads=threads, affinity=affinity,
                        timeout_s=timeout_s, plots=plots)
    sim_dir = write_result_dir(simulate(sim_scenario), out / "sim", overwrite=True, plots=plots)
    table = compare(real_dir, sim_dir)
    table.to_csv(out / "validation.csv", index=False, float_format="%.9g")
    summary = summarize(table, real_dir, sim_dir)
    (out / "validation.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if plots:
        plot_timelines(real_dir, sim_dir, out / "timeline_overlay.png")
    return summary
