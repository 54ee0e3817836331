"""Describing a real run to the simulator: the scenario overrides that make it the same machine.

After a real run with calibration, :func:`describe_run` returns what the simulation of that
run needs besides the scenario itself, from a pilot run (:mod:`.pilot`) when there was one,
else from the timings around the compared run (:mod:`.calibration`) and its trace:

* a compute profile (``compute.profiles``): forward/backward (the pilot's own steps, or the
  isolated timing before and after the run), plus the host CPU per step (``t0``) and, where
  the level is CPU time (ranks sharing cores), the CPU the rank's other threads took during a
  forward/backward (the progress thread of an overlapped collective);
* the busy-time options of the algorithm: a parameter server's ``apply_time_per_param`` from
  its host CPU per message; ``update_time_per_param = 0`` where an algorithm has one (nnt,
  dcs3gd): their updates are real host work already in the host CPU per step;
* the intra-node link: the pilot's own messages or allreduces, or the runtime's calibration
  pattern; between simulated "nodes" of one host (daso) the NIC link is the same memory, one
  NIC per rank. Without network figures, the MPI ping-pong fit of
  ``calibration/platforms/host-shm.yaml`` (or ``--network-overlay``) is used;
* with a pilot, :func:`speed_change`: how far the host's speed moved between the pilot and the
  compared run (a check for the reader, not given to the simulation).

Every figure goes into the returned ``figures`` mapping, written to ``validation.json``.
:class:`HostLoad` measures how much CPU other processes (and other virtual machines) took
while the real run ran.
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

from ..tracefile import span_events

__all__ = ["HostLoad", "describe_run", "link_overrides", "real_slowdown", "sim_slowdown", "speed_change",
           "speed_ratio", "STEADY_LIMIT"]

STEADY_LIMIT = 0.10  # a pilot whose host sped up or slowed down more than this across it is not used
_AROUND = ("cpu_s", "cpu_after_s")  # a launch's isolated timings before and after its run


class HostLoad:
    """While open: the CPU cores other processes used on this host (``cores``: ``/proc/stat``
    minus our children) and the cores the hypervisor gave to other virtual machines while this
    one wanted them (``steal_cores``: the steal column), which slows every rank unseen."""

    def __enter__(self) -> "HostLoad":
        import resource

        self._stat, self._wall = _cpu_stat_s(), time.perf_counter()
        self._ours = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cores: float | None = None
        self.steal_cores: float | None = None
        return self

    def __exit__(self, *exc: Any) -> None:
        import resource

        stat, wall = _cpu_stat_s(), time.perf_counter() - self._wall
        ours = resource.getrusage(resource.RUSAGE_CHILDREN)
        used = (ours.ru_utime - self._ours.ru_utime) + (ours.ru_stime - self._ours.ru_stime)
        if stat is not None and self._stat is not None and wall > 0:
            self.cores = max(0.0, (stat[0] - self._stat[0] - used) / wall)
            self.steal_cores = max(0.0, (stat[1] - self._stat[1]) / wall)


def _cpu_stat_s() -> tuple[float, float] | None:
    """CPU seconds every core of this host has been busy since boot, and of those stolen (None off Linux)."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = stat.readline().split()[1:]
    except OSError:
        return None
    ticks = [int(v) for v in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    steal = ticks[7] if len(ticks) > 7 else 0
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(ticks[:8]) - idle) / tick, steal / tick


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


