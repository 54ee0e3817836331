"""What one step of a collective schedule costs on an idle platform: the wire, the messages, the sums.

A schedule (:mod:`.collectives`) is phases of steps, each step a set of transfers that run at
once. :class:`StepCosts` prices a step alone: its duration on the wire (latency plus bytes at
the rates the platform's sharing rule gives the step's transfers, multi-rail stripes
included, and never shorter than the busiest rank's per-byte CPU, LogGOPS O), the
per-message costs of ``platform.messages`` (LogGP o, g and the rendezvous handshake) and the
reduction arithmetic of a reducing step (gamma: at ``collectives.reduce_bandwidth`` or the
device's memory-bandwidth estimate). The
simulator's analytic fidelity runs on these figures (:mod:`.sim_collectives`).
"""

from __future__ import annotations

from typing import Any

from ..errors import InputError
from ..platform.devices import DEVICE_KINDS
from ..platform.maxmin import weighted_max_min_rates
from ..platform.network import max_min_rates, rtt_weight

__all__ = ["StepCosts", "reduce_rates_Bps", "BYTES_MOVED_PER_REDUCED_BYTE"]


class StepCosts:
    """Prices of schedule steps on ``platform`` (``message_costs``: ``platform.messages`` or None;
    ``reduce_Bps``: the measured ``collectives.reduce_bandwidth`` or None, for device estimates)."""

    def __init__(self, platform: Any, message_costs: Any, reduce_Bps: float | None):
        self.platform = platform
        self.message_costs = message_costs
        self.reduce_Bps = reduce_Bps
        self.reduce_rates_Bps = reduce_rates_Bps(platform, reduce_Bps)
        self._capacity: list[float] | None = None  # every link's nominal bandwidth, read once

    @property
    def capacity(self) -> list[float]:
        """Every link's nominal bandwidth, by link index: built once, since a platform's links are
        fixed, instead of once per priced step (a list as long as the platform's links)."""
        if self._capacity is None or len(self._capacity) != len(self.platform.links):
            self._capacity = [link.bandwidth_Bps for link in self.platform.links]
        return self._capacity

    def uncontended(self, step) -> tuple[float, float, float]:
        """(smallest route latency, duration on the wire, per-message and reduction time) of one
        step alone on an idle platform.

        The duration is that of the slowest transfer, latency + bytes / rate, its rates the
        platform's sharing rule (max-min, or RTT-weighted) over the step's transfers; a
        transfer striped across NICs (multi-rail) moves its share of the bytes on each stripe
        and ends with its slowest one.
        """
        platform = self.platform
        routes, latencies, owners = [], [], []
        for i, t in enumerate(step):
            stripes = platform.stripes(t.src, t.dst)
            for route in stripes:
                routes.append([link.index for link in route])
                latencies.append(sum(link.latency_s for link in route))
                owners.append((i, len(stripes)))
        capacity = self.capacity
        if platform.sharing == "rtt-weighted":
            rates = weighted_max_min_rates(routes, capacity, [rtt_weight(latency) for latency in latencies])
        else:
            rates = max_min_rates(routes, capacity)
        duration = self.copy_cpu_s(step)
        for (i, parts), latency, rate in zip(owners, latencies, rates):
            nbytes = step[i].nbytes / parts
            duration = max(duration, latency + (nbytes / rate if nbytes > 0 else 0.0))
        message_s, reduce_s = self.extras(step)
        return min(latencies), duration, message_s + reduce_s

    def copy_cpu_s(self, step) -> float:
        """The busiest rank's per-byte CPU in one step (LogGOPS ``O_s`` over the bytes it sends plus
        ``O_r`` over those it receives; :mod:`simdist.platform.message_copies`), 0 without them.

        It overlaps the step's transfers, as it overlaps a message's, so a step takes the longer
        of the two: a transport whose CPU cannot keep up with its links (MPI over TCP on a
        fast network) is bound by its CPU.
        """
        per_byte_s = self.platform.copies.per_byte_s
        cpu: dict[int, float] = {}
        for t in step:
            send_s, recv_s = per_byte_s(t.src, t.dst)
            if send_s or recv_s:
                cpu[t.src] = cpu.get(t.src, 0.0) + send_s * t.nbytes
                cpu[t.dst] = cpu.get(t.dst, 0.0) + recv_s * t.nbytes
        return max(cpu.values(), default=0.0)

    def extras(self, step) -> tuple[float, float]:
        """(per-message costs, reduction time) one step of a schedule adds to its transfers.

        Per-message (LogGP, ``platform.messages``): the busiest sender injects its messages one
        after another (``o_s`` each, at least ``g`` apart) and the busiest receiver takes
        ``o_r`` per message; a message above the eager limit first pays the rendezvous
        handshake. Reduction (gamma): the slowest receiver of a reducing step sums what it
        received, at ``collectives.reduce_bandwidth`` or its device's estimate
        (:func:`reduce_rates_Bps`).
        """
        costs = self.message_costs
        sent: dict[int, int] = {}
        received: dict[int, int] = {}
        reduced: dict[int, float] = {}
        largest = 0.0
        for t in step:
            sent[t.src] = sent.get(t.src, 0) + 1
            received[t.dst] = received.get(t.dst, 0) + 1
            largest = max(largest, t.nbytes)
            if t.reduces:
                reduced[t.dst] = reduced.get(t.dst, 0.0) + t.nbytes
        message_s = 0.0
        if costs is not None:
            spacing = max(costs.gap, costs.send_overhead)
            message_s = (costs.send_overhead + (max(sent.values()) - 1) * spacing
                         + max(received.values()) * costs.recv_overhead + costs.handshake_s(largest))
        rates = self.reduce_rates_Bps
        reduce_s = max((nbytes / rates[rank] for rank, nbytes in reduced.items()), default=0.0)
        return message_s, reduce_s

    def reduction_basis(self) -> list[dict[str, Any]]:
        """How the collectives' reduction arithmetic was priced, for the run's manifest."""
        collectives = self.platform.spec.collectives
        if self.reduce_Bps is not None:
            return [{"basis": "measured", "reduce_bandwidth_Bps": self.reduce_Bps, "source": collectives.reduce_source}]
        kinds = sorted({d.kind for d in self.platform.devices})
        return [{"basis": "estimate", "device": kind, "reduce_bandwidth_Bps": _estimated_reduce_Bps(kind),
                 "source": f"memory bandwidth / {BYTES_MOVED_PER_REDUCED_BYTE:g} (read both operands, write the sum): "
                           + DEVICE_KINDS.get(kind).memory_source} for kind in kinds]


