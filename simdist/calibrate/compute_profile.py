"""Measure a compute profile ``t = t0 + t1 * batch`` with real kernels on this machine.

The simulator charges each forward/backward/optimizer step ``t0_s + t1_s * batch`` seconds
of virtual time (ARCHITECTURE.md, "Compute model"). This module times the real step of a
:class:`~simdist.training.workload.Workload` at several batch sizes (median of repeats,
after warm-up, with a fixed number of torch threads), fits the line by least squares and
reports how well it fits (r2, residual per batch size).

Run ``python -m simdist.calibrate.compute_profile --out calibration/profiles/host-cpu.yaml``
to measure the zoo's ``mlp`` and ``cnn`` on the digits dataset and write the profile file.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Sequence

import numpy as np
import torch
import yaml

from ..seeding import numpy_stream
from ..training.optim import OptimizerConfig
from ..training.workload import Workload, build_workload

__all__ = [
    "DEFAULT_BATCH_SIZES",
    "fit_linear",
    "time_step",
    "measure_profile",
    "measure_zoo",
    "profile_document",
    "write_profile",
    "main",
]

DEFAULT_BATCH_SIZES = (8, 16, 32, 64, 128, 256, 400, 512)
ZOO = MappingProxyType({"mlp": ("digits", {}), "cnn": ("digits", {})})  # model → (dataset, model options)


def fit_linear(batch_sizes: Sequence[float], times_s: Sequence[float]) -> dict:
    """Least-squares ``t = t0 + t1 * batch``: ``t0_s``, ``t1_s``, ``r2`` and ``residuals_s``."""
    b = np.asarray(batch_sizes, dtype=float)
    t = np.asarray(times_s, dtype=float)
    if len(b) < 2 or np.ptp(b) == 0:
        raise ValueError("fitting t0 + t1*batch needs at least two different batch sizes")
    t1, t0 = np.polyfit(b, t, 1)
    residuals = t - (t0 + t1 * b)
    total = float(np.sum((t - t.mean()) ** 2))
    r2 = 1.0 - float(np.sum(residuals**2)) / total if total > 0 else 1.0
    return {"t0_s": float(t0), "t1_s": float(t1), "r2": r2, "residuals_s": [float(r) for r in residuals]}


def _batch(workload: Workload, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed training batch of ``batch_size`` samples (drawn with replacement if the set is smaller)."""
    n = workload.dataset.train_size
    rng = numpy_stream(workload.seed, f"calibrate/batch{batch_size}")
    index = torch.from_numpy(rng.choice(n, size=batch_size, replace=batch_size > n).astype(np.int64))
    return workload.dataset.train_x[index], workload.dataset.train_y[index]


def _stepper(workload: Workload, batch_size: int) -> Callable[[], float]:
    """A function doing one forward + backward + optimizer step at ``batch_size``; returns its wall seconds."""
    x, y = _batch(workload, batch_size)
    replica = workload.new_replica()

    def step() -> float:
        start = time.perf_counter()
        grad, _loss = workload.evaluator.gradient(replica.params, x, y)
        replica.apply_gradient(grad)
        return time.perf_counter() - start

    return step


def _median_time(step: Callable[[], float], repeats: int, warmup: int) -> float:
    for _ in range(warmup):
        step()
    return statistics.median(step() for _ in range(repeats))


def time_step(workload: Workload, batch_size: int, repeats: int = 30, warmup: int = 5) -> float:
    """Median wall seconds of one forward + backward + optimizer step at ``batch_size``."""
    return _median_time(_stepper(workload, batch_size), repeats, warmup)


def measure_profile(workload: Workload, batch_sizes: Sequence[int], repeats: int = 30, warmup: int = 5,
                    threads: int = 1) -> dict:
    """Time ``workload``'s step at each batch size with ``threads`` torch threads and fit the line.

    A first sweep warms every size up (allocator, kernel caches); then each size is timed
    in a block of its own, warm-up again first, as training repeats one size step after step.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        steps = [_stepper(workload, int(b)) for b in batch_sizes]
        for step in steps:
            for _ in range(warmup):
                step()
        medians = [_median_time(step, repeats, warmup) for step in steps]
    finally:
        torch.set_num_threads(previous)
    fit = fit_linear(batch_sizes, medians)
    return {
        "t0_s": fit["t0_s"],
        "t1_s": fit["t1_s"],
        "forward_flops_per_sample": workload.forward_flops_per_sample,
        "r2": fit["r2"],
        "batch_sizes": [int(b) for b in batch_sizes],
        "median_s": medians,
        "residuals_s": fit["residuals_s"],
        "threads": threads,
    }


def measure_zoo(batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES, repeats: int = 30, warmup: int = 5,
                threads: int = 1, models: Sequence[str] = tuple(ZOO), seed: int = 0) -> dict[str, dict]:
    """Profiles of the zoo's models (default configs) on their calibration datasets."""
    profiles = {}
    for name in models:
        dataset, options = ZOO[name]
        workload = build_workload(name, options, dataset, {}, OptimizerConfig(), seed)
        profile = measure_profile(workload, batch_sizes, repeats, warmup, threads)
        profile.pop("threads")
        profile["dataset"] = dataset
        profile["options"] = workload.model_config.model_dump(mode="json")
        profiles[name] = profile
    return profiles


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