def describe_run(scenario_obj: Any, setup: Any, real_dir: Path, out: Path, threads: int, overlay: Path | None,
                 pilot_dirs: list[Path] | None = None,
                 wall_level: bool = False) -> tuple[Path, list[str], dict[str, Any]]:
    """(profile file, overrides, figures) of the simulation of the real run in ``real_dir``.

    With ``pilot_dirs`` every figure comes from the pilot runs (:mod:`.pilot`): the forward/backward
    level, the host work per step and a server's work per gradient averaged over them (a pilot
    before and one after the compared run bracket the host's drift; each pilot's slope from its
    own isolated timing), the link from the first; without, from the isolated timing around the
    compared run, and the host work per step and per server message from the compared run's own
    trace (named in ``figures["from_compared_run"]``).

    ``wall_level`` (every worker has a core to itself): the pilots' forward/backward level is
    their wall time, not their CPU time (:func:`~.pilot.pilot_compute`).

    Speed normalisation: the host's per-core speed drifts by 10-60 % within a minute (other
    virtual machines), so a pilot's figures describe the host as it ran the pilot. Every launch
    times isolated forward/backwards before and after its run; a pilot whose two timings differ
    by more than :data:`STEADY_LIMIT` saw the host change speed during it and is left out (the
    steadiest is kept if none is steady), and each kept pilot's CPU figures are multiplied by
    :func:`speed_ratio` of its timings to those around the compared run: the pilot gives the
    cost relative to the host's speed, the timing around the compared run gives the speed then
    (never the compared run's own steps). ``figures`` names the pilots used and their scales.
    """
    from .calibration import fit_compute, host_cpu_per_step, other_threads_cpu_per_step, write_profile
    from .pilot import PILOT_WARMUP, pilot_compute, pilot_link

    pilot_dir = pilot_dirs[0] if pilot_dirs else None
    compared = _calibration(real_dir)
    measured = _calibration(pilot_dir) if pilot_dir else compared
    isolated = fit_compute(measured["workers"])
    workers = list(setup.workers)
    if pilot_dir is not None:
        timings = {d: _calibration(d)["workers"] for d in pilot_dirs}
        used = _steady(timings)
        scales = [speed_ratio(timings[d], compared["workers"]) or 1.0 for d in used]  # None: no size in common
        fit = _mean_level([_scaled(pilot_compute(d, workers, fit_compute(timings[d]), wall=wall_level), s)
                           for d, s in zip(used, scales)])
        hosts = [host_cpu_per_step(d, workers, skip_first=PILOT_WARMUP) for d in used]
        host = {**hosts[0], "host_cpu_s": float(np.mean([h["host_cpu_s"] * s for h, s in zip(hosts, scales)]))}
        others = float(np.mean([other_threads_cpu_per_step(d, workers, PILOT_WARMUP) * s
                                for d, s in zip(used, scales)]))
        link = pilot_link(pilot_dir, workers, measured.get("network")) or _runtime_link(measured.get("network") or {},
                                                                                     pilot_dir)
    else:
        fit, host = isolated, host_cpu_per_step(real_dir, workers)
        others = other_threads_cpu_per_step(real_dir, workers)
        link = _runtime_link(measured.get("network") or {}, real_dir)
    how = ("forward/backward of the pilot run's own steps + host CPU per step from its trace" if pilot_dir else
           "forward/backward timed on the real run's workers before and after it + host CPU per step from its trace")
    charge = fit.get("level_from") != "wall"  # a wall-time level has the other threads' CPU in it already
    charged = others if charge else 0.0
    profile = write_profile(out / "calibration" / "host-cpu.yaml", setup.workload, fit, host["host_cpu_s"] + charged,
                            threads, f"simdist validate ({how})")
    figures = {"source": "pilot" if pilot_dir else "isolated",
               "forward_backward": {k: fit[k] for k in ("t0_s", "t1_s", "r2", "batch_sizes", "median_cpu_s",
                                                         "median_wall_s", "relative_iqr", "per_pilot_level_cpu_s",
                                                         "level_from")
                                    if k in fit},
               "isolated_forward_backward": {k: isolated[k] for k in ("t0_s", "t1_s", "batch_sizes", "median_cpu_s")},
               "host_cpu_per_step_s": host["host_cpu_s"], "host_cpu_per_step_by_worker_s": host["per_worker"],
               "other_threads_cpu_per_step_s": others, "other_threads_cpu_charged": charge,
               "profile_t0_s": fit["t0_s"] + host["host_cpu_s"] + charged, "threads": threads,
               "network": measured.get("network")}
    if pilot_dir is None:
        figures["from_compared_run"] = ["host_cpu_per_step_s", "other_threads_cpu_per_step_s",
                                        "server_cpu_per_message_s"]
    else:
        figures["host_speed_change_pct"] = speed_change(measured["workers"], compared["workers"],
                                                        scenario_obj.workload.batch_size)
        figures.update(pilots_used=[d.name for d in used], pilot_speed_scale=scales)
    overrides = _busy_overrides(scenario_obj, setup, used if pilot_dir else [real_dir], figures,
                                pilot=pilot_dir is not None, scales=scales if pilot_dir else None)
    figures["link"] = link or (str(overlay) if overlay else None)
    spec = scenario_obj.platform
    return profile, overrides + link_overrides(link, overlay, spec.nodes, spec.node.devices), figures


