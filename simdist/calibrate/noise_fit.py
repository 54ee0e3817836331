"""``simdist calibrate noise FILE...``: per-iteration times → the compute-noise model.

Reads the time of every step of every rank, fits the parameters of
:class:`~simdist.platform.noise.NoiseSpec` by the method of moments on log-times, prints a
residual report (each measured statistic beside the same statistic of the fitted model drawn
on the same ranks, nodes and steps) and writes a **scenario compute overlay**: a
``compute: {noise: ...}`` block with ``provenance`` (noise is how this workload's steps vary
on this machine — relative jitter depends on how long a step is — so it sits beside the
compute profiles in the scenario, not in the hardware-only platform file; docs/noise.md).

Inputs: one run's simdist ``trace.json`` or ``steps.csv`` (simulated or real MPI: the same
schema), PyTorch profiler traces (one per rank) or a CSV ``rank,step,time_s[,node]``, read and
checked by :mod:`simdist.calibrate.step_times`.

The fit, on ``y = log t`` centred per rank (and batch size) — the static part of a rank's
speed is a device difference, not noise, and is reported apart:

* tail: steps above ``threshold`` × their rank's median are straggler steps; their fraction is
  ``straggler_probability``, the median of their excess ``straggler_median``, and its log
  variance less the body's is ``straggler_sigma²``;
* body (the other steps): the covariance of two ranks of one node at one step is the node
  variance (less that of two ranks on different nodes: a component shared by all ranks, which
  the model does not have and the report shows apart); the pooled variance less the node
  variance is the rank variance; the lag-1 autocovariance over the variance is the AR(1)
  coefficient, with Kendall's bias correction ``(K·r + 1) / (K - 3)`` for a mean removed from
  ``K`` steps (Kendall, "Note on bias in the estimation of autocorrelation", Biometrika 41,
  1954); variances are divided by the share of an AR(1) variance a removed mean leaves.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np

from ..argtypes import int_between
from ..platform.noise import NoiseModel, NoiseSpec
from .step_times import MIN_STEPS, NOISE_FORMATS, StepTimes, read_step_times

__all__ = ["noise_statistics", "NoiseFit", "report_lines", "simulated_statistics", "add_noise_parser"]

QUANTILES = (0.01, 0.1, 0.5, 0.9, 0.99, 0.999)


# -- statistics and the fit -----------------------------------------------------------------

def noise_statistics(times_s: np.ndarray, nodes: np.ndarray, batches: np.ndarray | None = None, *,
                     threshold: float = 1.5) -> dict[str, Any]:
    """The moments the fit uses, of a (ranks, steps) array of positive times (see module doc)."""
    y = np.log(times_s)
    centred = y - _group_stat(y, batches, np.median)
    tail = centred > math.log(threshold)
    body = np.where(tail, np.nan, y)
    mean = _group_stat(body, batches, np.nanmean)
    e = body - mean
    valid = ~np.isnan(e)
    z = np.where(valid, e, 0.0)
    count = valid.sum()
    variance = float((z * z).sum() / count)
    within, across = _pair_covariances(z, valid, nodes)
    lag = valid[:, 1:] & valid[:, :-1]
    lag1 = float((z[:, 1:] * z[:, :-1])[lag].sum() / max(lag.sum(), 1) / variance) if variance > 0 else 0.0
    excess = (y - mean)[tail]
    rank_means = mean.mean(axis=1)
    return {"ranks": y.shape[0], "steps": y.shape[1], "nodes": int(len(np.unique(nodes))),
            "variance": variance, "node_covariance": within, "shared_covariance": across, "lag1": lag1,
            "tail_fraction": float(tail.mean()), "tail_steps": int(tail.sum()),
            "tail_log_median": float(np.median(excess)) if len(excess) else None,
            "tail_log_variance": float(np.var(excess)) if len(excess) > 1 else None,
            "static_rank_sd": float(np.std(rank_means)) if len(rank_means) > 1 else 0.0,
            "quantiles": {q: float(v) for q, v in zip(QUANTILES, np.quantile(np.exp(centred), QUANTILES))},
            "max_factor": float(np.exp(centred).max())}


def _group_stat(values: np.ndarray, batches: np.ndarray | None, stat) -> np.ndarray:
    """``stat`` of each rank's values (of each batch size of the rank, where recorded), spread over its entries."""
    out = np.empty_like(values)
    for i, row in enumerate(values):
        sizes = batches[i] if batches is not None else np.zeros(len(row))
        for size in np.unique(sizes):
            mask = sizes == size
            chosen = row[mask]
            out[i, mask] = stat(chosen) if np.isfinite(chosen).any() else 0.0
    return out


