"""Parsed traces → fits, printable tables and link values (``simdist calibrate trace``).

One :class:`TraceReport` per input file:

* **nccl-tests** — :class:`~simdist.calibrate.collective_fit.CollectiveFit` per size regime;
  for ``all_reduce`` the regime holding ``link_size_bytes`` becomes a link (``nic_link`` when
  the ranks span several nodes: the ring's slowest hop is the inter-node one; ``intra_link``
  on one node) and the table is re-predicted three ways: by the piecewise fit, by the single
  link regime, and by the simulator's own analytic ring on the fitted platform.
* **OSU** ``osu_latency`` — the large-message alpha–beta link (:func:`~simdist.calibrate.overlay.fit_p2p_link`);
  ``osu_bw``/``osu_bibw`` — streaming bandwidth per regime; collectives — :class:`CollectiveFit`.
* **PyTorch profiler**, **simdist** traces — per-step / per-rank tables; compute spans at
  several batch sizes give ``t0 + t1 · batch`` per rank (fitted on the median time of each
  batch size, so a span cut off at the end of the run does not pull the line).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..platform.devices import DEVICE_KINDS
from ..platform.links import LINK_KINDS
from .collective_fit import CollectiveFit, simulated_allreduce_s
from ..fitting import LinearTimeFit, PiecewiseAlphaBetaFit
from .overlay import LinkFit, columns, fit_p2p_link, per_size_table
from .parsed import ParsedTrace

__all__ = ["TraceOptions", "TraceReport", "fit_trace", "TRACE_FITTERS"]


@dataclass(frozen=True)
class TraceOptions:
    """Choices of ``simdist calibrate trace`` (defaults in brackets).

    ``link_size_bytes`` — collective regime written to the link [64 MiB];
    ``large_message_bytes`` — point-to-point sizes fitted for the link [64 KiB];
    ``max_segments``/``tolerance`` — piecewise search [4, 0.05];
    ``intra_kind``/``nic_kind`` — link kinds written (None: shm/ethernet-tcp for MPI/OSU,
    nvswitch/ib-hdr for nccl-tests); ``link_class`` — where an OSU point-to-point fit goes
    (``nic`` between nodes [default] or ``intra``); ``osu_ranks`` — processes of OSU
    collective runs, not recorded by OSU [2].
    """

    link_size_bytes: float = 64 * 2**20
    large_message_bytes: float = 64 * 2**10
    max_segments: int = 4
    tolerance: float = 0.05
    intra_kind: str | None = None
    nic_kind: str | None = None
    link_class: str = "nic"
    osu_ranks: int = 2


@dataclass
class TraceReport:
    """The fit of one parsed file: a table to print, fit data, and link values if any."""

    parsed: ParsedTrace
    table: pd.DataFrame
    fit: dict[str, Any]
    scores: dict[str, Any]
    links: list[LinkFit] = field(default_factory=list)
    node_fields: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _device_kind(name: str | None) -> str | None:
    """The registered device kind a GPU name denotes (H200 computes as an H100), or None."""
    text = (name or "").upper()
    kind = "a100" if "A100" in text else "h100" if ("H100" in text or "H200" in text) else None
    return kind if kind in DEVICE_KINDS else None


def _nccl(parsed: ParsedTrace, options: TraceOptions) -> TraceReport:
    meta, table = parsed.meta, parsed.table
    n = meta.get("n_ranks") or 2
    fit = CollectiveFit(meta["op"], n, max_segments=options.max_segments, tolerance=options.tolerance)
    fit.fit(table["size_bytes"], table["time_s"])
    s, t = table["size_bytes"].to_numpy(float), table["time_s"].to_numpy(float)
    report = TraceReport(parsed, pd.DataFrame(), fit.export(), {"r2": fit.r2_, "max_relative_error": fit.max_relative_error_})
    if not meta.get("nodes"):
        report.notes.append(f"no '# Rank' lines: all ranks assumed on one node; {n} ranks "
                            + ("from busbw/algbw" if meta.get("n_ranks") else "assumed"))
    if meta["op"] != "all_reduce":
        report.table = pd.DataFrame(per_size_table(s, t, piecewise=fit.predict(s)))
        report.notes.append(f"{meta['op']}: fitted for comparison; only all_reduce sets link values")
        return report
    regime = fit.regime(options.link_size_bytes)
    multi = (meta.get("nodes") or 1) > 1
    field_name = "nic_link" if multi else "intra_link"
    kind = (options.nic_kind or "ib-hdr") if multi else (options.intra_kind or "nvswitch")
    link_pred = fit.predict_with(s, regime["hop_latency_s"], regime["bus_bandwidth_Bps"])
    node = {"devices": int(meta.get("ranks_per_node") or n)}
    if _device_kind(meta.get("device")):
        node["device"] = {"kind": _device_kind(meta.get("device"))}
    if multi:
        node["nics"] = 1
    link = LinkFit(field_name, kind, regime["hop_latency_s"], regime["bus_bandwidth_Bps"], "", parsed.path)
    platform = _platform_for(node, link, options, nodes=meta.get("nodes") or 1)
    simulated = simulated_allreduce_s(platform, s)
    rows = per_size_table(s, t, piecewise=fit.predict(s), link=link_pred, simulator=simulated)
    in_regime = (s >= regime["from_bytes"]) & (s <= regime["to_bytes"])
    link.basis = (f"ring-allreduce regime {regime['from_bytes']} B - {regime['to_bytes']} B (holds the reference "
                  f"size {int(options.link_size_bytes)} B): hop latency = regime latency / {fit.export()['ring_steps']} "
                  f"ring steps, bandwidth = bus bandwidth (busbw = algbw * 2(n-1)/n); "
                  + ("the ring's slowest hop is the inter-node one, so these are the NIC link's values as NCCL uses "
                     "the node's NICs together (nics: 1); the intra-node link is not identifiable from this table"
                     if multi else "all ranks on one node"))
    link.scores = {"regime_max_relative_error": float(np.max(np.abs(np.asarray(link_pred)[in_regime] / t[in_regime] - 1))),
                   "piecewise_max_relative_error": fit.max_relative_error_, "piecewise_r2": fit.r2_}
    link.table = rows
    link.details = {"collective_fit": fit.export(), "link_regime": regime, "per_size": columns(rows),
                    "simulator_check": {"platform": platform, "algorithm": "ring"}}
    report.table, report.links, report.node_fields = pd.DataFrame(rows), [link], node
    return report


def _platform_for(node: dict, link: LinkFit, options: TraceOptions, nodes: int) -> dict:
    """The platform the simulator check runs on: the fitted link, the other one at its kind's defaults."""
    other = "intra_link" if link.field == "nic_link" else "nic_link"
    other_kind = (options.intra_kind or "nvswitch") if other == "intra_link" else (options.nic_kind or "ib-hdr")
    spec = {"kind": other_kind, "latency": LINK_KINDS.get(other_kind).latency_s,
            "bandwidth": LINK_KINDS.get(other_kind).bandwidth_Bps}
    return {"nodes": nodes, "node": {**node, "device": node.get("device", {"kind": "a100"}), link.field: link.spec(),
                                     other: spec}, "fabric": {"topology": "switch"}}


