"""How nodes connect: the fabrics a platform file may name (``fabric.topology``), by registry.

Each fabric is registered by name with a one-line description and its source
(``simdist list topologies``). A fabric builds its own links on the platform, after the
devices' ports and the nodes' NICs, and gives the inter-node part of a route:

* ``switch``: one non-blocking switch; a route is the sender's NIC up and the receiver's NIC
  down (GPUDirect-style: NIC traffic does not cross the intra-node interconnect). Device k
  uses NIC k mod nics; with ``node.nic_policy: multi-rail`` a route is a
  :class:`~simdist.platform.routes.StripedRoute`, one stripe per NIC (stripe k: NIC k at both
  ends), as NCCL and MPI stripe over rails;
* ``fat_tree``: as ``switch``, plus the two leaves' aggregated uplinks when the leaves differ
  (two levels; a leaf's uplink carries its nodes' NIC bandwidth divided by the
  oversubscription ratio);
* ``ring`` and ``torus``: direct node-to-node links (``fabric.link``, default the NIC link)
  and dimension-ordered shortest paths, ties going in the + direction; a ring is the torus of
  one dimension.
"""

from __future__ import annotations

from typing import Protocol

from ..registry import Registry
from .routes import Link, StripedRoute
from .spec import LinkSpec, PlatformSpec

__all__ = ["FABRICS", "Fabric", "SwitchFabric", "FatTreeFabric", "TorusFabric", "LinkBuilder", "make_fabric"]

Hops = tuple[tuple[Link, ...], tuple[Link, ...]]  # (up hops, down hops) of one duplex link

FABRICS: Registry[type["Fabric"]] = Registry("topology")


class LinkBuilder(Protocol):
    """What a fabric needs of the platform it is built on (:class:`~simdist.platform.topology.Platform`)."""

    nics: list[list[Hops]]  # node -> NIC -> its hops

    def new_link(self, name: str, kind: str, latency_s: float, bandwidth_Bps: float) -> Link: ...

    def duplex(self, name: str, spec: LinkSpec, *, bandwidth_Bps: float | None = None) -> Hops: ...

    def shared_capacity(self, name: str, spec: LinkSpec, bandwidth_Bps: float) -> Link | None: ...


class Place(Protocol):
    """Where a rank sits (:class:`~simdist.platform.topology.Device`)."""

    node: int
    local_rank: int


class Fabric:
    """Builds a fabric's links on ``platform`` and routes between ranks on different nodes."""

    def __init__(self, platform: LinkBuilder, spec: PlatformSpec):
        self.platform = platform
        self.spec = spec

    def route(self, a: Place, b: Place) -> tuple[Link, ...]:
        """The links a message from device ``a`` to device ``b`` (on another node) crosses."""
        raise NotImplementedError


@FABRICS.register("switch", "one non-blocking switch: sender NIC up, receiver NIC down",
                  citation="a non-blocking crossbar switch (Dally and Towles, Principles and Practices of "
                           "Interconnection Networks, 2004, ch. 6)")
class SwitchFabric(Fabric):
    """Routes over the nodes' NICs (one rail, or every rail with multi-rail striping)."""

    def route(self, a: Place, b: Place) -> tuple[Link, ...]:
        src, dst = self.spec.node_at(a.node), self.spec.node_at(b.node)
        rails = min(src.nics, dst.nics)  # nodes of different groups stripe over the rails both have
        if src.nic_policy == "multi-rail" and dst.nic_policy == "multi-rail" and rails > 1:
            return StripedRoute([self._rail(a.node, b.node, k, k) for k in range(rails)])
        return self._rail(a.node, b.node, a.local_rank % src.nics, b.local_rank % dst.nics)

    def _rail(self, src_node: int, dst_node: int, src_nic: int, dst_nic: int) -> tuple[Link, ...]:
        """Sender NIC up, what lies between the two nodes, receiver NIC down."""
        nics = self.platform.nics
        return (*nics[src_node][src_nic][0], *self._between(src_node, dst_node), *nics[dst_node][dst_nic][1])

    def _between(self, src_node: int, dst_node: int) -> tuple[Link, ...]:
        return ()


@FABRICS.register("fat_tree", "two levels: leaves of nodes_per_leaf nodes whose uplinks carry the leaf's NIC "
                              "bandwidth / oversubscription",
                  citation="Leiserson, Fat-trees: universal networks for hardware-efficient supercomputing, "
                           "IEEE Trans. Computers C-34(10), 1985")
