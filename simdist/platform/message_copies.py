"""What a message's bytes cost the CPUs at its two ends (LogGOPS ``O_s``, ``O_r``), route by route.

Some transports move bytes with the ranks' own CPUs: MPI over TCP copies every byte between
the user's buffer and the kernel's socket buffer, on the sender and again on the receiver.
Others leave it to a DMA engine (RDMA NICs, NVLink), and the CPU pays nothing per byte. So
the cost belongs to the links a message crosses: each link kind may carry a measured figure
(:attr:`~simdist.platform.links.LinkKind.cpu_per_byte_s`), and a route costs its dearest
link's. A platform's ``messages.send_overhead_per_byte`` / ``recv_overhead_per_byte``, where
given (0 included), replace that default on every route: they are what was measured on it.
"""

from __future__ import annotations

from typing import Any

from .links import LINK_KINDS

__all__ = ["MessageCopies"]


class MessageCopies:
    """Per-byte CPU costs (sender, receiver) of the messages between two ranks of ``platform``."""

    def __init__(self, platform: Any):
        self.platform = platform
        messages = platform.spec.messages
        self._given = (None if messages is None else messages.send_overhead_per_byte,
                       None if messages is None else messages.recv_overhead_per_byte)
        self._by_pair: dict[tuple[int, int], tuple[float, float]] = {}

    def per_byte_s(self, src: int, dst: int) -> tuple[float, float]:
        """(O_s, O_r): seconds of CPU per byte for the sender and the receiver of a message."""
        key = (src, dst)
        costs = self._by_pair.get(key)
        if costs is None:
            default = self._route_default_s(src, dst)
            costs = self._by_pair[key] = tuple(default if given is None else given for given in self._given)
        return costs

    def _route_default_s(self, src: int, dst: int) -> float:
        """The dearest per-byte copy of the link kinds on the route (every stripe of a striped one)."""
        kinds = {link.kind for stripe in self.platform.stripes(src, dst) for link in stripe}
        return max((LINK_KINDS.get(kind).cpu_per_byte_s for kind in kinds if kind in LINK_KINDS), default=0.0)

    def basis(self) -> list[dict[str, Any]]:
        """Where the per-byte costs come from, for the run's manifest: the platform's measured
        figures, and the link kinds' own for what they leave unset (kinds in use with a cost only)."""
        rows = []
        messages = self.platform.spec.messages
        for side, given in zip(("send", "recv"), self._given):
            if given is not None:
                rows.append({"side": side, "per_byte_s": given, "basis": "platform.messages",
                             "source": messages.source})
        if None in self._given:
            kinds = [LINK_KINDS.get(kind) for kind in sorted({link.kind for link in self.platform.links})
                     if kind in LINK_KINDS]
            rows += [{"side": "unset sides", "link_kind": kind.name, "per_byte_s": kind.cpu_per_byte_s,
                      "basis": "link kind default", "source": kind.cpu_source}
                     for kind in kinds if kind.cpu_per_byte_s > 0]
        return rows
