"""The platform as a graph: ranks on nodes, directional links, and routes between ranks.

Built once from a validated :class:`~simdist.platform.spec.PlatformSpec`. Every physical
link appears as two directional :class:`Link` objects (``.up`` towards the fabric,
``.down`` away from it). A route is the list of directional links a message from one rank
to another crosses:

* same node: the sender's device port up, the receiver's device port down;
* other node: what the fabric (``fabric.topology``, :mod:`simdist.platform.fabrics`, a
  registry) routes: over the NICs for ``switch`` and ``fat_tree`` (with multi-rail striping,
  a :class:`StripedRoute`), over direct node-to-node links for ``ring`` and ``torus``.

Each port link carries half the kind's end-to-end latency, so a two-link route pays the
published port-to-port latency once.

A link is full duplex unless its spec says otherwise (``docs/network.md``, "Link
semantics"). A half-duplex link, or one with an ``aggregate_bandwidth``, also gets a
*shared capacity*: one more :class:`Link` (``<name>.both``, latency 0, capacity the
bandwidth or the aggregate cap, ``counts_bytes=False``) that the routes of both directions
cross right after their directional link. The flow model then shares it like any link, so
the two directions' rates add up to at most that capacity; the bytes are counted on
``.up`` and ``.down`` only. Fabric uplinks of a fat tree are switch links and stay full
duplex.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from .devices import DEVICE_KINDS
from .fabrics import make_fabric
from .message_copies import MessageCopies
from .routes import Link, LinkList, StripedRoute
from .spec import LinkSpec, PlatformSpec

__all__ = ["Link", "LinkList", "StripedRoute", "Device", "Platform"]


@dataclass(frozen=True)
class Device:
    """A rank's device: where it is, what it is and how fast."""

    rank: int
    node: int
    local_rank: int
    kind: str
    speed: float
    cpus: float | None
    peak_flops: float | None

    @property
    def profile_device(self) -> str:
        return DEVICE_KINDS.get(self.kind).profile_device


