"""Fitted links → platform overlays (the files ``platform: {overlays: [...]}`` merges in).

The simulator's link model is one latency and one bandwidth per link, while measured
timings change regime with message size (MPI eager → rendezvous, NCCL LL → Simple). So:

* a point-to-point sweep (MPI ping-pong, ``osu_latency``) gives the link the alpha–beta fit
  of its **large messages** (``≥ 64 KiB`` by default: the rendezvous regime that gradient
  traffic lives in); the piecewise fit of all sizes goes to ``provenance``;
* a collective sweep (nccl-tests) gives the link the regime holding a **reference size**
  (64 MiB by default: DDP buckets and whole-model gradients), as hop latency and bus
  bandwidth of the simulator's ring model (:mod:`simdist.calibrate.collective_fit`).

An overlay sets ``node.intra_link`` (ranks on one node) and/or ``node.nic_link`` (between
nodes), each ``{kind, latency, bandwidth}``, plus facts the measurement shows (devices per
node), and a ``provenance`` mapping the scenario loader ignores.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..errors import InputError
from ..platform.links import LINK_KINDS
from ..fitting import AlphaBetaFit, PiecewiseAlphaBetaFit
from .provenance import make_provenance, write_yaml

__all__ = ["LinkFit", "LINK_FIELDS", "fit_p2p_link", "messages_from_pingpong", "apply_overheads", "per_byte_overheads", "apply_streaming", "per_size_table", "columns", "build_overlay", "write_overlay",
           "check_link_kind"]

LINK_FIELDS = ("intra_link", "nic_link")


@dataclass
class LinkFit:
    """Values for one platform link, with how they were obtained."""

    field: str  # "intra_link" or "nic_link"
    kind: str  # a registered link kind
    latency_s: float
    bandwidth_Bps: float
    basis: str  # one sentence: which regime and why
    source: str  # input file, or "measured" for sweeps run on the spot
    scores: dict[str, Any] = field(default_factory=dict)  # fit scores of the values chosen
    details: dict[str, Any] = field(default_factory=dict)  # the fits behind them (for provenance)
    table: list[dict[str, Any]] = field(default_factory=list)  # per-size rows (for printing)
    messages: dict[str, Any] | None = None  # eager/rendezvous split the sweep shows (messages_from_pingpong)

    aggregate_bandwidth_Bps: float | None = None  # both directions together, where a bibw test measured it

    def spec(self) -> dict[str, Any]:
        spec = {"kind": self.kind, "latency": self.latency_s, "bandwidth": self.bandwidth_Bps}
        if self.aggregate_bandwidth_Bps is not None:
            spec["aggregate_bandwidth"] = self.aggregate_bandwidth_Bps
        return spec


def check_link_kind(name: str, option: str) -> str:
    """``name`` if it is a registered link kind, else an InputError naming ``option``."""
    if name not in LINK_KINDS:
        raise InputError(f"unknown link kind {name!r}; known: {', '.join(LINK_KINDS.names())}", source=option)
    return name


def per_size_table(sizes: Sequence[float], measured_s: Sequence[float], **predicted_s: Sequence[float]) -> list[dict]:
    """Rows ``{size_bytes, measured_s, <name>_s, <name>_error}`` for each prediction given."""
    rows = []
    for i, (size, t) in enumerate(zip(sizes, measured_s)):
        row = {"size_bytes": int(size), "measured_s": float(t)}
        for name, values in predicted_s.items():
            p = float(np.asarray(values, dtype=float)[i])
            row[f"{name}_s"] = p
            row[f"{name}_error"] = p / float(t) - 1.0
        rows.append(row)
    return rows


def columns(rows: Sequence[dict]) -> dict[str, list]:
    """Rows of equal keys as one list per key (compact in YAML)."""
    return {key: [row[key] for row in rows] for key in (rows[0] if rows else {})}


def fit_p2p_link(sizes_bytes: Sequence[float], times_s: Sequence[float], *, field_name: str, kind: str,
                 source: str, large_message_bytes: float = 65536, max_segments: int = 3,
                 tolerance: float = 0.05) -> tuple[LinkFit, PiecewiseAlphaBetaFit, list[dict]]:
    """Link values from one-way message times: the large-message alpha–beta fit.

    Returns the link, the piecewise fit of every size and the per-size error table.
    """
    s, t = np.asarray(sizes_bytes, dtype=float), np.asarray(times_s, dtype=float)
    piecewise = PiecewiseAlphaBetaFit(max_segments=max_segments, tolerance=tolerance).fit(s, t)
    large = s >= large_message_bytes
    if np.count_nonzero(large) < 2 or np.ptp(s[large]) == 0:
        raise InputError(f"need at least two message sizes >= {large_message_bytes:.0f} B for the link fit; "
                         f"the largest measured is {s.max():.0f} B", source=source)
    link_fit = AlphaBetaFit().fit(s[large], t[large])
    if not np.isfinite(link_fit.bandwidth_Bps_):
        raise InputError("large-message times do not grow with size: no bandwidth can be fitted", source=source)
    table = per_size_table(s, t, piecewise=piecewise.predict(s), link=link_fit.predict(s))
    basis = (f"alpha-beta fit of the large-message regime (sizes >= {int(large_message_bytes)} B, "
             f"{np.count_nonzero(large)} sizes, max error {np.max(np.abs(link_fit.relative_errors_)):.1%}); "
             "the simulator has one latency and one bandwidth per link")
    details = {"large_messages": {"from_bytes": int(large_message_bytes), **link_fit.export()},
               "piecewise": piecewise.export(), "per_size": columns(table)}
    scores = {"r2": link_fit.r2_, "max_relative_error": float(np.max(np.abs(link_fit.relative_errors_))),
              "piecewise_r2": piecewise.r2_, "piecewise_max_relative_error": piecewise.max_relative_error_}
    link = LinkFit(field_name, kind, link_fit.latency_s_, link_fit.bandwidth_Bps_, basis, source, scores, details,
                   table)
    link.messages = messages_from_pingpong(piecewise, link)
    return link, piecewise, table


def messages_from_pingpong(piecewise: PiecewiseAlphaBetaFit, link: LinkFit) -> dict[str, Any] | None:
    """The eager/rendezvous split a one-way message sweep shows, as ``messages`` fields.

    MPI libraries send small messages eagerly and large ones after a request-to-send /
    clear-to-send handshake: the piecewise fit of one-way times has a regime whose intercept
    jumps up. The link keeps the large-message values (what gradients pay); the small
    messages get the lower intercept back: the link's latency becomes the eager intercept,
    and the difference is the rendezvous handshake paid above the eager limit (the largest
    size of the last regime before the jump). None when the sweep shows no such jump.
    Sender/receiver CPU overheads are not separable from latency in a ping-pong and stay in it.
    """
    large_from = link.details.get("large_messages", {}).get("from_bytes", 0)
    below = [r for r in piecewise.regimes_ if r.to_bytes < large_from]
    if not below:
        return None
    eager = below[-1]
    handshake_s = link.latency_s - eager.fit.latency_s_
    if handshake_s <= 0:
        return None
    link.latency_s = eager.fit.latency_s_
    link.basis += (f"; latency is the eager-regime intercept (sizes <= {int(eager.to_bytes)} B), the larger "
                   f"intercept above it is messages.rendezvous_latency")
    return {"eager_limit": int(eager.to_bytes), "rendezvous_latency": handshake_s,
            "source": f"{link.source}: one-way message times, large-message intercept (sizes >= {int(large_from)} B) "
                      f"minus the intercept of the regime {int(eager.from_bytes)} - {int(eager.to_bytes)} B"}


def cold_words(cold: dict[str, Any]) -> str:
    """How a sweep's calls timed with cold caches were made cold (:func:`.mpi_worker.cold_state`)."""
    if "after_compute" in cold:
        return (f"right after a training step of the workload of scenario {cold['after_compute']} "
                f"(batch {cold['batch_size']}, caches as the step left them)")
    return f"after {int(cold['evicted_bytes']) >> 20} MiB were written (caches cold)"


