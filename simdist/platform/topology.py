"""The platform as a graph: ranks on nodes, directional links, and routes between ranks.

Built once from a validated :class:`~simdist.platform.spec.PlatformSpec`. Every physical
link appears as two directional :class:`Link` objects (``.up`` towards the fabric,
``.down`` away from it). A route is the list of directional links a message from one rank
to another crosses:

* same node: the sender's device port up, the receiver's device port down;
* other node, ``switch``: sender NIC up, receiver NIC down (GPUDirect-style: NIC traffic
  does not cross the intra-node interconnect); device k uses NIC k mod nics, or, with
  ``node.nic_policy: multi-rail``, the route is a :class:`StripedRoute` with one stripe per
  NIC (stripe k: NIC k at both ends) and a transfer is split evenly over the stripes;
* ``fat_tree``: as switch, plus the two leaves' aggregated uplinks when the leaves differ;
* ``ring``/``torus``: the node-to-node links of a dimension-ordered shortest path.

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
from typing import Sequence

from .devices import DEVICE_KINDS
from .spec import LinkSpec, PlatformSpec

__all__ = ["Link", "LinkList", "StripedRoute", "Device", "Platform"]


@dataclass(eq=False)
class Link:
    """One direction of a physical link, or the capacity both directions of one share.

    ``counts_bytes`` is False for a shared capacity (half duplex, aggregate cap): flows cross
    it and it has busy time, but their bytes are counted on the directional links only, so
    byte counters (and ``comm_bytes``) do not depend on how a link's directions are capped.
    """

    index: int
    name: str
    kind: str
    latency_s: float
    bandwidth_Bps: float
    counts_bytes: bool = True

    def __repr__(self) -> str:
        return f"Link({self.name}, {self.kind}, {self.bandwidth_Bps:.3g} B/s)"


class LinkList(list):
    """A platform's links, in index order, carrying the rule by which flows share them.

    ``sharing`` is the fabric's rule (``FabricSpec.sharing``); a flow network built on these
    links uses it unless told otherwise, so every network made from ``platform.links`` shares
    bandwidth the way the platform file says.
    """

    def __init__(self, sharing: str = "max-min"):
        super().__init__()
        self.sharing = sharing


class StripedRoute(tuple):
    """A multi-rail route between two ranks: one stripe (a route) per NIC pair.

    A transfer over it is split evenly across ``stripes`` and completes with its last stripe
    (:meth:`~simdist.platform.network.FlowNetwork.transfer`). As a tuple it is its first
    stripe, so code that reads a route as one path (summed latency, one rail's bandwidth)
    still gets a true figure for one rail.
    """

    stripes: tuple[tuple[Link, ...], ...]

    def __new__(cls, stripes: Sequence[tuple[Link, ...]]) -> "StripedRoute":
        route = super().__new__(cls, stripes[0])
        route.stripes = tuple(stripes)
        return route

    def __getnewargs__(self) -> tuple:  # copy and pickle rebuild it from its stripes
        return (self.stripes,)


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
        self._ports = [self._duplex(f"n{d.node}.d{d.local_rank}", spec.node.intra_link, half_latency=True)
                       for d in self.devices]
        self._nics = [[self._duplex(f"n{n}.nic{k}", spec.node.nic_link, half_latency=True)
                       for k in range(spec.node.nics)] for n in range(spec.nodes)]
        self._leaves = self._make_leaves(spec) if spec.fabric.topology == "fat_tree" else []
        self._torus_links: dict[tuple[int, int], tuple[Link, ...]] = {}  # (node, neighbour) -> its hops
        if spec.fabric.topology in ("ring", "torus"):
            self._make_torus_links(spec)
        self._routes: dict[tuple[int, int], tuple[Link, ...]] = {}

    # -- construction -------------------------------------------------------------------

    @staticmethod
    def _make_devices(spec: PlatformSpec) -> list[Device]:
        overrides: dict[int, dict] = {}
        for override in spec.device_overrides:
            fields = {k: v for k, v in (("speed", override.speed), ("cpus", override.cpus)) if v is not None}
            for rank in override.ranks:
                overrides.setdefault(rank, {}).update(fields)
        base = spec.node.device
        kind = DEVICE_KINDS.get(base.kind)
        devices = []
        for rank in range(spec.device_count):
            node, local = divmod(rank, spec.node.devices)
            fields = overrides.get(rank, {})
            cpus = fields.get("cpus", base.cpus)
            if cpus is None and not kind.is_gpu:
                cpus = 1.0
            devices.append(Device(rank, node, local, base.kind, fields.get("speed", base.speed), cpus,
                                  base.peak_flops or kind.peak_flops))
        return devices

    def _link(self, name: str, kind: str, latency_s: float, bandwidth_Bps: float, *,
              counts_bytes: bool = True) -> Link:
        link = Link(len(self.links), name, kind, latency_s, bandwidth_Bps, counts_bytes)
        self.links.append(link)
        return link

    def _duplex(self, name: str, spec: LinkSpec, *, half_latency: bool = False,
                bandwidth_Bps: float | None = None) -> tuple[tuple[Link, ...], tuple[Link, ...]]:
        """The hops of each direction of a physical link: ``(up hops, down hops)``, each its
        directional link, followed by the shared capacity when the spec asks for one."""
        latency = spec.latency_s / 2 if half_latency else spec.latency_s
        bw = bandwidth_Bps if bandwidth_Bps is not None else spec.bandwidth_Bps
        up = self._link(f"{name}.up", spec.kind, latency, bw)
        down = self._link(f"{name}.down", spec.kind, latency, bw)
        both = self._shared_capacity(name, spec, bw)
        return ((up,), (down,)) if both is None else ((up, both), (down, both))

    def _shared_capacity(self, name: str, spec: LinkSpec, bandwidth_Bps: float) -> Link | None:
        """The capacity both directions of a link share: its bandwidth when half duplex, its
        ``aggregate_bandwidth`` when capped; None for an uncapped full-duplex link."""
        if spec.duplex == "half":
            capacity = bandwidth_Bps
        elif spec.aggregate_bandwidth is not None:
            capacity = spec.aggregate_bandwidth
        else:
            return None
        return self._link(f"{name}.both", spec.kind, 0.0, capacity, counts_bytes=False)

    def _make_leaves(self, spec: PlatformSpec) -> list[tuple[tuple[Link, ...], tuple[Link, ...]]]:
        per_leaf = spec.fabric.nodes_per_leaf
        leaves = []
        for leaf in range((spec.nodes + per_leaf - 1) // per_leaf):
            nodes_here = min(per_leaf, spec.nodes - leaf * per_leaf)
            uplink_Bps = nodes_here * spec.node.nics * spec.node.nic_link.bandwidth_Bps / spec.fabric.oversubscription
            # switch traversal latency is taken as included in the NIC kind's port-to-port figure
            leaves.append(self._duplex(f"leaf{leaf}", LinkSpec(kind=spec.node.nic_link.kind, latency=0.0),
                                       bandwidth_Bps=uplink_Bps))
        return leaves

    def torus_dims(self) -> list[int]:
        return list(self.spec.fabric.dims or [self.spec.nodes])

    def _make_torus_links(self, spec: PlatformSpec) -> None:
        link_spec = spec.fabric.link or spec.node.nic_link
        for node in range(spec.nodes):
            for neighbour in self._torus_neighbours(node):
                if (node, neighbour) not in self._torus_links:
                    link = self._link(f"n{node}->n{neighbour}", link_spec.kind, link_spec.latency_s,
                                      link_spec.bandwidth_Bps)
                    reverse = self._torus_links.get((neighbour, node))
                    if reverse is not None:  # the other direction exists: share its capacity, if any
                        both = reverse[1] if len(reverse) > 1 else None
                    else:
                        a, b = sorted((node, neighbour))
                        both = self._shared_capacity(f"n{a}<->n{b}", link_spec, link_spec.bandwidth_Bps)
                    self._torus_links[(node, neighbour)] = (link,) if both is None else (link, both)

    def _coords(self, node: int) -> list[int]:
        coords = []
        for d in self.torus_dims():
            node, c = divmod(node, d)
            coords.append(c)
        return coords

    def _node_at(self, coords: list[int]) -> int:
        node, scale = 0, 1
        for c, d in zip(coords, self.torus_dims()):
            node += c * scale
            scale *= d
        return node

    def _torus_neighbours(self, node: int) -> list[int]:
        out = []
        coords = self._coords(node)
        for axis, d in enumerate(self.torus_dims()):
            for step in (1, -1):
                if d > 1:
                    c = list(coords)
                    c[axis] = (c[axis] + step) % d
                    out.append(self._node_at(c))
        return [n for n in dict.fromkeys(out) if n != node]

    # -- queries ----------------------------------------------------------------------

    @property
    def size(self) -> int:
        return len(self.devices)

    def node_of(self, rank: int) -> int:
        return self.devices[rank].node

    def ranks_on_node(self, node: int) -> list[int]:
        per = self.spec.node.devices
        return list(range(node * per, (node + 1) * per))

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
        if self.spec.fabric.topology in ("ring", "torus"):
            return tuple(self._torus_path(a.node, b.node))
        nics = self.spec.node.nics
        if self.spec.node.nic_policy == "multi-rail" and nics > 1:
            return StripedRoute([self._rail(a.node, b.node, k, k) for k in range(nics)])
        return self._rail(a.node, b.node, a.local_rank % nics, b.local_rank % nics)

    def _rail(self, src_node: int, dst_node: int, src_nic: int, dst_nic: int) -> tuple[Link, ...]:
        """Sender NIC up, the leaves' uplinks when the leaves differ, receiver NIC down."""
        route = [*self._nics[src_node][src_nic][0]]
        if self._leaves:
            per_leaf = self.spec.fabric.nodes_per_leaf
            la, lb = src_node // per_leaf, dst_node // per_leaf
            if la != lb:
                route += [*self._leaves[la][0], *self._leaves[lb][1]]
        route += self._nics[dst_node][dst_nic][1]
        return tuple(route)

    def _torus_path(self, src_node: int, dst_node: int) -> list[Link]:
        """Dimension-ordered shortest path (ties go in the + direction)."""
        path: list[Link] = []
        coords, target = self._coords(src_node), self._coords(dst_node)
        for axis, d in enumerate(self.torus_dims()):
            forward = (target[axis] - coords[axis]) % d
            step = 1 if forward <= d - forward else -1
            while coords[axis] != target[axis]:
                here = self._node_at(coords)
                coords[axis] = (coords[axis] + step) % d
                path.extend(self._torus_links[(here, self._node_at(coords))])
        return path

    def describe(self) -> dict:
        """A JSON-able description (the resolved spec plus derived counts) for the manifest."""
        out = self.spec.model_dump(mode="json")
        out["ranks"] = self.size
        out["links"] = len(self.links)
        return out