def _osu(parsed: ParsedTrace, options: TraceOptions) -> TraceReport:
    table = parsed.table
    s, t = table["size_bytes"].to_numpy(float), table["time_s"].to_numpy(float)
    if parsed.kind == "p2p_latency":
        field_name = "nic_link" if options.link_class == "nic" else "intra_link"
        kind = (options.nic_kind or "ethernet-tcp") if field_name == "nic_link" else (options.intra_kind or "shm")
        link, piecewise, rows = fit_p2p_link(s, t, field_name=field_name, kind=kind, source=parsed.path,
                                             large_message_bytes=options.large_message_bytes,
                                             max_segments=options.max_segments, tolerance=options.tolerance)
        report = TraceReport(parsed, pd.DataFrame(rows), link.details, link.scores, [link])
        report.notes.append(f"OSU does not say whether the ranks shared a node; written to node.{field_name} "
                            "(--link-class)")
        return report
    if parsed.kind in ("p2p_bw", "p2p_bibw"):
        ok = s > 0
        fit = PiecewiseAlphaBetaFit(max_segments=options.max_segments, tolerance=options.tolerance).fit(s[ok], t[ok])
        report = TraceReport(parsed, pd.DataFrame(per_size_table(s[ok], t[ok], piecewise=fit.predict(s[ok]))),
                             fit.export(), {"r2": fit.r2_, "max_relative_error": fit.max_relative_error_})
        peak = float(np.max(s[ok] / t[ok]))
        report.fit["peak_bandwidth_Bps"] = peak
        report.notes.append(f"streaming bandwidth (per direction) peaks at {peak / 1e9:.3g} GB/s; link values come "
                            "from osu_latency (one message at a time, as the simulator models it)")
        return report
    if parsed.kind == "collective":
        fit = CollectiveFit(parsed.meta["op"], options.osu_ranks, max_segments=options.max_segments,
                            tolerance=options.tolerance).fit(s, t)
        report = TraceReport(parsed, pd.DataFrame(per_size_table(s, t, piecewise=fit.predict(s))), fit.export(),
                             {"r2": fit.r2_, "max_relative_error": fit.max_relative_error_})
        report.notes.append(f"OSU does not record the process count; assumed {options.osu_ranks} (--osu-ranks)")
        return report
    return TraceReport(parsed, table, {}, {}, notes=[f"OSU {parsed.meta['test']}: parsed, nothing to fit"])