class FatTreeFabric(SwitchFabric):
    """A switch fabric whose leaves meet through aggregated (possibly oversubscribed) uplinks."""

    def __init__(self, platform: LinkBuilder, spec: PlatformSpec):
        super().__init__(platform, spec)
        self.leaves = self._make_leaves()

    def _make_leaves(self) -> list[Hops]:
        spec, per_leaf = self.spec, self.spec.fabric.nodes_per_leaf
        leaves = []
        for leaf in range((spec.nodes + per_leaf - 1) // per_leaf):
            here = [spec.node_at(n) for n in range(leaf * per_leaf, min(spec.nodes, (leaf + 1) * per_leaf))]
            uplink_Bps = sum(node.nics * node.nic_link.bandwidth_Bps for node in here) / spec.fabric.oversubscription
            # switch traversal latency is taken as included in the NIC kind's port-to-port figure
            leaves.append(self.platform.duplex(f"leaf{leaf}", LinkSpec(kind=spec.node.nic_link.kind, latency=0.0),
                                               bandwidth_Bps=uplink_Bps))
        return leaves

    def _between(self, src_node: int, dst_node: int) -> tuple[Link, ...]:
        per_leaf = self.spec.fabric.nodes_per_leaf
        la, lb = src_node // per_leaf, dst_node // per_leaf
        return () if la == lb else (*self.leaves[la][0], *self.leaves[lb][1])


class TorusFabric(Fabric):
    """Direct node-to-node links on a k-dimensional torus, dimension-ordered routing."""

    def __init__(self, platform: LinkBuilder, spec: PlatformSpec):
        super().__init__(platform, spec)
        self.dims = list(spec.fabric.dims or [spec.nodes])
        self.hops: dict[tuple[int, int], tuple[Link, ...]] = {}  # (node, neighbour) -> its hops
        self._make_links()

    def _make_links(self) -> None:
        link_spec = self.spec.fabric.link or self.spec.node.nic_link
        for node in range(self.spec.nodes):
            for neighbour in self._neighbours(node):
                if (node, neighbour) not in self.hops:
                    self.hops[(node, neighbour)] = self._hop(node, neighbour, link_spec)

    def _hop(self, node: int, neighbour: int, link_spec: LinkSpec) -> tuple[Link, ...]:
        """The directional link to ``neighbour``, sharing the reverse direction's capacity, if any."""
        link = self.platform.new_link(f"n{node}->n{neighbour}", link_spec.kind, link_spec.latency_s,
                                      link_spec.bandwidth_Bps)
        reverse = self.hops.get((neighbour, node))
        if reverse is not None:
            both = reverse[1] if len(reverse) > 1 else None
        else:
            a, b = sorted((node, neighbour))
            both = self.platform.shared_capacity(f"n{a}<->n{b}", link_spec, link_spec.bandwidth_Bps)
        return (link,) if both is None else (link, both)

    def _coords(self, node: int) -> list[int]:
        coords = []
        for d in self.dims:
            node, c = divmod(node, d)
            coords.append(c)
        return coords

    def _node_at(self, coords: list[int]) -> int:
        node, scale = 0, 1
        for c, d in zip(coords, self.dims):
            node += c * scale
            scale *= d
        return node

    def _neighbours(self, node: int) -> list[int]:
        out = []
        coords = self._coords(node)
        for axis, d in enumerate(self.dims):
            for step in (1, -1):
                if d > 1:
                    c = list(coords)
                    c[axis] = (c[axis] + step) % d
                    out.append(self._node_at(c))
        return [n for n in dict.fromkeys(out) if n != node]

    def route(self, a: Place, b: Place) -> tuple[Link, ...]:
        """Dimension-ordered shortest path (ties go in the + direction)."""
        path: list[Link] = []
        coords, target = self._coords(a.node), self._coords(b.node)
        for axis, d in enumerate(self.dims):
            forward = (target[axis] - coords[axis]) % d
            step = 1 if forward <= d - forward else -1
            while coords[axis] != target[axis]:
                here = self._node_at(coords)
                coords[axis] = (coords[axis] + step) % d
                path.extend(self.hops[(here, self._node_at(coords))])
        return tuple(path)


_TORUS_SOURCE = ("dimension-order routing on a k-ary n-cube (Dally and Towles, Principles and Practices of "
                 "Interconnection Networks, 2004, ch. 5 and 14)")
FABRICS.add("ring", TorusFabric, "direct node-to-node links in one ring (a torus of one dimension), shortest path",
            citation=_TORUS_SOURCE)
FABRICS.add("torus", TorusFabric, "direct node-to-node links on a torus of fabric.dims, dimension-ordered shortest "
                                  "paths", citation=_TORUS_SOURCE)


def make_fabric(platform: LinkBuilder, spec: PlatformSpec) -> Fabric:
    """The fabric ``spec.fabric.topology`` names, built on ``platform``."""
    return FABRICS.get(spec.fabric.topology)(platform, spec)