_KEY_ORDER = ("t0_s", "t1_s", "forward_flops_per_sample", "r2", "dataset", "options",
              "batch_sizes", "median_s", "residuals_s")


def profile_document(profiles: dict[str, dict], threads: int, device: str = "host-cpu") -> dict:
    """The profile file's content (a plain dict, keys in file order)."""
    return {
        "device": device,
        "description": f"{_cpu_model()} ({os.cpu_count()} logical CPUs), {threads} torch thread(s)",
        "measured_at": _dt.date.today().isoformat(),
        "torch_version": str(torch.__version__),
        "threads": threads,
        "models": {
            name: {key: profile[key] for key in _KEY_ORDER if key in profile} for name, profile in profiles.items()
        },
    }


class _FlowDict(dict):
    """A mapping written inline (``{hidden: [128]}``)."""


class _ProfileDumper(yaml.SafeDumper):
    """SafeDumper that writes :class:`_FlowDict` inline and floats to 6 significant digits."""


_ProfileDumper.add_representer(
    _FlowDict, lambda d, data: d.represent_mapping("tag:yaml.org,2002:map", data, flow_style=True)
)
_ProfileDumper.add_representer(float, lambda d, x: d.represent_float(float(f"{x:.6g}")))


def _readable(document: dict) -> dict:
    models = {name: {**p, "options": _FlowDict(p["options"])} if "options" in p else p
              for name, p in document.get("models", {}).items()}
    return {**document, "models": models}


def write_profile(path: str | os.PathLike, document: dict, command: str) -> None:
    """Write ``document`` as YAML with a provenance header, atomically (temp file + rename)."""
    text = yaml.dump(_readable(document), Dumper=_ProfileDumper, sort_keys=False, default_flow_style=None, width=120)
    lines = [
        line + "  # seconds per sample" if line.lstrip().startswith("t1_s:") else line for line in text.splitlines()
    ]
    header = ("# Compute profile measured with real kernels on this machine. "
              f"Generated by: {command}; do not hand-edit.\n")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        handle.write(header + "\n".join(lines) + "\n")
    os.replace(tmp, path)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m simdist.calibrate.compute_profile",
        description="Measure t = t0 + t1*batch of the zoo's models on this machine and write a profile YAML.",
    )
    parser.add_argument("--out", required=True, help="profile file to write, e.g. calibration/profiles/host-cpu.yaml")
    parser.add_argument("--threads", type=int, default=1, help="torch threads while timing (default 1)")
    parser.add_argument(
        "--repeats", type=int, default=30, help="timed steps per batch size; the median is kept (default 30)"
    )
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps before timing (default 5)")
    parser.add_argument("--batch-sizes", default=",".join(map(str, DEFAULT_BATCH_SIZES)),
                        help="comma-separated batch sizes (default %(default)s)")
    parser.add_argument("--models", default=",".join(ZOO), help="comma-separated zoo models (default %(default)s)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
        models = [m for m in args.models.split(",") if m]
        unknown = [m for m in models if m not in ZOO]
        if unknown or args.threads < 1 or args.repeats < 1 or args.warmup < 0 or min(batch_sizes) < 1:
            raise ValueError(
                f"models must be among {', '.join(ZOO)}; threads, repeats and batch sizes must be positive"
            )
    except ValueError as err:
        print(f"compute_profile: {err}", file=sys.stderr)
        return 2
    profiles = measure_zoo(batch_sizes, args.repeats, args.warmup, args.threads, models)
    command = "python -m simdist.calibrate.compute_profile " + " ".join(sys.argv[1:] if argv is None else argv)
    write_profile(args.out, profile_document(profiles, args.threads), command.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