def speed_change(pilot: list[dict[str, Any]], compared: list[dict[str, Any]], batch: int) -> dict[str, float] | None:
    """% change of the isolated forward/backward at ``batch`` from the pilot to before and after the compared run.

    A check, not a figure the simulation gets: the host's per-core speed drifts (other
    virtual machines), invisibly to ``/proc/stat``; when it moved between the pilot and the
    compared run, the pilot's figures are not the compared run's machine.
    """
    base = _median_timing(pilot, batch, ("cpu_s",))
    before, after = _median_timing(compared, batch, ("cpu_s",)), _median_timing(compared, batch, ("cpu_after_s",))
    if not base or before is None:
        return None
    change = {"before": 100.0 * (before / base - 1.0)}
    if after is not None:
        change["after"] = 100.0 * (after / base - 1.0)
    return change


def _busy_overrides(scenario_obj: Any, setup: Any, run_dirs: list[Path], figures: dict[str, Any],
                    pilot: bool, scales: list[float] | None = None) -> list[str]:
    """Busy-time options of the algorithm, from the servers' CPU in ``run_dirs`` (averaged over
    the runs, each times its entry of ``scales``; updates done elsewhere: 0)."""
    config, overrides = scenario_obj.algorithm_config(), []
    if hasattr(config, "apply_time_per_param"):
        servers = config.resolved_server_ranks(len(setup.workers))
        per_run = [[None if v is None else v * scale for v in _server_cpu(run_dir, servers, list(setup.workers), pilot)]
                   for run_dir, scale in zip(run_dirs, scales or [1.0] * len(run_dirs))]
        per_message = [float(np.mean(found)) for found in ([v for v in values if v is not None]  # per server
                                                           for values in zip(*per_run)) if found]
        if per_message:
            shard = setup.workload.param_count / len(servers)
            overrides.append(f"algorithm.apply_time_per_param={max(per_message) / shard:.6g}")
            figures["server_cpu_per_message_s"] = max(per_message)
    if hasattr(config, "update_time_per_param"):
        overrides.append("algorithm.update_time_per_param=0")  # the update is part of the host CPU per step
    return overrides


def _server_cpu(run_dir: Path, servers: list[int], workers: list[int], pilot: bool) -> list[float | None]:
    """Each server's host CPU per gradient in ``run_dir`` (None for a server without data)."""
    from .calibration import server_cpu_per_message
    from .pilot import server_cpu_per_push

    pushes = int((pd.read_csv(run_dir / "steps.csv")["batch_size"] > 0).sum())
    return [server_cpu_per_push(run_dir, rank, workers) if pilot else server_cpu_per_message(run_dir, rank, pushes)
            for rank in servers]


def speed_ratio(reference: list[dict[str, Any]], target: list[dict[str, Any]],
                reference_keys: tuple[str, ...] = _AROUND, target_keys: tuple[str, ...] = _AROUND) -> float | None:
    """How much slower the host ran ``target``'s isolated forward/backwards than ``reference``'s.

    Both are the ``workers`` timings of a ``calibration.json`` (every worker at every size,
    before and after its run; ``*_keys`` pick which). Per batch size timed in both, the ratio
    of the medians of all their samples; the result is the median of those ratios (None: no
    size in common).
    """
    sizes = sorted({str(s) for s in reference[0].get("sizes", [])} & {str(s) for s in target[0].get("sizes", [])}) \
        if reference and target else []
    medians = [(_median_timing(reference, s, reference_keys), _median_timing(target, s, target_keys)) for s in sizes]
    ratios = [after / before for before, after in medians if before and after is not None]
    return float(np.median(ratios)) if ratios else None


