"""Real-vs-simulated iteration time predicted from microbenchmarks only (no pilot of the job).

    python benchmarks/predictive_validation.py [--ranks 2,4] [--algorithms sync,asgd,...]
                                               [--models 256x256,512x512] [--steps 60]
                                               [--compute-repeats 10] [--compute-rounds 5]
                                               [--network-path runtime|mpi] [--no-cpu-share]
                                               [--wait-idle S] [--retries N] [--repeat-real] [--rescore]
                                               [--out results/predictive_validation]

``benchmarks/validation_table.py`` calibrates each point from a short real run of that very
scenario (a pilot). A user who wants a prediction cannot run the job; what they can run are
microbenchmarks. This table calibrates the simulation from those alone:

* **network**, once per rank count at the start: ``simdist calibrate network --ranks R --path
  runtime`` (ping-pong and an allreduce sweep on this host, timed through simdist's MPI runtime,
  which the real runs communicate through; ``--network-path mpi`` times the MPI library's own
  calls instead; the overlay carries the link fit, ``messages`` (eager/rendezvous), the
  allreduce cost table ``collectives.tables`` and the host's reduction rate), written to
  ``OUT/network/net-R.yaml``. Its calls "after compute" (the first send, receive and driver
  turn after a forward/backward) are each timed right after one training step of the first
  point's workload at that rank count (``--after-compute``, scenario
  ``OUT/network/workload-R/scenario.yaml``); ``--cold-by write`` times them after a write of
  twice the host's largest cache instead, as tables before 2026-11-29 evening did;
* **compute**, per point, before its real run: ``simdist calibrate compute --scenario S.yaml``
  in a process of its own, which times exactly the point's model, dataset shape and optimizer
  at the batch sizes its algorithm runs (``OUT/<point>/profile.yaml``; the scenario it times is
  ``OUT/<point>/scenario.yaml``);
* **co-running ranks**, per point (unless ``--no-cpu-share``): ``simdist calibrate cpu-share
  --scenario S.yaml --ranks 2`` times two processes stepping the point's own workload against
  one alone, on one core (``--cores 1``) where the point has more ranks than the host has cores,
  the shape of the placement's core sets, else on two (``--cores 2``: each rank a core of its
  own, sharing caches and memory bandwidth); the slow-down beyond processor sharing becomes
  ``platform.node.co_run`` of the simulation (``OUT/<point>/co_run.yaml``; the column
  ``co_run_factor``: the oversubscribed factor on one core, the undersubscribed one on two),
  which the simulator applies to a node's core pool while two or more of its ranks compute at
  once (a parameter server's worker beside a waiting server is not slowed), together with the
  woken rank's run alone (``wake_run_s``);
* **compute noise**, with ``--compute-noise``: ``simdist calibrate noise OUT/<point>/profile.yaml``
  fits ``compute.noise`` (``rank_sigma``, ``correlation``) to the timed steps of that same
  microbenchmark, in the order they ran (``OUT/<point>/noise.yaml``), and the simulation draws
  each rank's steps from it: the host's step-to-step noise as seen alone on the machine, a lower
  bound on a run's, which is what makes synchronous ranks wait for each other in the simulation.

Each point is then ``simdist validate`` with ``--profile`` = that profile and
``--network-overlay`` = that overlay: given a profile, validate launches no pilot and times
nothing around the compared run; the simulation is told the profile, the overlay and the
placement of the ranks on the host's cores (which cores the ranks share, known before any run),
nothing measured on the run it is compared with.

Points: every algorithm at every rank count and model, with validation_table's placement rules
(parameter-server algorithms use the last rank as server, daso runs on 2 simulated nodes, nnt
on a ring of at least 3 workers) and its workload (synthetic 64-feature data, batch 2048 per
worker; ``--models`` sets the MLP's hidden widths, ``512x512`` being the validation table's).

The time ledger's target is scored too, from validate's ``validation_ledger.csv``: every part
of at least 5 % of the real step (data, forward_backward, pack, comm_wire, wait, unpack,
update ...) within 15 % of the real part (``ledger_*`` columns).

Prints per point: median and p90 |error| of the per-iteration time (first iteration of every
worker left out, as validate does), the total-time error, and per part of an iteration
(compute = forward/backward spans, comm, wait, host = the rest: optimizer step, data, packing)
the real and simulated mean per iteration with the part's own error and its contribution to
the mean iteration's error (points of the real mean iteration), plus the CPU other processes
used during the compute calibration and the real run and the steal (validation_table's
helpers). ``--wait-idle`` waits for a quiet host before every calibration and run;
``--retries N`` calibrates and runs a point again when other processes took more than 0.1
core during either. Writes ``OUT/predictive_validation.csv`` (one row per point) and
``OUT/per_worker.csv`` (the parts per worker).

``--repeat-real`` runs every point for real a second time, after its simulation, and scores
that run against the first exactly as the simulation is scored (``again_*`` columns: raw
per-iteration differences, not level-matched, since the simulation's level is a microbenchmark's
taken before the run; the total; the ledger part by part). ``host_repeats_within_target`` says
whether the host's own second run met the iteration target; the summary line counts the points
where it did, and how many of those the simulation met.

A diagnostic beside the errors, read from the real run after the comparison (the simulation
never sees it): the slowest worker's median CPU time per forward/backward at the workload's
batch against the profile's step (``fb_level_pct``, :func:`compute_level`), which separates a
compute part that is off because the step cost another amount of CPU in the run from one off
because the cores were shared differently than simulated. ``--rescore`` recomputes every row
from the saved point directories (``OUT/<point>/point.json``, ``profile.yaml``, ``validate/``)
without calibrating or running anything.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd
import yaml

from simdist.validation.run import compare_run_ledgers
# the fidelity targets: iteration median/p90 |error|; every ledger part of at least LEDGER_SHARE_PCT of the
# real step within LEDGER_PART_PCT (the same figures simdist validate judges by)
from simdist.validation.verdict import LEDGER_PART_PCT, LEDGER_SHARE_PCT, TARGET_MEDIAN_PCT, TARGET_P90_PCT

sys.path.insert(0, str(Path(__file__).resolve().parent))
from validation_table import (BASE, SCENARIO, WORKLOADS, load_line, other_load,  # noqa: E402
                              overrides as placement_overrides, wait_idle)

ALGORITHMS = ("sync", "asgd", "nsoftsync", "dbs", "daso", "dcs3gd", "nnt")
DEFAULT_MODELS = "256x256,512x512"
PARTS = ("compute", "comm", "wait", "host")
# a second real run against the first (--repeat-real): raw per-iteration differences, the total, the level factor,
# and its ledger part by part, scored as the simulation's is
AGAIN_FIGURES = ("median_pct", "p90_pct", "total_pct", "level_ratio", "ledger_parts_checked", "ledger_parts_within",
                 "ledger_worst_part", "ledger_within_target")
COLUMNS = (["algorithm", "ranks", "model", "iterations", "median_pct", "p90_pct", "total_pct",
            "real_iteration_ms", "sim_iteration_ms", "mean_iteration_pct"]
           + [f"{part}_{what}" for part in PARTS for what in ("real_ms", "sim_ms", "pct", "contrib_pct")]
           + ["within_target", "ledger_parts_checked", "ledger_parts_within", "ledger_worst_part", "ledger_within_target",
              "profile_fb_ms", "real_fb_cpu_ms", "real_fb_cpu_slowest_ms", "fb_level_pct",
              "real_wall_over_cpu", "noise_rank_sigma", "noise_correlation", "co_run_factor", "other_load_calibrate",
              "other_load_run",
              "steal", "attempts"]
           + [f"again_{what}" for what in AGAIN_FIGURES] + ["host_repeats_within_target", "dir"])
BATCH_SIZE = 2048  # per worker, validation_table's standard workload
BUSY_CORES = 0.1  # other processes' CPU above which a calibration or run is not this machine's (validation_table)


# -- options -------------------------------------------------------------------------------

def parse_models(text: str) -> list[list[int]]:
    """``"256x256,512x512"`` -> ``[[256, 256], [512, 512]]`` (an MLP's hidden widths)."""
    models = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        try:
            widths = [int(w) for w in item.lower().split("x")]
        except ValueError:
            raise ValueError(f"--models: {item!r} is not widths joined by 'x', such as 512x512") from None
        if not widths or min(widths) < 1:
            raise ValueError(f"--models: {item!r} needs positive widths")
        models.append(widths)
    if not models:
        raise ValueError("--models: give at least one model, such as 512x512")
    return models


def model_label(widths: Sequence[int]) -> str:
    return "x".join(map(str, widths))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,4", help="rank counts (default %(default)s; nnt runs on >= 3)")
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS), help="default %(default)s")
    parser.add_argument("--models", default=DEFAULT_MODELS,
                        help="MLP hidden widths per model, e.g. 256x256,512x512 (default %(default)s)")
    parser.add_argument("--steps", type=int, default=60, help="stop.steps of every real run (default %(default)s)")
    parser.add_argument("--compute-repeats", type=int, default=10,
                        help="timed steps per batch size of calibrate compute (default %(default)s)")
    parser.add_argument("--compute-rounds", type=int, default=5,
                        help="round-robin passes of calibrate compute (default %(default)s)")
    parser.add_argument("--network-budget-s", type=float, default=0.25,
                        help="calibrate network --budget-s (default %(default)s)")
    parser.add_argument("--network-path", choices=("runtime", "mpi"), default="runtime",
                        help="calibrate network --path: runtime (default), simdist's MPI runtime, which the real "
                             "runs use; mpi, the MPI library's own calls")
    parser.add_argument("--cold-by", choices=("step", "write"), default="step",
                        help="calibrate network's calls after compute: right after a training step of the points' "
                             "workload (default), or after writing twice the largest cache")
    parser.add_argument("--compute-noise", action="store_true",
                        help="simulate with compute.noise fitted by simdist calibrate noise to the compute "
                             "microbenchmark's own timed steps")
    parser.add_argument("--no-cpu-share", dest="cpu_share", action="store_false",
                        help="leave out the co-run calibration (simdist calibrate cpu-share) of every point: the "
                             "simulation then takes processor sharing alone")
    parser.add_argument("--wait-idle", type=float, default=0.0, metavar="S",
                        help="before each calibration and run wait (at most S seconds) until other processes use "
                             "< 0.1 core")
    parser.add_argument("--retries", type=int, default=0,
                        help="calibrate and run a point again (at most this many times) when other processes used "
                             f"> {BUSY_CORES:g} core during its compute calibration or its real run")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="limit of one real run (default %(default)s)")
    parser.add_argument("--repeat-real", action="store_true",
                        help="run every point for real a second time and score that run against the first, "
                             "as the simulation is scored: how far this host repeats itself")
    parser.add_argument("--rescore", action="store_true",
                        help="calibrate and run nothing: recompute the rows of the points already in --out from "
                             "their saved directories")
    parser.add_argument("--out", default="results/predictive_validation")
    args = parser.parse_args(argv)
    try:
        args.rank_list = [int(r) for r in args.ranks.split(",") if r.strip()]
        args.model_list = parse_models(args.models)
    except ValueError as exc:
        parser.error(str(exc))
    if not args.rank_list or min(args.rank_list) < 2:
        parser.error(f"--ranks: at least 2 ranks per point, got {args.ranks!r}")
    args.algorithm_list = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    unknown = sorted(set(args.algorithm_list) - set(ALGORITHMS))
    if unknown or not args.algorithm_list:
        parser.error(f"--algorithms: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(ALGORITHMS)}")
    if args.steps < 4 or args.compute_repeats < 1 or args.compute_rounds < 1:
        parser.error("--steps >= 4, --compute-repeats and --compute-rounds >= 1")
    if args.wait_idle < 0 or args.retries < 0 or args.timeout_s <= 0 or args.network_budget_s <= 0:
        parser.error("--wait-idle and --retries >= 0, --timeout-s and --network-budget-s > 0")
    return args