def apply_overheads(link: LinkFit, overheads: dict[str, Any] | None) -> None:
    """Split measured LogP overheads out of ``link``'s latency into its ``messages``.

    A ping-pong's one-way time is ``o_s + L + S/B + o_r``: with ``o_s`` and ``o_r`` measured
    apart (:func:`simdist.calibrate.mpi_worker._overheads`), the link keeps ``L`` and the
    simulator charges the overheads to the ranks' CPUs; ``gap`` is the measured time per
    message of a stream. Nothing changes when ``overheads`` is None.
    """
    if not overheads:
        return
    o_s, o_r = float(overheads["send_overhead_s"]), float(overheads["recv_overhead_s"])
    link.details["overheads"] = dict(overheads)
    messages = dict(link.messages or {})
    measured = (f"{link.source}: LogP overheads of {overheads['messages']} messages of {overheads['size_bytes']} B "
                "(median Isend post time, median Recv of an arrived message, stream time per message)")
    if o_s + o_r < link.latency_s:
        link.latency_s -= o_s + o_r
        link.basis += "; minus the measured send and receive overheads (messages.send_overhead, recv_overhead)"
        messages.update(send_overhead=o_s, recv_overhead=o_r)
        cold = overheads.get("cold")
        if cold:  # the same calls, each after the caches were filled with other data
            messages.update(send_overhead_after_compute=float(cold["send_overhead_s"]),
                            recv_overhead_after_compute=float(cold["recv_overhead_s"]))
            measured += (f"; after compute (send_overhead_after_compute, recv_overhead_after_compute): the medians "
                         f"of {cold['messages']} calls of {cold['size_bytes']} B, each {cold_words(cold)}")
    else:  # the CPU time overlaps the transfer on this transport: splitting it out would overcharge
        link.basis += (f"; the measured overheads (o_s {o_s:.3g} s + o_r {o_r:.3g} s) are not below the eager "
                       "intercept, so they overlap the transfer here and stay in the latency")
        measured += "; o_s + o_r not below the latency intercept: only the gap is used"
    messages["gap"] = float(overheads["gap_s"])
    per_byte = per_byte_overheads(overheads)
    if per_byte:
        messages.update(per_byte)
        large = overheads["large"]
        drained = " each taken in before the next was posted," if large.get("drained") else ""
        baseline = large.get("baseline")
        less = (f"less those of {baseline['messages']} such messages of {baseline['size_bytes']} B"
                if baseline else "less the small ones'")
        measured += (f"; per-byte overheads (LogGOPS O): the same medians for {large['messages']} messages of "
                     f"{large['size_bytes']} B,{drained} {less}, per byte")
    messages["source"] = "; ".join(filter(None, [messages.get("source"), measured]))
    link.messages = messages