class Platform:
    """Ranks, links and routes of one platform; routes are computed once and cached."""

    def __init__(self, spec: PlatformSpec):
        self.spec = spec
        self.links = LinkList(spec.fabric.sharing)
        self.devices: list[Device] = self._make_devices(spec)
        self._ports = [self.duplex(f"n{d.node}.d{d.local_rank}", spec.node_at(d.node).intra_link, half_latency=True)
                       for d in self.devices]
        self.nics = [[self.duplex(f"n{n}.nic{k}", spec.node_at(n).nic_link, half_latency=True)
                      for k in range(spec.node_at(n).nics)] for n in range(spec.nodes)]
        self.fabric = make_fabric(self, spec)  # builds its own links after the ports and NICs
        self._routes: dict[tuple[int, int], tuple[Link, ...]] = {}
        self.copies = MessageCopies(self)  # what a message's bytes cost the CPUs at its ends

    # -- construction -------------------------------------------------------------------

    @staticmethod
    def _make_devices(spec: PlatformSpec) -> list[Device]:
        overrides: dict[int, dict] = {}
        for override in spec.device_overrides:
            fields = {k: v for k, v in (("speed", override.speed), ("cpus", override.cpus)) if v is not None}
            for rank in override.ranks:
                overrides.setdefault(rank, {}).update(fields)
        devices = []
        for node in range(spec.nodes):
            base = spec.node_at(node).device
            kind = DEVICE_KINDS.get(base.kind)
            for local in range(spec.node_at(node).devices):
                rank = len(devices)
                fields = overrides.get(rank, {})
                cpus = fields.get("cpus", base.cpus)
                if cpus is None and not kind.is_gpu:
                    cpus = 1.0
                devices.append(Device(rank, node, local, base.kind, fields.get("speed", base.speed), cpus,
                                      base.peak_flops or kind.peak_flops))
        return devices

    def new_link(self, name: str, kind: str, latency_s: float, bandwidth_Bps: float, *,
                 counts_bytes: bool = True) -> Link:
        """A new link, indexed in creation order."""
        link = Link(len(self.links), name, kind, latency_s, bandwidth_Bps, counts_bytes)
        self.links.append(link)
        return link

    def duplex(self, name: str, spec: LinkSpec, *, half_latency: bool = False,
               bandwidth_Bps: float | None = None) -> tuple[tuple[Link, ...], tuple[Link, ...]]:
        """The hops of each direction of a physical link: ``(up hops, down hops)``, each its
        directional link, followed by the shared capacity when the spec asks for one."""
        latency = spec.latency_s / 2 if half_latency else spec.latency_s
        bw = bandwidth_Bps if bandwidth_Bps is not None else spec.bandwidth_Bps
        up = self.new_link(f"{name}.up", spec.kind, latency, bw)
        down = self.new_link(f"{name}.down", spec.kind, latency, bw)
        both = self.shared_capacity(name, spec, bw)
        return ((up,), (down,)) if both is None else ((up, both), (down, both))

    def shared_capacity(self, name: str, spec: LinkSpec, bandwidth_Bps: float) -> Link | None:
        """The capacity both directions of a link share: its bandwidth when half duplex, its
        ``aggregate_bandwidth`` when capped; None for an uncapped full-duplex link."""
        if spec.duplex == "half":
            capacity = bandwidth_Bps
        elif spec.aggregate_bandwidth is not None:
            capacity = spec.aggregate_bandwidth
        else:
            return None
        return self.new_link(f"{name}.both", spec.kind, 0.0, capacity, counts_bytes=False)

    # -- queries ----------------------------------------------------------------------

    @property
    def size(self) -> int:
        return len(self.devices)

    def node_of(self, rank: int) -> int:
        return self.devices[rank].node

    def ranks_on_node(self, node: int) -> list[int]:
        first = self.spec.first_rank(node)
        return list(range(first, first + self.spec.node_at(node).devices))

    @cached_property
    def link_by_name(self) -> dict[str, Link]:
        return {link.name: link for link in self.links}

    @property
    def sharing(self) -> str:
        """How flows share a bottleneck (``FabricSpec.sharing``); ``links`` carries it too."""
        return self.links.sharing

    def route(self, src: int, dst: int) -> tuple[Link, ...]:
        """The links a message from rank ``src`` to rank ``dst`` crosses (a :class:`StripedRoute`
        between nodes with ``nic_policy: multi-rail``); the same tuple every time."""
        key = (src, dst)
        route = self._routes.get(key)
        if route is None:
            route = self._routes[key] = self._compute_route(src, dst)
        return route

    def stripes(self, src: int, dst: int) -> tuple[tuple[Link, ...], ...]:
        """The routes a transfer from ``src`` to ``dst`` is split over: one per NIC pair with
        multi-rail striping between nodes, else the route alone."""
        route = self.route(src, dst)
        return route.stripes if type(route) is StripedRoute else (route,)

    def route_latency_s(self, src: int, dst: int) -> float:
        return sum(link.latency_s for link in self.route(src, dst))

    def route_bandwidth_Bps(self, src: int, dst: int) -> float:
        """The fastest rate a transfer can have: its narrowest link's bandwidth, summed over its
        stripes when it is striped across NICs."""
        if src == dst:
            return float("inf")
        return sum(min(link.bandwidth_Bps for link in stripe) for stripe in self.stripes(src, dst))

    def _compute_route(self, src: int, dst: int) -> tuple[Link, ...]:
        if src == dst:
            return ()
        a, b = self.devices[src], self.devices[dst]
        if a.node == b.node:
            return (*self._ports[src][0], *self._ports[dst][1])
        return self.fabric.route(a, b)

    def describe(self) -> dict:
        """A JSON-able description (the resolved spec plus derived counts) for the manifest."""
        out = self.spec.model_dump(mode="json")
        out["ranks"] = self.size
        out["links"] = len(self.links)
        return out