def points(algorithms: Iterable[str], ranks: Iterable[int], models: Sequence[Sequence[int]]) -> list[dict]:
    """The table's points: algorithm, ranks actually run, model widths, scenario overrides."""
    out = []
    for algorithm in algorithms:
        for r in ranks:
            r = max(r, 3) if algorithm == "nnt" else r  # a ring needs 3 workers
            sets = placement_overrides(algorithm, r)
            if sets is None:
                continue
            for widths in models:
                label = f"{algorithm}-{r}-{model_label(widths)}"
                if any(p["label"] == label for p in out):  # nnt at "2" and "3" is one point
                    continue
                out.append(dict(label=label, algorithm=algorithm, ranks=r, widths=list(widths), sets=sets))
    return out


def point_overrides(widths: Sequence[int], steps: int, sets: Sequence[str]) -> list[str]:
    """validation_table's workload with this model and step budget, then the algorithm's placement."""
    model = f"workload.model={{name: mlp, hidden: [{', '.join(map(str, widths))}]}}"
    return [*BASE, *WORKLOADS["standard"][0], model, f"stop.steps={steps}", *sets]


def write_scenario(path: Path, ranks: int, overrides: Sequence[str]) -> Path:
    """The point's scenario as one file (what ``calibrate compute --scenario`` times): the
    quickstart scenario with validate's ``platform.node.devices`` and the overrides applied."""
    from simdist.scenario import apply_overrides, load_scenario, read_scenario_file

    data = apply_overrides(read_scenario_file(SCENARIO), [f"platform.node.devices={ranks}", *overrides])
    data["name"] = path.parent.name
    for key in ("compare", "sweep"):  # variants and grids are not the point
        data.pop(key, None)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# written by benchmarks/predictive_validation.py: scenarios/quickstart.yaml with the point's "
                    "overrides\n" + yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    load_scenario(path)  # it must validate as it stands
    return path