BYTES_MOVED_PER_REDUCED_BYTE = 3.0  # a += b streams a and b in and a out


def _estimated_reduce_Bps(kind_name: str) -> float:
    """Bytes per second a device of ``kind_name`` reduces: its memory bandwidth over the bytes moved per byte."""
    kind = DEVICE_KINDS.get(kind_name)
    if not kind.memory_bandwidth_Bps:
        raise InputError(f"device kind {kind_name!r} has no memory bandwidth to estimate its collectives' reduction "
                         "from; set platform.collectives.reduce_bandwidth (simdist calibrate network measures it)",
                         source="platform")
    return kind.memory_bandwidth_Bps / BYTES_MOVED_PER_REDUCED_BYTE


def reduce_rates_Bps(platform: Any, measured_Bps: float | None) -> list[float]:
    """Per rank, the bytes per second its collectives reduce received data at: the platform's
    measured ``collectives.reduce_bandwidth`` where given, else the rank's device estimate (an
    MPI allreduce sums on the host CPU, NCCL in a GPU kernel: either streams memory). A CPU rank
    with less than a core (``cpus`` < 1) sums at that share of the rate, as its op costs do."""
    by_kind: dict[str, float] = {}
    rates = []
    for device in platform.devices:
        rate = measured_Bps if measured_Bps is not None else by_kind.setdefault(device.kind,
                                                                                _estimated_reduce_Bps(device.kind))
        share = device.cpus if (device.cpus is not None and device.cpus < 1) else 1.0
        rates.append(rate * share)
    return rates