def per_byte_overheads(overheads: dict[str, Any]) -> dict[str, float]:
    """LogGOPS ``O_s``, ``O_r`` from the overheads of small messages and of large ones (``overheads["large"]``).

    Each is the rise of the median call time per byte between the two sizes, where positive: a
    send call that only posts a large message (rendezvous, copied later by the transfer) costs
    no more than a small one, and gets no per-byte overhead. The small messages are the large
    ones' ``baseline``, measured the same way (each taken in before the next is posted,
    :func:`.sweep_timing.drained_overheads`), where the document has one; else the stream of
    small messages the LogP overheads come from. Empty without a large measurement.
    """
    large = overheads.get("large")
    small = (large or {}).get("baseline") or overheads
    if not large or large["size_bytes"] <= small["size_bytes"]:
        return {}
    extra_bytes = large["size_bytes"] - small["size_bytes"]
    slopes = {"send_overhead_per_byte": (large["send_overhead_s"] - small["send_overhead_s"]) / extra_bytes,
              "recv_overhead_per_byte": (large["recv_overhead_s"] - small["recv_overhead_s"]) / extra_bytes}
    return {name: float(slope) for name, slope in slopes.items() if slope > 0}


def apply_streaming(links: Sequence[LinkFit], bw_peak_Bps: float | None, bibw_peak_Bps: float | None,
                    gap_s: float | None, bibw_limit: str = "auto") -> list[str]:
    """What ``osu_bw``/``osu_bibw`` add to the point-to-point links fitted beside them; notes on what was done.

    ``bibw_peak_Bps`` is the per-direction peak of a bidirectional test. Both directions
    together moved twice that; when that total is below twice the link's one-way bandwidth,
    something the two directions share was the limit (``bibw_limit``; ``auto``: ``cpu`` for
    link kinds whose bytes the ranks' CPUs copy, those with a ``cpu_per_byte_s`` of their own
    in :mod:`simdist.platform.links` (``ethernet-tcp``), ``link`` for the rest):

    * ``link``: the link itself, whose ``aggregate_bandwidth`` it becomes (clamped to
      [bandwidth, 2 x bandwidth], the range a platform allows);
    * ``cpu``: each rank's CPU, which copies every byte it sends and every byte it receives
      (MPI over TCP on full-duplex Ethernet). In osu_bibw each rank sends and receives at
      once, so per direction ``1 / (O_s + O_r)`` bytes a second moved; split evenly (one copy
      on each side), ``O_s = O_r`` = 1 / (the total both ways) seconds per byte, written as
      the messages' LogGOPS per-byte overheads.

    ``gap_s``: the time per message of the smallest ``osu_bw`` size (a window of back-to-back
    messages: injection-limited), the LogGP gap.
    """
    notes = []
    for link in links:
        if not bibw_peak_Bps or 2 * bibw_peak_Bps >= 2 * link.bandwidth_Bps:
            continue
        total = 2 * bibw_peak_Bps
        if _bibw_limit(bibw_limit, link.kind) == "link":
            link.aggregate_bandwidth_Bps = max(total, link.bandwidth_Bps)
            notes.append(f"node.{link.field}.aggregate_bandwidth = {link.aggregate_bandwidth_Bps / 1e9:.3g} GB/s: "
                         f"osu_bibw moved {total / 1e9:.3g} GB/s both ways together, below twice the "
                         f"{link.bandwidth_Bps / 1e9:.3g} GB/s link")
            continue
        per_byte_s = 1.0 / total
        messages = dict(link.messages or {})
        messages.update(send_overhead_per_byte=per_byte_s, recv_overhead_per_byte=per_byte_s)
        messages["source"] = "; ".join(filter(None, [messages.get("source"), (
            f"osu_bibw: {total / 1e9:.3g} GB/s both ways together, below twice the {link.bandwidth_Bps / 1e9:.3g} GB/s "
            f"one-way: each rank's CPU copies what it sends and receives, 1 / {total / 1e9:.3g} GB/s per byte each "
            "(--bibw-limit cpu)")]))
        link.messages = messages
        notes.append(f"messages.send_overhead_per_byte = recv_overhead_per_byte = {per_byte_s * 1e9:.3g} ns: "
                     f"osu_bibw moved {total / 1e9:.3g} GB/s both ways together, below twice the "
                     f"{link.bandwidth_Bps / 1e9:.3g} GB/s link; each rank's CPU copies both directions' bytes")
    if gap_s and links:
        notes.append(f"messages.gap = {gap_s:.3g} s: time per message of osu_bw's smallest size")
    return notes