# -- the figures of one point --------------------------------------------------------------

def compare_tables(real: pd.DataFrame, sim: pd.DataFrame) -> pd.DataFrame:
    """Per-iteration tables of two runs (worker, iteration, iteration_s, compute_s, comm_s,
    wait_s; :func:`simdist.validation.iteration_table`) paired by worker and iteration, as
    ``validation.csv`` holds them (``measured_*``, ``predicted_*``)."""
    columns = ["iteration_s", "compute_s", "comm_s", "wait_s"]
    merged = real[["worker", "iteration", *columns]].merge(sim[["worker", "iteration", *columns]],
                                                           on=["worker", "iteration"], suffixes=("_r", "_s"))
    out = merged[["worker", "iteration"]].copy()
    for column in columns:
        out[f"measured_{column}"] = merged[f"{column}_r"]
        out[f"predicted_{column}"] = merged[f"{column}_s"]
    return out


def _pct(sim: float, real: float) -> float | None:
    return 100.0 * (sim - real) / real if real > 0 else None


def errors(table: pd.DataFrame, skip_first: int = 1) -> tuple[dict[str, Any], pd.DataFrame]:
    """(point figures, per-worker parts) of a ``validation.csv``-shaped table.

    Iteration error: |predicted - measured| / measured per worker and iteration, the first
    ``skip_first`` iterations of every worker left out (warm-up, as validate). Parts: mean per
    iteration of compute, comm, wait and host (= iteration - compute - comm - wait: the
    optimizer step, data, packing) in both runs; ``pct`` is the part's own error, ``contrib_pct``
    its difference in points of the real mean iteration (the contributions add up to
    ``mean_iteration_pct``).
    """
    steady = table[table["iteration"] > skip_first].copy()
    steady = steady[steady["measured_iteration_s"] > 0]
    if steady.empty:
        raise ValueError("no iteration to compare after the warm-up")
    for side in ("measured", "predicted"):
        steady[f"{side}_host_s"] = (steady[f"{side}_iteration_s"] - steady[f"{side}_compute_s"]
                                    - steady[f"{side}_comm_s"] - steady[f"{side}_wait_s"]).clip(lower=0.0)
    abs_err = (100.0 * (steady["predicted_iteration_s"] - steady["measured_iteration_s"])
               / steady["measured_iteration_s"]).abs()
    real_it, sim_it = float(steady["measured_iteration_s"].mean()), float(steady["predicted_iteration_s"].mean())
    row: dict[str, Any] = {"iterations": int(len(steady)), "median_pct": float(abs_err.median()),
                           "p90_pct": float(abs_err.quantile(0.9)), "real_iteration_ms": 1e3 * real_it,
                           "sim_iteration_ms": 1e3 * sim_it, "mean_iteration_pct": _pct(sim_it, real_it)}
    for part in PARTS:
        real, sim = float(steady[f"measured_{part}_s"].mean()), float(steady[f"predicted_{part}_s"].mean())
        row.update({f"{part}_real_ms": 1e3 * real, f"{part}_sim_ms": 1e3 * sim, f"{part}_pct": _pct(sim, real),
                    f"{part}_contrib_pct": 100.0 * (sim - real) / real_it})
    row["within_target"] = row["median_pct"] <= TARGET_MEDIAN_PCT and row["p90_pct"] <= TARGET_P90_PCT
    per_worker = []
    for worker, mine in steady.groupby("worker", sort=True):
        entry: dict[str, Any] = {"worker": int(worker), "iterations": int(len(mine))}
        for part in ("iteration", *PARTS):
            real, sim = float(mine[f"measured_{part}_s"].mean()), float(mine[f"predicted_{part}_s"].mean())
            entry.update({f"{part}_real_ms": 1e3 * real, f"{part}_sim_ms": 1e3 * sim, f"{part}_pct": _pct(sim, real)})
        per_worker.append(entry)
    return row, pd.DataFrame(per_worker)


