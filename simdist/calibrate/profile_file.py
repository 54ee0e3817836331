"""The compute profile file: what a measured profile records and how it is written.

A profile (``calibration/profiles/<device>.yaml``) holds, per model, the fitted line and the
samples it was fitted to (:func:`profile_document`, keys in file order), what was timed — the
dataset, model options, parameter dtype and a hash of the workload
(:func:`describe_workload`) — the device under its profile key (:func:`profile_key`: the
key the simulator looks profiles up by), library versions, date and provenance.
:func:`write_profile` writes it atomically with a do-not-edit header.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import torch

from .provenance import library_versions, make_provenance, write_yaml
from .timed_steps import TIMERS

if TYPE_CHECKING:
    from ..training.workload import Workload

__all__ = ["describe_workload", "cpu_model_name", "profile_key", "profile_document", "write_profile"]


def describe_workload(profile: dict, workload: Workload, dataset: str, dataset_options: dict | None) -> dict:
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
              "iqr_s", "samples", "statistic_s", "residuals_s", "relative_errors", "workload_sha256", "timed_steps")


def profile_document(profiles: dict[str, dict], threads: int, device: str = "host-cpu", *,
                     torch_device: str = "cpu", command: str | None = None, allocator: str | None = None,
                     scenario: dict | None = None, inputs: Sequence[str | os.PathLike] = (),
                     ops: dict[str, float] | None = None, ops_basis: dict | None = None) -> dict:
    """The profile file's content (a plain dict, keys in file order); ``scenario`` says which
    scenario's model it holds, ``inputs`` are the files it was made from (hashed in provenance),
    ``ops`` the measured seconds per parameter of the algorithms' elementwise work
    (:mod:`simdist.calibrate.op_profile`), ``ops_basis`` how they were timed when not on the
    default vectors (a scenario's sizes)."""
    timer = next((p.get("timer") for p in profiles.values() if p.get("timer")), TIMERS[torch_device][0])
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
        **({"ops_basis": ops_basis} if ops and ops_basis else {}),
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
