"""Describing a real run to the simulator: the scenario overrides that make it the same machine.

After a real run with calibration (:mod:`.calibration`), :func:`describe_run` returns what the
simulation of that run needs besides the scenario itself:

* a compute profile (``compute.profiles``): forward/backward fitted from the CPU time the
  workers measured before and after the run, plus the host CPU per step read from the run's
  trace (``t0``);
* the busy-time options of the algorithm: a parameter server's ``apply_time_per_param`` from
  its host CPU per message; ``update_time_per_param = 0`` where an algorithm has one (nnt,
  dcs3gd): their updates are real host work already in the host CPU per step;
* the intra-node link as the runtime's own messages (runs that send any) or allreduces
  fitted it; between the simulated "nodes" of one host (daso) the NIC link is the same
  memory, one NIC per rank. Without network figures, the MPI ping-pong fit of
  ``calibration/platforms/host-shm.yaml`` (or ``--network-overlay``) is used.

Every figure goes into the returned ``figures`` mapping, written to ``validation.json``.
:class:`HostLoad` measures how much CPU other processes took while the real run ran.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

__all__ = ["HostLoad", "describe_run", "link_overrides", "real_slowdown", "sim_slowdown"]


class HostLoad:
    """CPU cores other processes used on this host while open (``/proc/stat`` minus our children)."""

    def __enter__(self) -> "HostLoad":
        import resource

        self._busy, self._wall = _busy_cpu_s(), time.perf_counter()
        self._ours = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cores: float | None = None
        return self

    def __exit__(self, *exc: Any) -> None:
        import resource

        busy, wall = _busy_cpu_s(), time.perf_counter() - self._wall
        ours = resource.getrusage(resource.RUSAGE_CHILDREN)
        used = (ours.ru_utime - self._ours.ru_utime) + (ours.ru_stime - self._ours.ru_stime)
        if busy is not None and self._busy is not None and wall > 0:
            self.cores = max(0.0, (busy - self._busy - used) / wall)


def _busy_cpu_s() -> float | None:
    """CPU seconds every core of this host has been busy since boot (None off Linux)."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = stat.readline().split()[1:]
    except OSError:
        return None
    ticks = [int(v) for v in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def link_overrides(link: dict[str, Any] | None, overlay: Path | None, nodes: int, devices: int) -> list[str]:
    """The simulation's links: ``link`` (calibrated) or else ``overlay``; across simulated nodes the same."""
    from ..units import parse_bandwidth, parse_time

    items = []
    if link is None and overlay is not None:
        items.append(f"platform.overlays=[{overlay.resolve()}]")
        fitted = (yaml.safe_load(overlay.read_text(encoding="utf-8")) or {}).get("node", {}).get("intra_link")
        if fitted:
            link = {"latency_s": parse_time(fitted["latency"]), "bandwidth_Bps": parse_bandwidth(fitted["bandwidth"])}
        elif nodes > 1:
            return items
    if link is None:
        return items
    values = f"{{kind: shm, latency: {link['latency_s'] * 1e6:.6g}us, bandwidth: {link['bandwidth_Bps'] / 1e9:.6g}GB/s}}"
    items.append(f"platform.node.intra_link={values}")
    if nodes > 1:
        items += [f"platform.node.nic_link={values}", f"platform.node.nics={devices}"]
    return items


def describe_run(scenario_obj: Any, setup: Any, real_dir: Path, out: Path, threads: int,
                 overlay: Path | None) -> tuple[Path, list[str], dict[str, Any]]:
    """(profile file, overrides, figures) of the simulation of the calibrated real run in ``real_dir``."""
    from .calibration import fit_compute, host_cpu_per_step, write_profile

    measured = json.loads((real_dir / "calibration.json").read_text(encoding="utf-8"))
    fit = fit_compute(measured["workers"])
    host = host_cpu_per_step(real_dir, setup.workers)
    profile = write_profile(out / "calibration" / "host-cpu.yaml", setup.workload, fit, host["host_cpu_s"], threads,
                            "simdist validate (forward/backward timed on the real run's workers before and after "
                            "it + host CPU per step from its trace)")
    figures = {"forward_backward": {k: fit[k] for k in ("t0_s", "t1_s", "r2", "batch_sizes", "median_cpu_s",
                                                         "median_wall_s", "relative_iqr")},
               "host_cpu_per_step_s": host["host_cpu_s"], "host_cpu_per_step_by_worker_s": host["per_worker"],
               "profile_t0_s": fit["t0_s"] + host["host_cpu_s"], "threads": threads,
               "network": measured.get("network")}
    overrides = _busy_overrides(scenario_obj, setup, real_dir, figures)
    link = _runtime_link(measured.get("network") or {}, real_dir)
    figures["link"] = link or (str(overlay) if overlay else None)
    spec = scenario_obj.platform
    return profile, overrides + link_overrides(link, overlay, spec.nodes, spec.node.devices), figures


def _busy_overrides(scenario_obj: Any, setup: Any, real_dir: Path, figures: dict[str, Any]) -> list[str]:
    """Busy-time options of the algorithm, from the real servers' CPU (updates done elsewhere: 0)."""
    from .calibration import server_cpu_per_message

    config, overrides = scenario_obj.algorithm_config(), []
    if hasattr(config, "apply_time_per_param"):
        servers = config.resolved_server_ranks(len(setup.workers))
        pushes = int((pd.read_csv(real_dir / "steps.csv")["batch_size"] > 0).sum())
        per_message = [v for v in (server_cpu_per_message(real_dir, rank, pushes) for rank in servers) if v is not None]
        if per_message:
            shard = setup.workload.param_count / len(servers)
            overrides.append(f"algorithm.apply_time_per_param={max(per_message) / shard:.6g}")
            figures["server_cpu_per_message_s"] = max(per_message)
    if hasattr(config, "update_time_per_param"):
        overrides.append("algorithm.update_time_per_param=0")  # the update is part of the host CPU per step
    return overrides


def _runtime_link(network: dict[str, Any], real_dir: Path) -> dict[str, Any] | None:
    """The link fitted from the messages (when the run sent any) or else the allreduces of the calibration."""
    from .calibration import fit_link

    p2p = any(e.get("cat") == "comm" and e.get("name") in ("recv", "send") for e in _events(real_dir))
    order = ("p2p", "allreduce") if p2p else ("allreduce", "p2p")
    return next((link for link in (fit_link(network, kind) for kind in order) if link is not None), None)


def _events(result_dir: Path) -> list[dict[str, Any]]:
    data = json.loads((result_dir / "trace.json").read_text(encoding="utf-8"))
    return data["traceEvents"] if isinstance(data, dict) else data


def _compute_spans(result_dir: Path) -> list[dict[str, Any]]:
    return [e for e in _events(result_dir)
            if e.get("ph") == "X" and e.get("cat") == "compute" and e.get("name") == "forward/backward"]


def real_slowdown(real_dir: Path) -> float | None:
    """Median wall / CPU time of the real forward/backwards: 1 when a rank always had its core."""
    ratios = [e["dur"] * 1e-6 / e["args"]["cpu_s"] for e in _compute_spans(real_dir) if e["args"].get("cpu_s")]
    return float(np.median(ratios)) if ratios else None


def sim_slowdown(sim_dir: Path, t0_s: float, t1_s: float) -> float | None:
    """Median duration / work (``t0 + t1 · batch``) of the simulated forward/backwards."""
    ratios = [e["dur"] * 1e-6 / (t0_s + t1_s * e["args"]["batch_size"]) for e in _compute_spans(sim_dir)
              if e["args"].get("batch_size")]
    return float(np.median(ratios)) if ratios else None