def ledger_target(ledger: pd.DataFrame) -> dict[str, Any]:
    """The ledger's part-by-part verdict from ``validation_ledger.csv`` (:func:`simdist.ledger.compare_ledgers`):
    the parts of at least LEDGER_SHARE_PCT of the real step, how many are within LEDGER_PART_PCT,
    the worst of them (``update +23.1``) and whether all are."""
    rows = ledger[(ledger["part"] != "step") & (ledger["share_pct"].fillna(0.0) >= LEDGER_SHARE_PCT)]
    errors = rows.set_index("part")["error_pct"].astype(float)
    within = int((errors.abs() <= LEDGER_PART_PCT).sum())
    worst = errors.abs().idxmax() if len(errors) else None
    return {"ledger_parts_checked": int(len(errors)), "ledger_parts_within": within,
            "ledger_worst_part": None if worst is None else f"{worst} {errors[worst]:+.1f}",
            "ledger_within_target": bool(len(errors)) and within == len(errors)}


def worst_part(row: dict[str, Any]) -> str:
    """The part whose difference moves the mean iteration most, e.g. ``comm +12.3``."""
    part = max(PARTS, key=lambda p: abs(row.get(f"{p}_contrib_pct") or 0.0))
    return f"{part} {row[f'{part}_contrib_pct']:+.1f}"


