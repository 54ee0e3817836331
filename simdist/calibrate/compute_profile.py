"""Measure a compute profile ``t = t0 + t1 * batch`` with real kernels on this machine.

The simulator charges each forward/backward/optimizer step ``t0_s + t1_s * batch`` seconds
of virtual time (ARCHITECTURE.md, "Compute model"). This module times the real step of a
:class:`~simdist.training.workload.Workload` at several batch sizes and fits the line
(:class:`~simdist.fitting.LinearTimeFit`, relative least squares: every batch
size counts by its error in percent), reporting R² and the residual per batch size.

Devices:

* ``cpu`` — the step the simulator's ``measured`` mode runs (the workload's gradient
  evaluator + its optimizer on the flat parameter vector), with a fixed number of torch
  threads, timed with ``time.perf_counter``;
* ``cuda`` — the same arithmetic on the GPU (module forward, autograd, the flat-vector
  optimizer step), timed with ``torch.cuda.Event`` pairs read after ``torch.cuda.synchronize``
  (kernels are asynchronous; host clocks would time the launches).

Timing: every size is warmed up first; then ``rounds`` rounds visit every size in turn (a
short re-warm, then ``repeats / rounds`` timed steps), so a slow spell of the machine hits
all sizes alike. The median of a size's samples is kept (and fitted, unless ``statistic``
says ``p25`` or ``min``), with its interquartile range as the spread. By default glibc is
kept from returning the step's buffers to the OS between steps (:func:`steady_allocator`):
otherwise every step page-faults them in again and times turn bimodal.

``simdist calibrate compute --out calibration/profiles/host-cpu.yaml`` (or ``python -m
simdist.calibrate.compute_profile --out ...``) measures the zoo's ``mlp`` and ``cnn`` on the
digits dataset and writes the profile with the device description, library versions, date
and provenance.

``--scenario S.yaml`` measures exactly the scenario's model instead (:func:`plan_scenario`,
:func:`measure_scenario`): its name and options, its dataset's input shape (random values of
that shape for datasets that hold none), its optimizer and seed, at the batch sizes its
algorithm runs and a spread around them
(:func:`~simdist.calibrate.compute_options.spread_batch_sizes`), under the model name and
profile key the simulator looks the scenario up by (:class:`~simdist.platform.compute.ComputeModel`:
``(device kind's profile_device, workload.model.name)``). Listed under the scenario's
``compute.profiles``, the entry overrides the shipped one, and its FLOPs equal the model's, so
it is used unscaled.

Every fit reports the relative error of the line at each measured batch size and the batch
ranges it misses by more than :data:`~simdist.calibrate.compute_options.FIT_TOLERANCE`
(:func:`fit_report`).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import os
import platform
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import InputError
from ..seeding import numpy_stream
from ..training.optim import OptimizerConfig
from ..training.replica import Replica
from ..training.workload import Workload, build_workload
from .compute_options import (DEFAULT_BATCH_SIZES, FIT_TOLERANCE, MIN_FIT_SIZES, STATISTICS, ZOO, add_arguments,
                              scenario_batch_range, spread_batch_sizes)
from .op_profile import measure_ops
from ..fitting import LinearTimeFit
from .provenance import check_output, command_line, library_versions, make_provenance, write_yaml

if TYPE_CHECKING:
    from ..scenario import Scenario

__all__ = [
    "DEFAULT_BATCH_SIZES",
    "ZOO",
    "STATISTICS",
    "fit_linear",
    "resolve_device",
    "steady_allocator",
    "cpu_model_name",
    "cpu_training_step",
    "time_step",
    "measure_profile",
    "measure_zoo",
    "ScenarioTarget",
    "plan_scenario",
    "measure_scenario",
    "misfit_ranges",
    "fit_report",
    "report_lines",
    "profile_key",
    "profile_document",
    "write_profile",
    "main",
]

_LOSSES = MappingProxyType({"cross_entropy": F.cross_entropy})


def fit_linear(batch_sizes: Sequence[float], times_s: Sequence[float], weighting: str = "relative") -> dict:
    """``t = t0 + t1 * batch``: ``t0_s``, ``t1_s``, ``r2``, ``residuals_s`` (see :class:`LinearTimeFit`)."""
    if len(batch_sizes) < 2 or np.ptp(np.asarray(batch_sizes, dtype=float)) == 0:
        raise ValueError("fitting t0 + t1*batch needs at least two different batch sizes")
    fit = LinearTimeFit(weighting).fit(batch_sizes, times_s)
    return {"t0_s": fit.t0_s_, "t1_s": fit.t1_s_, "r2": fit.r2_, "residuals_s": [float(r) for r in fit.residuals_s_],
            "relative_errors": [float(e) for e in fit.relative_errors_],
            "max_relative_error": float(np.max(np.abs(fit.relative_errors_)))}


def resolve_device(device: str) -> str:
    """``"cpu"`` or ``"cuda"`` (``"auto"``: CUDA when torch sees a GPU); ValueError on anything else."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but torch.cuda.is_available() is False on this machine")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu, cuda or auto, got {device!r}")
    return device


