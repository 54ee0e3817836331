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

This module times the steps and runs the command; its parts live beside it, and their names
are re-exported here: what is timed and with which clock (:mod:`.timed_steps`), the fitted
line and its report (:mod:`.profile_fit`), the profile file (:mod:`.profile_file`), the
scenario's model (:mod:`.compute_scenario`) and the checks of the arguments
(:mod:`.compute_checks`). The GPU step stays here: every tensor it moves goes through
:func:`_place`, as do the measured ``ops``.
"""


from __future__ import annotations

import argparse
import contextlib
import copy
import math
import re
import statistics
import sys
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import InputError
from ..training.optim import OptimizerConfig
from ..training.replica import Replica
from ..training.workload import Workload, build_workload
from .compute_checks import allocator_setting, check_slope, checked_options
from .compute_options import DEFAULT_BATCH_SIZES, STATISTICS, ZOO, add_arguments
from .compute_scenario import ScenarioTarget, plan_scenario, scenario_block
from .op_profile import measure_ops, measure_scenario_ops
from .profile_file import (cpu_model_name, describe_workload, profile_document, profile_key,
                           write_profile)
from .profile_fit import fit_linear, fit_report, misfit_ranges, report_lines
from .provenance import check_output, command_line
from .timed_steps import TIMERS, cpu_training_step, resolve_device, steady_allocator, training_batch

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


def _place(obj, device: str):
    """``obj`` (tensor or module) moved to ``device`` (one place to stub out in tests without a GPU)."""
    return obj.to(device)


# -- one step on the device ------------------------------------------------------------

def _cuda_step(workload: Workload, batch_size: int, device: str = "cuda") -> Callable[[], None]:
    """The same arithmetic on the GPU: module forward, autograd, flat-vector optimizer step."""
    x, y = (_place(t, device) for t in training_batch(workload, batch_size))
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


def _stepper(workload: Workload, batch_size: int, device: str) -> Callable[[], None]:
    return cpu_training_step(workload, batch_size) if device == "cpu" else _cuda_step(workload, batch_size, device)


def time_step(workload: Workload, batch_size: int, repeats: int = 30, warmup: int = 5, device: str = "cpu") -> float:
    """Median seconds of one forward + backward + optimizer step at ``batch_size``."""
    step, timer = _stepper(workload, batch_size, device), TIMERS[device][1]
    for _ in range(warmup):
        step()
    return statistics.median(timer(step, repeats))



@contextlib.contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """torch's intra-op threads set to ``threads`` inside the block, restored after."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


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
    timer_name, timer = TIMERS[device]
    with torch_threads(threads):
        steps = [_stepper(workload, int(b), device) for b in batch_sizes]
        for step in steps:
            for _ in range(warmup):
                step()
        rounds = max(1, min(rounds, repeats))
        per_round = math.ceil(repeats / rounds)
        samples: list[list[float]] = [[] for _ in steps]
        in_order: list[tuple[int, float]] = []  # (batch, seconds) of every timed step, as timed
        for _ in range(rounds):
            for i, step in enumerate(steps):
                for _ in range(min(warmup, 2)):
                    step()
                timed = timer(step, per_round)
                samples[i] += timed
                in_order += [(int(batch_sizes[i]), float(t)) for t in timed]
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
        # every timed step in the order it ran: what ``simdist calibrate noise`` fits the host's step-to-step noise to
        "timed_steps": {"batch": [b for b, _ in in_order], "seconds": [float(f"{t:.6g}") for _, t in in_order]},
    }


def measure_zoo(batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES, repeats: int = 100, warmup: int = 5,
                threads: int = 1, models: Sequence[str] = tuple(ZOO), seed: int = 0, device: str = "cpu",
                rounds: int = 10, statistic: str = "median") -> dict[str, dict]:
    """Profiles of the zoo's models (default configs) on their calibration datasets."""
    profiles = {}
    for name in models:
        dataset, options = ZOO[name]
        workload = build_workload(name, options, dataset, {}, OptimizerConfig(), seed)
        profile = measure_profile(workload, batch_sizes, repeats, warmup, threads, device, rounds, statistic)
        profiles[name] = describe_workload(profile, workload, dataset, None)
    return profiles


# -- a scenario's own model -----------------------------------------------------------------

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
    return {w.model.name: describe_workload(profile, target.workload, w.dataset.name, w.dataset.options or None)}


# -- python -m ----------------------------------------------------------------------------

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
    allocator = allocator_setting(args)
    profiles = measure_zoo(batch_sizes, args.repeats, args.warmup, args.threads, models, device=device,
                           rounds=args.rounds, statistic=args.statistic)
    if require_slope:
        check_slope(profiles, batch_sizes)
    key = profile_key(device)
    out = Path(args.out) if args.out else Path("calibration") / "profiles" / f"{key}.yaml"
    with torch_threads(args.threads):
        ops = measure_ops(device=device, place=_place)
    document = profile_document(profiles, args.threads, key, torch_device=device, command=command,
                                allocator=allocator, ops=ops)
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
    allocator = allocator_setting(args)
    profiles = measure_scenario(target, args.repeats, args.warmup, args.threads, device, args.rounds, args.statistic)
    if require_slope:
        check_slope(profiles, target.batch_sizes)
    batch = target.scenario.workload.batch_size
    step = (_stepper(target.workload, batch, device), f"a training step of the scenario's model at batch {batch}")
    with torch_threads(args.threads):  # the profile's threads, as its steps were timed
        ops, ops_basis = measure_scenario_ops(target.workload, batch, device, place=_place, between=step)
    document = profile_document(profiles, args.threads, target.profile_device, torch_device=device, command=command,
                                allocator=allocator, scenario=scenario_block(target), inputs=[target.path],
                                ops=ops, ops_basis=ops_basis)
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