def compute_level(real_dir: str | Path, profile: str | Path, batch_size: int) -> dict[str, Any]:
    """A diagnostic read after the comparison (the simulation never sees it): the profile's step
    at ``batch_size`` against the real run's forward/backwards at that batch, in thread CPU
    seconds (each worker's median; the median over workers and the slowest worker's).

    Sharing a core stretches a forward/backward's wall time, not its CPU time, so this tells a
    compute part that is off because the step cost another amount of CPU in the run (the host's
    per-core speed at the time, the run's caches) from one off because the core was shared
    differently than simulated. ``fb_level_pct``: slowest worker over the profile, in %.
    """
    from simdist.tracefile import span_events

    models = (yaml.safe_load(Path(profile).read_text(encoding="utf-8")) or {}).get("models") or {}
    fit = next(iter(models.values()), None)
    profiled = None if fit is None else fit["t0_s"] + fit["t1_s"] * batch_size
    per_worker: dict[int, list[float]] = {}
    for e in span_events(real_dir):
        args = e.get("args") or {}
        if e.get("name") == "forward/backward" and args.get("batch_size") == batch_size and "cpu_s" in args:
            per_worker.setdefault(int(e["tid"]), []).append(float(args["cpu_s"]))
    medians = [float(pd.Series(v).median()) for v in per_worker.values()]
    if not medians:
        return {"profile_fb_ms": None if profiled is None else 1e3 * profiled}
    slowest = max(medians)
    return {"profile_fb_ms": None if profiled is None else 1e3 * profiled,
            "real_fb_cpu_ms": 1e3 * float(pd.Series(medians).median()), "real_fb_cpu_slowest_ms": 1e3 * slowest,
            "fb_level_pct": None if not profiled else _pct(slowest, profiled)}


# -- output --------------------------------------------------------------------------------