def _batch(workload: Workload, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed training batch of ``batch_size`` samples (drawn with replacement if the set is smaller).

    A dataset of sizes without values (``imagenet-shape``) gives seeded random features and
    labels of its shapes: the step's time does not depend on the values.
    """
    n = workload.dataset.train_size
    rng = numpy_stream(workload.seed, f"calibrate/batch{batch_size}")
    if workload.dataset.shape_only:
        generator = torch.Generator().manual_seed(int(rng.integers(2**62)))
        x = torch.randn((batch_size, *workload.dataset.input_shape), generator=generator)
        return x, torch.randint(workload.dataset.num_classes, (batch_size,), generator=generator)
    index = torch.from_numpy(rng.choice(n, size=batch_size, replace=batch_size > n).astype(np.int64))
    return workload.dataset.train_x[index], workload.dataset.train_y[index]


def steady_allocator() -> bool:
    """Stop glibc from handing large buffers back to the OS between steps; True if applied.

    By default glibc serves big allocations with fresh ``mmap``s and trims the heap top on
    free, so every step page-faults its activation buffers in again (hundreds of faults per
    cnn step at batch 512 here) and step times turn bimodal with the allocator's state.
    Raising ``M_MMAP_THRESHOLD`` and ``M_TRIM_THRESHOLD`` (as jemalloc/tcmalloc setups do in
    effect) keeps the buffers mapped: steady-state times, reproducible. Process-wide; other
    C libraries are left alone (False).
    """
    import ctypes
    import ctypes.util

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(mallopt(m_mmap_threshold, 1 << 30)) and bool(mallopt(m_trim_threshold, 1 << 30))


def _place(obj, device: str):
    """``obj`` (tensor or module) moved to ``device`` (one place to stub out in tests without a GPU)."""
    return obj.to(device)


# -- one step ---------------------------------------------------------------------------

def cpu_training_step(workload: Workload, batch_size: int) -> Callable[[], None]:
    """Forward + backward + optimizer step, exactly as the simulator's measured mode runs it."""
    x, y = _batch(workload, batch_size)
    replica = workload.new_replica()

    def step() -> None:
        grad, _loss = workload.evaluator.gradient(replica.params, x, y)
        replica.apply_gradient(grad)

    return step


def _cuda_step(workload: Workload, batch_size: int, device: str = "cuda") -> Callable[[], None]:
    """The same arithmetic on the GPU: module forward, autograd, flat-vector optimizer step."""
    x, y = (_place(t, device) for t in _batch(workload, batch_size))
    module = _place(copy.deepcopy(workload.module), device).train()
    params = list(module.parameters())
    replica = Replica(_place(workload.initial_params(), device), workload.optimizer)
    loss_fn = _LOSSES[workload.evaluator.loss_name]

    def step() -> None:
        loss = loss_fn(module(x), y)
        grads = torch.autograd.grad(loss, params)
        replica.apply_gradient(torch.cat([g.reshape(-1) for g in grads]))
        torch.nn.utils.vector_to_parameters(replica.params, params)

    return step


# -- timers ----------------------------------------------------------------------------

def _cpu_times(step: Callable[[], None], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        step()
        out.append(time.perf_counter() - start)
    return out


def _cuda_times(step: Callable[[], None], n: int) -> list[float]:
    """Seconds of ``n`` steps from CUDA events, read once the device has finished them."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    torch.cuda.synchronize()
    for start, end in zip(starts, ends):
        start.record()
        step()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) / 1e3 for start, end in zip(starts, ends)]  # elapsed_time is in ms


_TIMERS = MappingProxyType({"cpu": ("perf_counter", _cpu_times), "cuda": ("cuda-events", _cuda_times)})


def _stepper(workload: Workload, batch_size: int, device: str) -> Callable[[], None]:
    return cpu_training_step(workload, batch_size) if device == "cpu" else _cuda_step(workload, batch_size, device)


def time_step(workload: Workload, batch_size: int, repeats: int = 30, warmup: int = 5, device: str = "cpu") -> float:
    """Median seconds of one forward + backward + optimizer step at ``batch_size``."""
    step, timer = _stepper(workload, batch_size, device), _TIMERS[device][1]
    for _ in range(warmup):
        step()
    return statistics.median(timer(step, repeats))




def measure_profile(workload: Workload, batch_sizes: Sequence[int], repeats: int = 100, warmup: int = 5,
                    threads: int = 1, device: str = "cpu", rounds: int = 10, statistic: str = "median") -> dict:
    """Time ``workload``'s step at each batch size and fit ``t0 + t1 * batch`` (see module doc).

    ``statistic`` is what the line is fitted to: the ``median`` of a size's samples
    (default), their 25th percentile ``p25`` or their ``min`` — on a host shared with other
    virtual machines, slow spells only ever add time, and a low quantile reproduces better.
    """
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    device = resolve_device(device)
    timer_name, timer = _TIMERS[device]
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        steps = [_stepper(workload, int(b), device) for b in batch_sizes]
        for step in steps:
            for _ in range(warmup):
                step()
        rounds = max(1, min(rounds, repeats))
        per_round = math.ceil(repeats / rounds)
        samples: list[list[float]] = [[] for _ in steps]
        for _ in range(rounds):
            for i, step in enumerate(steps):
                for _ in range(min(warmup, 2)):
                    step()
                samples[i] += timer(step, per_round)
    finally:
        torch.set_num_threads(previous)
    medians = [float(np.median(s)) for s in samples]
    q25, q75 = [float(np.percentile(s, 25)) for s in samples], [float(np.percentile(s, 75)) for s in samples]
    fitted = [float(np.percentile(s, STATISTICS[statistic])) for s in samples]
    fit = fit_linear(batch_sizes, fitted)
    return {
        "t0_s": fit["t0_s"], "t1_s": fit["t1_s"],
        "forward_flops_per_sample": workload.forward_flops_per_sample,
        "r2": fit["r2"], "max_relative_error": fit["max_relative_error"],
        "batch_sizes": [int(b) for b in batch_sizes], "median_s": medians, "p25_s": q25, "statistic": statistic,
        "statistic_s": fitted,
        "iqr_s": [hi - lo for lo, hi in zip(q25, q75)], "samples": [len(s) for s in samples],
        "residuals_s": fit["residuals_s"], "relative_errors": fit["relative_errors"], "threads": threads,
        "device": device, "timer": timer_name,
    }


def _describe_workload(profile: dict, workload: Workload, dataset: str, dataset_options: dict | None) -> dict:
    """``profile`` with what was timed: dataset, model options, parameter dtype and a hash of the workload."""
    config = workload.model_config
    options = config.model_dump(mode="json") if hasattr(config, "model_dump") else dict(config or {})
    optimizer = workload.optimizer_config.model_dump(mode="json")
    profile.update(dataset=dataset, options=options, dtype=str(workload.initial_params().dtype).removeprefix("torch."))
    identity = {"model": workload.model_name, "options": options, "dataset": dataset, "seed": workload.seed,
                "optimizer": optimizer}
    if dataset_options:  # absent for the zoo, whose hashes stay as they were
        profile.update(dataset_options=dict(dataset_options), input_shape=list(workload.dataset.input_shape),
                       optimizer=optimizer)
        identity["dataset_options"] = dict(dataset_options)
    profile["workload_sha256"] = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return profile


def measure_zoo(batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES, repeats: int = 100, warmup: int = 5,
                threads: int = 1, models: Sequence[str] = tuple(ZOO), seed: int = 0, device: str = "cpu",
                rounds: int = 10, statistic: str = "median") -> dict[str, dict]:
    """Profiles of the zoo's models (default configs) on their calibration datasets."""
    profiles = {}
    for name in models:
        dataset, options = ZOO[name]
        workload = build_workload(name, options, dataset, {}, OptimizerConfig(), seed)
        profile = measure_profile(workload, batch_sizes, repeats, warmup, threads, device, rounds, statistic)
        profiles[name] = _describe_workload(profile, workload, dataset, None)
    return profiles


# -- a scenario's own model -----------------------------------------------------------------

@dataclass(frozen=True)
class ScenarioTarget:
    """What ``--scenario`` measures, checked before any step is timed."""

    path: Path  # the scenario file
    scenario: Scenario  # validated
    workload: Workload  # its model, dataset, optimizer and seed, built
    profile_device: str  # the profile key its ranks look up (the device kind's profile_device)
    batch_sizes: tuple[int, ...]  # timed
    batch_range: tuple[int, int]  # the batches its algorithm runs, smallest and largest
    range_field: str  # where that range comes from


def _scenario_workload(scenario: Scenario, path: Path) -> Workload:
    """The scenario's workload built as the simulator builds it; a failure names the file and field."""
    w = scenario.workload
    try:
        return build_workload(w.model.name, w.model.options, w.dataset.name, w.dataset.options, w.optimizer,
                              scenario.seed, allow_import=w.allow_code_import)
    except InputError as exc:
        raise InputError(exc.message, source=str(path), field=exc.field or "workload.model") from None
    except (RuntimeError, ValueError, TypeError, MemoryError) as exc:  # a factory or torch refusing the shapes
        raise InputError(f"cannot build model {w.model.name!r}: {type(exc).__name__}: {exc}", source=str(path),
                         field="workload.model") from None


def plan_scenario(path: str | os.PathLike, device: str, batch_sizes: Sequence[int] | None = None) -> ScenarioTarget:
    """Load and check the scenario at ``path`` and build its workload (an :class:`InputError` naming
    the file and field on bad input); ``batch_sizes`` replaces the ones derived from the scenario."""
    from ..platform.devices import DEVICE_KINDS
    from ..scenario import load_scenario

    path = Path(path)
    scenario = load_scenario(path)
    kind = scenario.platform.node.device.kind
    wanted, measured = DEVICE_KINDS.get(kind).profile_device, profile_key(device)
    if wanted != measured:
        raise InputError(f"device kind {kind!r} looks up compute profiles under {wanted!r}, but --device "
                         f"{device} measures this machine's {measured!r}; run on such a device or change the kind",
                         source=str(path), field="platform.node.device.kind")
    smallest, largest, field = scenario_batch_range(scenario)
    if batch_sizes is None:
        batch_sizes = spread_batch_sizes(smallest, largest, scenario.workload.batch_size)
    elif len(set(batch_sizes)) < MIN_FIT_SIZES:
        raise InputError(f"with --scenario give at least {MIN_FIT_SIZES} different batch sizes (or none: the "
                         f"scenario's batches {smallest}..{largest} and a spread around them)", source="--batch-sizes")
    workload = _scenario_workload(scenario, path)
    return ScenarioTarget(path, scenario, workload, measured, tuple(sorted(set(batch_sizes))), (smallest, largest),
                          field)


def measure_scenario(target: ScenarioTarget, repeats: int = 100, warmup: int = 5, threads: int = 1,
                     device: str = "cpu", rounds: int = 10, statistic: str = "median") -> dict[str, dict]:
    """``{model name: profile}`` of the scenario's model at ``target.batch_sizes``; a step that fails
    (a model whose forward does not take the dataset's samples, memory) is an :class:`InputError`."""
    w = target.scenario.workload
    try:
        profile = measure_profile(target.workload, target.batch_sizes, repeats, warmup, threads, device, rounds,
                                  statistic)
    except (RuntimeError, MemoryError) as exc:
        raise InputError(f"a training step of model {w.model.name!r} at batch sizes {list(target.batch_sizes)} "
                         f"failed: {type(exc).__name__}: {exc}", source=str(target.path),
                         field="workload.model") from None
    return {w.model.name: _describe_workload(profile, target.workload, w.dataset.name, w.dataset.options or None)}


def _scenario_block(target: ScenarioTarget) -> dict:
    s = target.scenario
    return {"file": target.path.as_posix(), "name": s.name, "model": s.workload.model.name,
            "batch_size": s.workload.batch_size, "batch_range": list(target.batch_range),
            "batch_range_from": target.range_field, "profile_device": target.profile_device}


# -- what a fit leaves out ------------------------------------------------------------------

def misfit_ranges(batch_sizes: Sequence[int], relative_errors: Sequence[float],
                  tolerance: float = FIT_TOLERANCE) -> list[tuple[int, int]]:
    """Runs of consecutive measured batch sizes (sorted) where the line is off by more than ``tolerance``."""
    runs: list[tuple[int, int]] = []
    previous_bad = False
    for batch, error in sorted(zip(batch_sizes, relative_errors)):
        bad = not abs(error) <= tolerance  # a NaN error is a miss too
        if bad and previous_bad:
            runs[-1] = (runs[-1][0], int(batch))
        elif bad:
            runs.append((int(batch), int(batch)))
        previous_bad = bad
    return runs


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def fit_report(name: str, entry: dict, tolerance: float = FIT_TOLERANCE) -> list[str]:
    """Lines showing the fitted line of one profile entry against each measured batch size."""
    from ..units import format_time

    sizes = entry["batch_sizes"]
    measured = entry["statistic_s"] if "statistic_s" in entry else entry["median_s"]  # what the line was fitted to
    errors = entry.get("relative_errors") or [(entry["t0_s"] + entry["t1_s"] * b) / m - 1
                                              for b, m in zip(sizes, measured)]
    lines = [f"{name}: t = {format_time(entry['t0_s'])} + {format_time(entry['t1_s'])} * batch, R2 {entry['r2']:.4f} "
             f"on {len(sizes)} batch sizes ({entry.get('statistic', 'median')} per size); residual per batch size:",
             f"  {'batch':>7} {'measured':>10} {'fitted':>10} {'error':>7}"]
    for batch, time_s, error in zip(sizes, measured, errors):
        fitted = entry["t0_s"] + entry["t1_s"] * batch
        lines.append(f"  {batch:>7} {format_time(time_s):>10} {format_time(fitted):>10} {100 * error:>+6.1f}%")
    misses = misfit_ranges(sizes, errors, tolerance)
    if misses:
        worst = max(range(len(sizes)), key=lambda i: abs(errors[i]) if math.isfinite(errors[i]) else math.inf)
        lines.append(f"  the line cannot fit batch {', '.join(_span(a, b) for a, b in misses)} within "
                     f"{100 * tolerance:g}% (worst {100 * errors[worst]:+.1f}% at batch {sizes[worst]})")
    else:
        lines.append(f"  within {100 * tolerance:g}% at every measured batch size ({_span(min(sizes), max(sizes))})")
    return lines


def report_lines(path: Path, document: dict) -> list[str]:
    """What ``calibrate compute`` prints after writing ``document`` at ``path``: every fit's residuals
    and, for a scenario, how the scenario picks the entry up."""
    lines = [line for name, entry in document["models"].items() for line in fit_report(name, entry)]
    block = document.get("scenario")
    if not block:
        return lines
    scenario = Path(block["file"])
    low, high = block["batch_range"]
    lines.append(f"scenario {scenario}: model {block['model']!r} under profile key {block['profile_device']!r}, "
                 f"batch {low if low == high else f'{low}..{high}'} ({block['batch_range_from']})")
    listed = _listed_profiles(scenario)
    if any(os.path.realpath(p) == os.path.realpath(path) for p in listed):
        lines.append(f"{scenario} lists {path} under compute.profiles: its runs use this entry")
    else:
        relative = Path(os.path.relpath(os.path.realpath(path), os.path.realpath(scenario.parent))).as_posix()
        lines.append(f"to use it, list it in {scenario}: compute: {{profiles: [{relative}]}}")
    return lines


def _listed_profiles(scenario: Path) -> list[Path]:
    """The profile files a scenario lists (paths relative to its folder); none if it cannot be read now."""
    from ..scenario import load_scenario

    try:
        profiles = load_scenario(scenario).compute.profiles
    except InputError:
        return []
    return [scenario.parent / p for p in profiles]


# -- the file ----------------------------------------------------------------------------

def cpu_model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def profile_key(device: str) -> str:
    """The profile's ``device`` key: ``host-cpu``, or the device kind a GPU name denotes (``a100``, ``h100``)."""
    if device == "cpu":
        return "host-cpu"
    name = torch.cuda.get_device_name(0)
    upper = name.upper()
    if "A100" in upper:
        return "a100"
    if "H100" in upper or "H200" in upper:
        return "h100"
    return "cuda-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _description(device: str, threads: int) -> str:
    if device == "cpu":
        return f"{cpu_model_name()} ({os.cpu_count()} logical CPUs), {threads} torch thread(s)"
    return f"{torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda or '?'}), host {cpu_model_name()}"


_KEY_ORDER = ("t0_s", "t1_s", "forward_flops_per_sample", "r2", "max_relative_error", "statistic", "dataset",
              "options", "dataset_options", "input_shape", "dtype", "optimizer", "batch_sizes", "median_s", "p25_s",
              "iqr_s", "samples", "statistic_s", "residuals_s", "relative_errors", "workload_sha256")


def profile_document(profiles: dict[str, dict], threads: int, device: str = "host-cpu", *,
                     torch_device: str = "cpu", command: str | None = None, allocator: str | None = None,
                     scenario: dict | None = None, inputs: Sequence[str | os.PathLike] = (),
                     ops: dict[str, float] | None = None) -> dict:
    """The profile file's content (a plain dict, keys in file order); ``scenario`` says which
    scenario's model it holds, ``inputs`` are the files it was made from (hashed in provenance),
    ``ops`` the measured seconds per parameter of the algorithms' elementwise work
    (:mod:`simdist.calibrate.op_profile`)."""
    timer = next((p.get("timer") for p in profiles.values() if p.get("timer")), _TIMERS[torch_device][0])
    versions = library_versions()
    if torch_device == "cuda":
        versions.update(cuda=str(torch.version.cuda), cudnn=str(torch.backends.cudnn.version()))
    document = {
        "device": device,
        "description": _description(torch_device, threads),
        "measured_at": time.strftime("%Y-%m-%d"),
        "torch_version": str(torch.__version__),
        "threads": threads,
        "timer": timer,
        **({"allocator": allocator} if allocator else {}),
        "versions": versions,
        **({"scenario": scenario} if scenario else {}),
        "models": {name: {key: profile[key] for key in _KEY_ORDER if key in profile}
                   for name, profile in profiles.items()},
        **({"ops": {op: float(f"{s:.4g}") for op, s in ops.items()}} if ops else {}),
    }
    if command is not None:
        document["provenance"] = _provenance(document, command, inputs)
    return document


def _provenance(document: dict, command: str, inputs: Sequence[str | os.PathLike] = ()) -> dict:
    scores = {name: {"r2": m.get("r2"), "max_relative_error": m.get("max_relative_error")}
              for name, m in document["models"].items()}
    workloads = {name: m.get("workload_sha256") for name, m in document["models"].items()}
    return make_provenance(command, inputs, scores, workloads_sha256=workloads,
                           method="timed steps per batch size, round-robin over sizes after warm-up; t0 + t1*batch "
                                  "by relative least squares on each size's statistic (models.*.statistic)")


def write_profile(path: str | os.PathLike, document: dict, command: str) -> None:
    """Write ``document`` as YAML with a do-not-edit header and provenance, atomically."""
    if "provenance" not in document:
        document = {**document, "provenance": _provenance(document, command)}
    write_yaml(path, document, "Compute profile measured with real kernels on this machine "
                               "(t = t0_s + t1_s * batch; t1_s in seconds per sample).\n"
                               f"Generated by: {command}; do not hand-edit.")


# -- python -m ----------------------------------------------------------------------------

def _batch_size_list(text: str) -> list[int]:
    try:
        return [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise ValueError(f"--batch-sizes must be comma-separated integers, got {text!r}") from None


def checked_options(args: argparse.Namespace) -> tuple[list[int], list[str]]:
    """Batch sizes and models of parsed ``args`` (the defaults where not given); ValueError naming what
    is allowed. With ``--scenario`` the models list is empty and the batch sizes are the ones given, if any."""
    scenario = getattr(args, "scenario", None)
    if args.batch_sizes is not None:
        batch_sizes = _batch_size_list(args.batch_sizes)
        if len(set(batch_sizes)) < 2 or min(batch_sizes) < 1:
            raise ValueError("--batch-sizes needs at least two different positive sizes")
    else:
        batch_sizes = [] if scenario else list(DEFAULT_BATCH_SIZES)
    models = [] if scenario else [m for m in (args.models or ",".join(ZOO)).split(",") if m]
    unknown = [m for m in models if m not in ZOO]
    if unknown or not (models or scenario):
        raise ValueError(f"--models must be among {', '.join(ZOO)}, got {args.models!r}")
    if args.threads < 1 or args.repeats < 1 or args.warmup < 0 or args.rounds < 1:
        raise ValueError("--threads, --repeats and --rounds must be positive, --warmup >= 0")
    return batch_sizes, models


def _allocator(args: argparse.Namespace) -> str:
    return "glibc mmap/trim thresholds raised (steady)" if args.allocator == "steady" and steady_allocator() \
        else "default"


def _check_slope(profiles: dict[str, dict], batch_sizes: Sequence[int]) -> None:
    flat = [name for name, p in profiles.items() if not p["t1_s"] > 0]
    if flat:
        raise ValueError(f"the step time of {', '.join(flat)} does not grow with the batch size over "
                         f"{list(batch_sizes)} (t1 = 0); widen --batch-sizes or raise --repeats")


def run(args: argparse.Namespace, command: str, require_slope: bool = True) -> tuple[Path, dict]:
    """Measure and write the profile ``args`` ask for; returns (path, document).

    With ``require_slope`` a model whose time does not grow with the batch (t1 = 0, which
    the simulator's profile loader refuses) is a ValueError instead of a file. With
    ``args.scenario`` the scenario's own model is measured (:func:`plan_scenario`); every
    input is checked, and the output path too, before anything is timed.
    """
    batch_sizes, models = checked_options(args)
    device = resolve_device(args.device)
    if getattr(args, "scenario", None):
        return _run_scenario(args, command, device, batch_sizes or None, require_slope)
    allocator = _allocator(args)
    profiles = measure_zoo(batch_sizes, args.repeats, args.warmup, args.threads, models, device=device,
                           rounds=args.rounds, statistic=args.statistic)
    if require_slope:
        _check_slope(profiles, batch_sizes)
    key = profile_key(device)
    out = Path(args.out) if args.out else Path("calibration") / "profiles" / f"{key}.yaml"
    document = profile_document(profiles, args.threads, key, torch_device=device, command=command,
                                allocator=allocator, ops=measure_ops(device=device, place=_place))
    write_profile(out, document, command)
    return out, document


def _run_scenario(args: argparse.Namespace, command: str, device: str, batch_sizes: list[int] | None,
                  require_slope: bool) -> tuple[Path, dict]:
    """``run`` for ``--scenario``: the default output is kept apart from the shipped profiles, which
    every scenario reads, so that one scenario's model never replaces the zoo's entry for all."""
    target = plan_scenario(args.scenario, device, batch_sizes)
    stem = re.sub(r"[^A-Za-z0-9_.+=-]+", "-", target.path.stem).strip("-") or "scenario"
    out = Path(args.out) if args.out else \
        Path("calibration") / "profiles" / "scenarios" / f"{stem}.{target.profile_device}.yaml"
    check_output(out)
    allocator = _allocator(args)
    profiles = measure_scenario(target, args.repeats, args.warmup, args.threads, device, args.rounds, args.statistic)
    if require_slope:
        _check_slope(profiles, target.batch_sizes)
    document = profile_document(profiles, args.threads, target.profile_device, torch_device=device, command=command,
                                allocator=allocator, scenario=_scenario_block(target), inputs=[target.path],
                                ops=measure_ops(device=device, place=_place))
    write_profile(out, document, command)
    return out, document


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simdist.calibrate.compute_profile",
                                     description="Measure t = t0 + t1*batch of the zoo's models (or of a scenario's "
                                                 "model) and write a profile.")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        checked_options(args)
        resolve_device(args.device)
        path, document = run(args, command_line(argv, prog="python -m simdist.calibrate.compute_profile"),
                             require_slope=False)
    except ValueError as err:  # InputError included: one line, exit 2
        print(f"compute_profile: {err}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    print("\n".join(report_lines(path, document)))
    flat = [name for name, m in document["models"].items() if not m["t1_s"] > 0]
    if flat:
        print(f"compute_profile: warning: t1_s = 0 for {', '.join(flat)} in {path}: the times do not grow with "
              "the batch size; widen --batch-sizes (the simulator refuses such a profile)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