def _pair_covariances(z: np.ndarray, valid: np.ndarray, nodes: np.ndarray) -> tuple[float | None, float | None]:
    """Mean product of two ranks' deviations at one step: same node, and different nodes (None: no such pair)."""
    total_sum, total_sq, total_n = z.sum(axis=0), (z * z).sum(axis=0), valid.sum(axis=0)
    within_sum = within_pairs = 0.0
    for node in np.unique(nodes):
        rows = nodes == node
        s, q, n = z[rows].sum(axis=0), (z[rows] ** 2).sum(axis=0), valid[rows].sum(axis=0)
        within_sum += float(((s * s - q) / 2).sum())
        within_pairs += float((n * (n - 1) / 2).sum())
    all_sum = float(((total_sum ** 2 - total_sq) / 2).sum())
    all_pairs = float((total_n * (total_n - 1) / 2).sum())
    across_pairs = all_pairs - within_pairs
    return (within_sum / within_pairs if within_pairs else None,
            (all_sum - within_sum) / across_pairs if across_pairs else None)


def _kept_share(rho: float, steps: int) -> float:
    """E[variance about the sample mean] / variance, for an AR(1) of coefficient ``rho`` over ``steps`` steps."""
    h = np.arange(1, steps)
    return 1.0 - (1.0 + 2.0 * float(((1.0 - h / steps) * rho ** h).sum())) / steps


class NoiseFit:
    """The method-of-moments fit of :class:`NoiseSpec` to step times (scikit-learn style)."""

    def __init__(self, threshold: float = 1.5):
        self.threshold = threshold

    def fit(self, times: StepTimes) -> "NoiseFit":
        stats = noise_statistics(times.times_s, times.nodes, times.batches, threshold=self.threshold)
        k, notes = stats["steps"], []
        raw = stats["lag1"]
        rho = (k * raw + 1.0) / (k - 3.0)
        if rho < 0 or rho > 0.99:
            notes.append(f"lag-1 autocorrelation {rho:.3f} clipped to [0, 0.99]"
                         + (" (a drift over the run, not stationary noise?)" if rho > 0.99 else ""))
        rho = min(max(rho, 0.0), 0.99)
        share = _kept_share(rho, k)
        total = stats["variance"] / share
        shared = max(stats["shared_covariance"] or 0.0, 0.0) / share  # by all ranks: not in the model
        node = 0.0
        if stats["node_covariance"] is None:
            notes.append("no node holds two ranks (or the input does not say which node a rank is on: "
                         "--ranks-per-node): the node component is not separable and is fitted as 0")
        else:
            node = stats["node_covariance"] / share - shared
        if shared > 0.1 * total:
            notes.append(f"{shared / total:.0%} of the variance is shared by ranks on different nodes at the same "
                         "step (a global effect: data, a changing batch, the file system); the model has no such "
                         "component and leaves it out")
        if node < 0:
            notes.append("node covariance below that of ranks on different nodes: node_sigma fitted as 0")
            node = 0.0
        rank = max(total - node - shared, 0.0)
        node, rank = (0.0 if v <= 1e-9 * total else v for v in (node, rank))  # rounding left of a difference
        self.node_sigma_, self.rank_sigma_, self.correlation_ = math.sqrt(node), math.sqrt(rank), rho
        self.straggler_probability_ = stats["tail_fraction"]
        self.straggler_median_, self.straggler_sigma_ = 1.0, 0.0
        if stats["tail_steps"]:
            self.straggler_median_ = max(1.0, math.exp(stats["tail_log_median"]))
            if stats["tail_steps"] >= 3:
                self.straggler_sigma_ = math.sqrt(max(stats["tail_log_variance"] - total, 0.0))
            else:
                notes.append(f"{stats['tail_steps']} straggler step(s): too few to fit straggler_sigma (fitted as 0)")
            body_above = 0.5 * math.erfc(math.log(self.threshold) / math.sqrt(2 * total)) if total > 0 else 0.0
            if body_above * (1 - self.straggler_probability_) > 0.1 * self.straggler_probability_:
                notes.append(f"{body_above:.2%} of ordinary steps are expected above the threshold: the tail mixes "
                             "with the body; raise --threshold")
        self.statistics_, self.notes_ = stats, notes
        return self

    def spec(self, source: str) -> NoiseSpec:
        """The fitted values as a scenario's ``compute.noise`` (clipped to the allowed ranges)."""
        return NoiseSpec(node_sigma=min(self.node_sigma_, 2.0), rank_sigma=min(self.rank_sigma_, 2.0),
                         correlation=self.correlation_, straggler_probability=self.straggler_probability_,
                         straggler_median=min(self.straggler_median_, 1000.0),
                         straggler_sigma=min(self.straggler_sigma_, 2.0), source=source)