def _fmt(value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else value


def write_csv(path: str | Path, rows: Sequence[dict[str, Any]], columns: Sequence[str] = COLUMNS) -> Path:
    """``rows`` as CSV with ``columns`` (missing values empty), written whole then renamed into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({c: _fmt(row.get(c)) for c in columns})
    os.replace(tmp, path)
    return path


HEADER = (f"{'algorithm':10} {'ranks':>5} {'model':>9} {'median %':>9} {'p90 %':>7} {'total %':>8} "
          f"{'iter ms real/sim':>17} " + " ".join(f"{p + ' ms r/s (pts)':>24}" for p in PARTS)
          + f" {'other load cal/run':>18} {'steal':>6}")


def line(row: dict[str, Any]) -> str:
    parts = " ".join(f"{row[f'{p}_real_ms']:7.2f}/{row[f'{p}_sim_ms']:<7.2f}({row[f'{p}_contrib_pct']:+5.1f})"
                     .rjust(24) for p in PARTS)
    load = f"{_load(row.get('other_load_calibrate'))}/{_load(row.get('other_load_run'))}"
    total = row.get("total_pct")
    again = "" if row.get("again_median_pct") is None else (
        f"   real again: {row['again_median_pct']:.1f}/{row['again_p90_pct']:.1f} % median/p90")
    return (f"{row['algorithm']:10} {row['ranks']:5d} {row['model']:>9} {row['median_pct']:9.1f} {row['p90_pct']:7.1f} "
            f"{'?' if total is None else f'{total:8.1f}':>8} "
            f"{row['real_iteration_ms']:8.2f}/{row['sim_iteration_ms']:<8.2f} {parts} {load:>18} "
            f"{_load(row.get('steal')):>6}{again}")


def _load(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}"


# -- running -------------------------------------------------------------------------------

def _simdist(*words: str, timeout_s: float) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    done = subprocess.run([sys.executable, "-m", "simdist", *words], capture_output=True, text=True, env=env,
                          timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"simdist {' '.join(words[:2])} failed ({done.returncode}): "
                           + " ".join((done.stderr or done.stdout).split())[-300:])
    return done


def calibrate_network(ranks: int, out: Path, budget_s: float, path_timed: str = "runtime",
                      after_compute: Path | None = None) -> Path:
    """``simdist calibrate network`` at ``ranks``; ``after_compute``: the scenario whose training step
    precedes each call timed "after compute" (else a write of twice the largest cache)."""
    path = out / "network" / f"net-{ranks}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    cold = [] if after_compute is None else ["--after-compute", str(after_compute)]
    _simdist("calibrate", "network", "--ranks", str(ranks), "--budget-s", f"{budget_s:g}", "--out", str(path),
             "--path", path_timed, *cold, timeout_s=600)
    return path


def network_workload(todo: Sequence[dict], ranks: int, args: argparse.Namespace, out: Path) -> Path | None:
    """The scenario of the first point at ``ranks``, for calibrate network's calls after compute
    (None with ``--cold-by write``)."""
    if getattr(args, "cold_by", "step") == "write":
        return None
    p = next(p for p in todo if p["ranks"] == ranks)
    return write_scenario(out / "network" / f"workload-{ranks}" / "scenario.yaml", ranks,
                          point_overrides(p["widths"], args.steps, p["sets"]))


def noise_override(profile: Path, out: Path) -> str:
    """``compute.noise=...`` as ``simdist calibrate noise`` fits it to ``profile``'s timed steps (written to ``out``)."""
    _simdist("calibrate", "noise", str(profile), "--out", str(out), timeout_s=120)
    return set_override("compute.noise", yaml.safe_load(out.read_text(encoding="utf-8"))["compute"]["noise"])


def set_override(field: str, value: dict) -> str:
    """``field={...}``: a ``--set`` override giving ``field`` the mapping ``value`` in YAML flow style."""
    return f"{field}={yaml.safe_dump(value, default_flow_style=True, width=float('inf'), sort_keys=False).strip()}"


def usable_cores() -> int:
    """The CPUs this process may run on (the real runs' ranks share them)."""
    from simdist.calibrate.cpu_share import available_cores

    return len(available_cores())


def co_run_override(scenario: Path, here: Path, cores: int = 1) -> str:
    """``platform.node.co_run=...`` as ``simdist calibrate cpu-share --scenario`` measures it for two
    of the point's ranks stepping its workload on ``cores`` cores: on one when ranks outnumber the
    host's cores, the shape of the placement's core sets (the time per step against one rank alone,
    beyond processor sharing's 2x); on two when each rank has a core (the slow-down of sharing
    caches and memory bandwidth). ``here/cpu_share.yaml``, ``here/co_run.yaml``. Not all ranks on
    all cores: the scheduler then moves three ranks between two cores, which the pinned run never
    does, and the factor is erratic (3 ranks on 2 cores gave 1.03 in one table and 1.16 in the next)."""
    overlay = here / "co_run.yaml"
    _simdist("calibrate", "cpu-share", "--scenario", str(scenario), "--ranks", "1,2" if cores > 1 else "2",
             "--cores", str(cores), "--duration-s", "1", "--rounds", "3", "--out", str(here / "cpu_share.yaml"),
             "--overlay", str(overlay), timeout_s=300)
    return set_override("platform.node.co_run", yaml.safe_load(overlay.read_text(encoding="utf-8"))["node"]["co_run"])


def run_point(p: dict, args: argparse.Namespace, overlay: Path, out: Path) -> dict[str, Any]:
    """Calibrate compute for the point, validate it with that profile and overlay, return its row."""
    from simdist.real.describe import HostLoad
    from simdist.validation import validate

    sets = point_overrides(p["widths"], args.steps, p["sets"])
    here = out / p["label"]
    scenario = write_scenario(here / "scenario.yaml", p["ranks"], sets)
    profile = here / "profile.yaml"
    if args.wait_idle:
        wait_idle(args.wait_idle)
    with HostLoad() as calibration_load:
        _simdist("calibrate", "compute", "--scenario", str(scenario), "--out", str(profile),
                 "--repeats", str(args.compute_repeats), "--rounds", str(args.compute_rounds), "--warmup", "2",
                 timeout_s=600)
    if getattr(args, "compute_noise", False):
        sets = [*sets, noise_override(profile, here / "noise.yaml")]
    if getattr(args, "cpu_share", True):
        sets = [*sets, co_run_override(scenario, here, 1 if p["ranks"] > usable_cores() else 2)]
    if args.wait_idle:
        wait_idle(args.wait_idle)
    validate(SCENARIO, p["ranks"], here / "validate", overrides=sets, affinity="auto", overlay=overlay,
             profile=profile, timeout_s=args.timeout_s, plots=False, repeat_real=getattr(args, "repeat_real", False))
    (here / "point.json").write_text(json.dumps({**{k: p[k] for k in ("label", "algorithm", "ranks", "widths")},
                                                 "other_load_calibrate": calibration_load.cores,
                                                 "overlay": str(overlay)}, indent=1) + "\n", encoding="utf-8")
    return score(p, here)


def score(p: dict, here: Path) -> dict[str, Any]:
    """The row of a point whose directory ``here`` holds its profile, validate output and point.json."""
    summary = json.loads((here / "validate" / "validation.json").read_text(encoding="utf-8"))
    saved = json.loads((here / "point.json").read_text(encoding="utf-8")) if (here / "point.json").is_file() else {}
    row, per_worker = errors(pd.read_csv(here / "validate" / "validation.csv"))
    ledger = here / "validate" / "validation_ledger.csv"
    if ledger.is_file():
        row.update(ledger_target(pd.read_csv(ledger)))
    if (here / "noise.yaml").is_file():  # simulated with the compute microbenchmark's own noise (--compute-noise)
        fitted = yaml.safe_load((here / "noise.yaml").read_text(encoding="utf-8"))["compute"]["noise"]
        row.update(noise_rank_sigma=fitted.get("rank_sigma"), noise_correlation=fitted.get("correlation"))
    if (here / "co_run.yaml").is_file():  # simulated with the co-run calibration's factor
        co_run = yaml.safe_load((here / "co_run.yaml").read_text(encoding="utf-8"))["node"]["co_run"]
        row["co_run_factor"] = max(co_run["oversubscribed_factor"], co_run["undersubscribed_factor"])
    if "real_again" in summary:
        row.update(repeat_scores(summary["real_again"], here / "validate" / "real"))
    row.update(algorithm=p["algorithm"], ranks=p["ranks"], model=model_label(p["widths"]),
               total_pct=summary.get("total_time_error_pct"), other_load_calibrate=saved.get("other_load_calibrate"),
               other_load_run=other_load(summary), steal=summary.get("host_steal_cores"),
               real_wall_over_cpu=summary.get("measured_compute_wall_over_cpu"), attempts=saved.get("attempts"),
               dir=str(here),
               **compute_level(here / "validate" / "real", here / "profile.yaml", BATCH_SIZE))
    per_worker.insert(0, "point", p["label"])
    row["_per_worker"] = per_worker
    return row


def repeat_scores(again: dict[str, Any], real_dir: Path) -> dict[str, Any]:
    """The second real run scored against the first as the simulation is (``again_*`` columns).

    Raw differences, not level-matched: the simulation's level comes from a microbenchmark
    taken before the run, so the host's speed moving between two moments is part of what it
    is scored on, as it is part of what separates two real runs. ``host_repeats_within_target``:
    whether the host's own second run meets the iteration-time target against its first; where
    it does not, no prediction can be expected to."""
    row: dict[str, Any] = {"again_median_pct": again.get("median_abs_iteration_difference_pct"),
                           "again_p90_pct": again.get("p90_abs_iteration_difference_pct"),
                           "again_total_pct": again.get("total_time_difference_pct"),
                           "again_level_ratio": again.get("level_ratio")}
    table = compare_run_ledgers(real_dir, again["dir"])
    if table is not None:
        row.update({f"again_{key}": value for key, value in ledger_target(table).items()})
    median, p90 = row["again_median_pct"], row["again_p90_pct"]
    row["host_repeats_within_target"] = (None if median is None or p90 is None
                                         else median <= TARGET_MEDIAN_PCT and p90 <= TARGET_P90_PCT)
    return row


def busy(row: dict[str, Any]) -> bool:
    """Other processes took more than BUSY_CORES during the point's compute calibration or real run."""
    return any((row.get(k) or 0.0) > BUSY_CORES for k in ("other_load_calibrate", "other_load_run"))


def measure(p: dict, args: argparse.Namespace, overlay: Path, out: Path) -> dict[str, Any]:
    """:func:`run_point`, again (from its compute calibration) while other processes spoilt it."""
    attempt = 0
    while True:
        row = run_point(p, args, overlay, out)
        row["attempts"] = attempt + 1
        saved = out / p["label"] / "point.json"
        saved.write_text(json.dumps({**json.loads(saved.read_text(encoding="utf-8")), "attempts": attempt + 1},
                                    indent=1) + "\n", encoding="utf-8")
        if not busy(row) or attempt >= args.retries:
            return row
        print(f"# {p['label']}: other processes used {_load(row['other_load_calibrate'])} cores while calibrating, "
              f"{_load(row['other_load_run'])} during the run; again", flush=True)
        attempt += 1


def finish(rows: list[dict[str, Any]], workers: list[pd.DataFrame], out: Path) -> None:
    if workers:
        pd.concat(workers, ignore_index=True).to_csv(out / "per_worker.csv", index=False, float_format="%.4g")
    write_csv(out / "predictive_validation.csv", rows)
    hits = sum(r["within_target"] for r in rows)
    print(f"# within median <= {TARGET_MEDIAN_PCT:g} % and p90 <= {TARGET_P90_PCT:g} %: {hits} of {len(rows)} points")
    ledger_hits = sum(bool(r.get("ledger_within_target")) for r in rows)
    print(f"# every ledger part of >= {LEDGER_SHARE_PCT:g} % of the step within {LEDGER_PART_PCT:g} %: "
          f"{ledger_hits} of {len(rows)} points")
    repeated = [r for r in rows if r.get("host_repeats_within_target") is not None]
    if repeated:
        print(repeat_summary(repeated))


def repeat_summary(rows: Sequence[dict[str, Any]]) -> str:
    """How often the host's second real run met the targets against its first, beside the simulation."""
    steady = [r for r in rows if r["host_repeats_within_target"]]
    ledger = sum(bool(r.get("again_ledger_within_target")) for r in rows)
    return (f"# the second real run against the first (--repeat-real): iteration target met at {len(steady)} of "
            f"{len(rows)} points, ledger target at {ledger} of {len(rows)}; the simulation meets the iteration "
            f"target at {sum(r['within_target'] for r in steady)} of the {len(steady)} points where the host "
            f"repeated itself")


def rescore(todo: list[dict], out: Path) -> int:
    """Rows of the saved points (no calibration, no run)."""
    rows, workers = [], []
    print(HEADER)
    for p in todo:
        here = out / p["label"]
        if not (here / "validate" / "validation.json").is_file():
            print(f"{p['algorithm']:10} {p['ranks']:5d} {model_label(p['widths']):>9}  (not in {out})")
            continue
        row = score(p, here)
        workers.append(row.pop("_per_worker"))
        rows.append(row)
        print(line(row) + ("" if row["within_target"] else f"   miss: {worst_part(row)}"), flush=True)
    finish(rows, workers, out)
    return 0 if rows else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    todo = points(args.algorithm_list, args.rank_list, args.model_list)
    print(f"# {datetime.datetime.now().astimezone().isoformat(timespec='seconds')} on {platform.node()} "
          f"({platform.machine()}, {os.cpu_count()} CPUs)")
    print(load_line("before"))
    if args.rescore:
        return rescore(todo, out)
    print(f"# predicted from microbenchmarks: compute from `simdist calibrate compute --scenario` per point "
          f"({args.compute_repeats} repeats x {args.compute_rounds} rounds), network from `simdist calibrate "
          f"network --ranks R --path {args.network_path}` per rank count; no pilot; {len(todo)} points, "
          f"{args.steps} steps each", flush=True)
    overlays = {}
    for ranks in sorted({p["ranks"] for p in todo}):
        if args.wait_idle:
            wait_idle(args.wait_idle)
        overlays[ranks] = calibrate_network(ranks, out, args.network_budget_s, args.network_path,
                                            network_workload(todo, ranks, args, out))
        print(f"# network overlay for {ranks} ranks: {overlays[ranks]}", flush=True)
    print(HEADER, flush=True)
    rows, workers = [], []
    for p in todo:
        try:
            row = measure(p, args, overlays[p["ranks"]], out)
        except Exception as exc:  # noqa: BLE001 - report and go on
            print(f"{p['algorithm']:10} {p['ranks']:5d} {model_label(p['widths']):>9}  FAILED: "
                  f"{' '.join(str(exc).split())[:200]}", flush=True)
            continue
        workers.append(row.pop("_per_worker"))
        rows.append(row)
        print(line(row) + ("" if row["within_target"] else f"   miss: {worst_part(row)}"), flush=True)
        write_csv(out / "predictive_validation.csv", rows)
    finish(rows, workers, out)
    print(load_line("after"))
    print(f"# {time.perf_counter() - started:.0f} s; wrote {out / 'predictive_validation.csv'}")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