def _bibw_limit(choice: str, kind: str) -> str:
    """``cpu`` or ``link``: what a bidirectional deficit is put down to on a link of ``kind``."""
    if choice == "auto":
        return "cpu" if kind in LINK_KINDS and LINK_KINDS.get(kind).cpu_per_byte_s > 0 else "link"
    return choice


def build_overlay(links: Sequence[LinkFit], *, command: str, inputs: Sequence[str | os.PathLike] = (),
                  node_fields: dict[str, Any] | None = None, extra_provenance: dict[str, Any] | None = None,
                  collectives: dict[str, Any] | None = None, messages: dict[str, Any] | None = None) -> dict:
    """The overlay document: ``node`` fields, the links, measured ``collectives`` tables and
    per-message costs (``messages``) where given, and ``provenance``."""
    by_field: dict[str, LinkFit] = {}
    for link in links:
        if link.field in by_field:
            raise InputError(f"two inputs give node.{link.field} ({by_field[link.field].source} and {link.source}); "
                             "fit them in separate runs", source="simdist calibrate")
        by_field[link.field] = link
    if not by_field and not (collectives or {}).get("tables"):
        raise InputError("none of the inputs gives link values or a collective table (nccl-tests, OSU latency or "
                         "collectives, a collective CSV or an MPI sweep do); leave out --out", source="--out")
    node = dict(node_fields or {})
    for name in LINK_FIELDS:
        if name in by_field:
            node[name] = by_field[name].spec()
    scores = {name: link.scores for name, link in by_field.items()}
    provenance = make_provenance(command, inputs, scores,
                                 link_values={name: {"basis": link.basis, "source": link.source}
                                              for name, link in by_field.items()},
                                 fits={name: link.details for name, link in by_field.items()},
                                 **(extra_provenance or {}))
    document: dict[str, Any] = {"node": node} if node else {}
    if collectives and collectives.get("tables"):
        document["collectives"] = collectives
    messages = messages or next((link.messages for link in sorted(by_field.values(), key=lambda l: l.field != "nic_link")
                                 if link.messages), None)
    if messages:
        document["messages"] = messages
    return {**document, "provenance": provenance}


def write_overlay(path: str | os.PathLike, document: dict) -> None:
    """Write an overlay document with the do-not-edit header."""
    command = document["provenance"]["generated_by"]
    write_yaml(path, document, "Platform overlay fitted from measurements; merge it with\n"
                               "  platform: {preset: ..., overlays: [this file]}  (provenance is ignored there).\n"
                               f"Generated by: {command}\nDo not hand-edit: re-run the command.")