# -- the report -----------------------------------------------------------------------------

def _row(label: str, measured: float | None, simulated: float | None, unit: str = "") -> str:
    def fmt(x):
        return "-" if x is None else f"{x:.4g}{unit}"
    return f"  {label:<44} {fmt(measured):>12} {fmt(simulated):>12}"


def report_lines(times: StepTimes, fit: NoiseFit, simulated: dict[str, Any], spec: NoiseSpec) -> list[str]:
    """The residual report: each measured statistic beside the fitted model's on the same layout."""
    m = fit.statistics_
    lines = [f"{times.where}: {m['ranks']} ranks on {m['nodes']} node(s)"
             f"{'' if times.nodes_known else ' (nodes unknown: one per rank)'}, {m['steps']} steps each",
             f"  {'statistic (log-times, rank means removed)':<44} {'measured':>12} {'simulated':>12}"]
    for label, key in (("variance of the steps (body)", "variance"),
                       ("covariance, two ranks of one node", "node_covariance"),
                       ("covariance, ranks on two nodes (not modelled)", "shared_covariance"),
                       ("lag-1 autocorrelation", "lag1"), ("straggler fraction", "tail_fraction")):
        lines.append(_row(label, m[key], simulated[key]))
    med = [None if s["tail_log_median"] is None else math.exp(s["tail_log_median"]) for s in (m, simulated)]
    lines.append(_row("straggler median slow-down", *med, unit="x"))
    lines.append(_row("spread of static rank speeds (log-sd, not noise)", m["static_rank_sd"],
                      simulated["static_rank_sd"]))
    lines.append("  per-step factor (time / its rank's median), quantiles:")
    for q in QUANTILES:
        lines.append(_row(f"  q{q:g}", m["quantiles"][q], simulated["quantiles"][q]))
    lines.append(_row("  max", m["max_factor"], simulated["max_factor"]))
    lines.append("fitted compute.noise: " + ", ".join(
        f"{k}={v:.4g}" for k, v in spec.model_dump(exclude={"source"}).items()))
    lines += [f"note: {n}" for n in [*times.notes, *fit.notes_]]
    return lines


def simulated_statistics(times: StepTimes, spec: NoiseSpec, *, seed: int, threshold: float) -> dict[str, Any]:
    """The fit's statistics of the model drawn on the input's ranks, nodes and steps."""
    factors = NoiseModel(spec, seed, times.nodes).matrix(len(times.steps))
    return noise_statistics(factors, times.nodes, threshold=threshold)


def _scores(measured: dict, simulated: dict) -> dict[str, float]:
    logs = [abs(math.log(simulated["quantiles"][q] / measured["quantiles"][q])) for q in QUANTILES]
    return {"variance_ratio": simulated["variance"] / measured["variance"] if measured["variance"] else float("nan"),
            "lag1_difference": simulated["lag1"] - measured["lag1"],
            "tail_fraction_difference": simulated["tail_fraction"] - measured["tail_fraction"],
            "max_quantile_log_error": max(logs)}