def _simdist_trace(parsed: ParsedTrace, options: TraceOptions) -> TraceReport:
    table = parsed.table.copy()
    fits, t0, t1 = {}, [], []
    for rank in table["rank"]:
        spans = parsed.meta["compute_spans"].get(int(rank), [])
        batches = np.array([b for b, _ in spans], dtype=float)
        times = np.array([d for _, d in spans], dtype=float)
        ok = np.isfinite(batches) & (times > 0)
        sizes = np.unique(batches[ok])
        if len(sizes) >= 2:  # medians per batch size: a span cut at the end of the run is one outlier
            medians = [float(np.median(times[ok][batches[ok] == b])) for b in sizes]
            fit = LinearTimeFit().fit(sizes, medians)
            fits[int(rank)] = {k: v for k, v in fit.export().items() if k != "residuals_s"}
            t0.append(fit.t0_s_), t1.append(fit.t1_s_)
        else:
            t0.append(float("nan")), t1.append(float("nan"))
    table["t0_s"], table["t1_s"] = t0, t1
    report = TraceReport(parsed, table, {"compute_fits": fits}, {f"rank{r}_r2": f["r2"] for r, f in fits.items()})
    if not fits:
        report.notes.append("every compute span has the same batch size: no t0 + t1*batch fit (medians reported)")
    return report


def _plain(parsed: ParsedTrace, options: TraceOptions) -> TraceReport:
    numeric = parsed.table.select_dtypes("number")
    medians = {f"median_{c}": float(numeric[c].median()) for c in numeric.columns if c not in ("step", "worker")}
    return TraceReport(parsed, parsed.table, medians, {})


TRACE_FITTERS = {"nccl-tests": _nccl, "osu": _osu, "simdist-trace": _simdist_trace, "torch-profiler": _plain,
            "simdist-steps": _plain}


def fit_trace(parsed: ParsedTrace, options: TraceOptions = TraceOptions()) -> TraceReport:
    """Fit what ``parsed`` measures (see the module docstring)."""
    return TRACE_FITTERS[parsed.format](parsed, options)