def _median_timing(parts: list[dict[str, Any]], size: int | str, keys: tuple[str, ...]) -> float | None:
    """Median of every worker's isolated forward/backward CPU seconds at ``size`` under ``keys`` (None: none)."""
    values = [v for part in parts for key in keys for v in (part.get(key) or {}).get(str(size), [])]
    return float(np.median(values)) if values else None


def _steady(timings: dict[Path, list[dict[str, Any]]], limit: float = STEADY_LIMIT) -> list[Path]:
    """The pilots (run directory: its workers' timings) during which the host kept its speed:
    isolated timing after within ``limit`` of before.

    A host slowing down in the middle of a pilot (seen: 1.6x for seconds) makes its level wrong
    and its bracket ambiguous; with no steady pilot, the steadiest.
    """
    ratios = {d: speed_ratio(t, t, ("cpu_s",), ("cpu_after_s",)) for d, t in timings.items()}
    changes = {d: 0.0 if r is None else abs(r - 1.0) for d, r in ratios.items()}
    return [d for d, c in changes.items() if c <= limit] or [min(changes, key=changes.get)]


def _calibration(run_dir: Path) -> dict[str, Any]:
    """``calibration.json`` of a launch: its workers' isolated timings around the run, the network pattern."""
    return json.loads((run_dir / "calibration.json").read_text(encoding="utf-8"))


def _scaled(fit: dict[str, Any], scale: float) -> dict[str, Any]:
    """``fit`` with the line ``t0 + t1 · batch`` (and the level it was put through) times ``scale``."""
    if scale == 1.0:
        return fit
    scaled = {**fit, "t0_s": fit["t0_s"] * scale, "t1_s": fit["t1_s"] * scale,
              "median_cpu_s": [v * scale for v in fit["median_cpu_s"]]}
    if "per_worker_median_cpu_s" in fit:
        scaled["per_worker_median_cpu_s"] = {r: v * scale for r, v in fit["per_worker_median_cpu_s"].items()}
    return scaled


def _mean_level(fits: list[dict[str, Any]]) -> dict[str, Any]:
    """One forward/backward fit from the pilots' fits: their mean level at the pilots' batch size, their mean slope.

    Only fits made from a pilot's own steps count (a pilot without steady steps falls back to
    the isolated fit, which has no level of its own).
    """
    fits = [fit for fit in fits if "per_worker_median_cpu_s" in fit] or fits[:1]
    if len(fits) == 1:
        return fits[0]
    batch = fits[0]["batch_sizes"][0]
    levels = [fit["t0_s"] + fit["t1_s"] * batch for fit in fits]
    level, t1 = float(np.mean(levels)), float(np.mean([fit["t1_s"] for fit in fits]))
    return {**fits[0], "t0_s": max(0.0, level - t1 * batch), "t1_s": t1, "median_cpu_s": [level],
            "per_pilot_level_cpu_s": levels}


def _runtime_link(network: dict[str, Any], real_dir: Path) -> dict[str, Any] | None:
    """The link fitted from the messages (when the run sent any) or else the allreduces of the calibration."""
    from .calibration import fit_link

    p2p = any(e.get("cat") == "comm" and e.get("name") in ("recv", "send") for e in span_events(real_dir))
    order = ("p2p", "allreduce") if p2p else ("allreduce", "p2p")
    return next((link for link in (fit_link(network, kind) for kind in order) if link is not None), None)


def _compute_spans(result_dir: Path) -> list[dict[str, Any]]:
    return [e for e in span_events(result_dir) if e.get("cat") == "compute" and e.get("name") == "forward/backward"]


def real_slowdown(real_dir: Path) -> float | None:
    """Median wall / CPU time of the real forward/backwards: 1 when a rank always had its core."""
    ratios = [e["dur"] * 1e-6 / e["args"]["cpu_s"] for e in _compute_spans(real_dir) if e["args"].get("cpu_s")]
    return float(np.median(ratios)) if ratios else None


def sim_slowdown(sim_dir: Path, t0_s: float, t1_s: float) -> float | None:
    """Median duration / work (``t0 + t1 · batch``) of the simulated forward/backwards."""
    ratios = [e["dur"] * 1e-6 / (t0_s + t1_s * e["args"]["batch_size"]) for e in _compute_spans(sim_dir)
              if e["args"].get("batch_size")]
    return float(np.median(ratios)) if ratios else None