# -- the command ------------------------------------------------------------------------------

def _threshold(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and 1.0 < value <= 1000.0):
        raise argparse.ArgumentTypeError(f"expected a factor above 1 (e.g. 1.5), got {text!r}")
    return value


def _cmd_noise(args: argparse.Namespace) -> int:
    import shlex

    import yaml

    from .provenance import calibrate_command
    from .provenance import check_output, input_record, make_provenance, rounded, write_yaml

    if args.out:
        check_output(args.out)
    times = read_step_times(args.files, args.format, ranks_per_node=args.ranks_per_node, skip=args.skip,
                            steps=args.steps)
    fit = NoiseFit(threshold=args.threshold).fit(times)
    records = [input_record(p) for p in args.files]
    source = "simdist calibrate noise: " + "; ".join(f"{r['path']} (sha256 {r['sha256']})" for r in records)
    spec = fit.spec(source[:2000])
    simulated = simulated_statistics(times, spec, seed=args.seed, threshold=args.threshold)
    print("\n".join(report_lines(times, fit, simulated, spec)))
    if args.out:
        command = calibrate_command(args, "noise", positional=("files",))
        noise = rounded(spec.model_dump(mode="json"))
        provenance = make_provenance(command, args.files, _scores(fit.statistics_, simulated),
                                     measured=_printable(fit.statistics_), simulated=_printable(simulated),
                                     notes=[*times.notes, *fit.notes_])
        write_yaml(args.out, {"compute": {"noise": noise}, "provenance": provenance},
                   "Scenario compute overlay fitted by simdist calibrate noise: copy its compute.noise block into a\n"
                   "scenario's compute section, or pass it with --set compute.noise='{...}' (the line printed\n"
                   f"when it was written). Generated by: {command}\nDo not hand-edit: re-run the command.")
        flow = yaml.safe_dump(noise, default_flow_style=True, width=float("inf"), sort_keys=False).strip()
        print(f"\nwrote {args.out}\nuse it: --set {shlex.quote('compute.noise=' + flow)}")
    return 0


def _printable(stats: dict) -> dict:
    return {k: ({f"q{q:g}": v for q, v in value.items()} if k == "quantiles" else value) for k, value in stats.items()}


def add_noise_parser(sub) -> argparse.ArgumentParser:
    """Add ``calibrate noise`` to the ``calibrate`` sub-commands."""
    noise = sub.add_parser(
        "noise", help="fit the correlated compute-noise model from per-step times; write compute.noise",
        description="Fit the compute-noise model (per-node, per-rank and straggler factors, AR(1) in time) to "
                    "one run's per-step times by the method of moments on log-times; print each measured "
                    "statistic beside the fitted model's; write a scenario compute overlay (compute.noise with "
                    "provenance). docs/noise.md explains the model and the fit.")
    noise.add_argument("files", nargs="+", help="one run's step times: simdist trace.json or steps.csv, PyTorch "
                                                "profiler traces (one per rank), or a CSV rank,step,time_s[,node]")
    noise.add_argument("--format", default="auto", choices=("auto", *NOISE_FORMATS),
                       help="input format (default auto: detected per file)")
    noise.add_argument("--out", help="scenario compute overlay to write (compute.noise and provenance)")
    noise.add_argument("--ranks-per-node", type=int_between(1), default=None,
                       help="ranks r..r+N-1 share a node, for inputs that do not say (steps.csv, PyTorch traces, "
                            "a CSV without node)")
    noise.add_argument("--skip", type=int_between(0), default=0,
                       help="leave out each rank's first N steps (warm-up; default 0)")
    noise.add_argument("--steps", type=int_between(MIN_STEPS), default=None,
                       help="fit only the first N steps of every rank (after --skip)")
    noise.add_argument("--threshold", type=_threshold, default=1.5,
                       help="a step slower than this times its rank's median is a straggler step (default 1.5)")
    noise.add_argument("--seed", type=int_between(0), default=0, help="seed of the simulated comparison (default 0)")
    noise.set_defaults(func=_cmd_noise)
    return noise
