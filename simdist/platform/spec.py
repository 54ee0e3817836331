"""Platform files: the hardware only (nodes, devices, links, fabric), validated by pydantic.

Scenario files say what runs on a platform; platform files say what it is. A platform is
``nodes`` identical nodes of ``node.devices`` devices each (rank = node · devices + local
index), an intra-node link kind, ``node.nics`` NICs per node (device k uses NIC k mod nics,
or every transfer is striped over all of them: ``node.nic_policy``) and a fabric joining the
nodes. Links are full duplex unless ``duplex: half`` or ``aggregate_bandwidth`` says
otherwise; how flows share a bottleneck is ``fabric.sharing`` (``docs/network.md``).
Individual ranks may differ through ``device_overrides`` (speed factor, CPU share), and whole
nodes through ``node_groups`` (their own device count and kind, cores, NICs, links: the fields a
group gives replace the ``node`` defaults for its nodes), which is how heterogeneous clusters are
described; ranks are numbered node by node. Whether non-blocking communication moves on its own
or only inside the ranks' calls is ``progress`` (``docs/network.md``, "MPI progress").

Units are strings at the edge (``"200Gbps"``, ``"1.5us"``) or SI numbers.
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from ..config import USER_CONFIG
from .cost_spec import CallCostSpec, CollectiveCostSpec, MessageCostSpec
from .devices import DEVICE_KINDS
from .links import LINK_KINDS
from .quantities import MAX_DEVICES, MIN_CPUS, BytesPerSecond, FlopsPerSecond, Interval, LatencySeconds, Seconds

__all__ = ["LinkSpec", "DeviceSpec", "CoreSet", "CoRunSpec", "NodeSpec", "FabricSpec", "DeviceOverride", "NodeGroup",
           "PlatformSpec", "merge_platform_fields", "Seconds", "LatencySeconds", "Interval", "BytesPerSecond",
           "FlopsPerSecond", "MAX_DEVICES"]


def merge_platform_fields(base: Any, override: Any) -> Any:
    """``override`` laid over ``base``, mapping by mapping (what a platform file, an overlay or a
    node group changes of what lies below it).

    A link given by its kind alone (``intra_link: shm``) and overridden by a mapping
    (``{bandwidth: 10GBps}``) keeps its kind: the name is read as ``{kind: shm}`` first, so one
    field of a link can be changed without restating its kind.
    """
    if not isinstance(override, dict):
        return override
    if isinstance(base, str):
        base = {"kind": base}  # a link named by its kind (LinkSpec's shorthand)
    if not isinstance(base, dict):
        return override
    out = dict(base)
    for key, value in override.items():
        out[key] = merge_platform_fields(out[key], value) if key in out else value
    return out


class _Frozen(BaseModel):
    model_config = USER_CONFIG


class LinkSpec(_Frozen):
    """A link kind, optionally with its latency or bandwidth overridden, and how its two
    directions share capacity (``docs/network.md``, "Link semantics")."""

    kind: str = Field(description="named link kind (simdist list links), e.g. nvlink3, ib-hdr, shm")
    latency: LatencySeconds | None = Field(None, description="one-way latency, e.g. '1.5us' (default: the kind's)")
    bandwidth: BytesPerSecond | None = Field(None, description="per direction, e.g. '200Gbps' or '25GBps' (default: the kind's)")
    duplex: Literal["full", "half"] = Field(
        "full", description="full: each direction has the whole bandwidth; half: both directions share one "
        "bandwidth (their rates add up to at most it). Default full")
    aggregate_bandwidth: BytesPerSecond | None = Field(
        None, description="full duplex only: cap on the sum of both directions' rates, bytes/s like bandwidth "
        "(e.g. '37.5GBps'), between bandwidth and 2 x bandwidth; what a NIC or PCIe link gives both ways at once "
        "(OSU bibw below 2 x bw). Default: none (each direction has its bandwidth)")

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, value):
        return {"kind": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _kind_known(self):
        LINK_KINDS.check(self.kind)
        return self

    @field_validator("aggregate_bandwidth")
    @classmethod
    def _aggregate_within_bandwidth(cls, value, info: ValidationInfo):
        """``bandwidth <= aggregate_bandwidth <= 2 x bandwidth``, on a full-duplex link."""
        if value is None:
            return value
        if info.data.get("duplex") == "half":
            raise ValueError("a half-duplex link's directions already share its bandwidth; give duplex: half "
                             "or aggregate_bandwidth, not both")
        bandwidth = info.data.get("bandwidth")
        if bandwidth is None:
            kind = info.data.get("kind")
            if kind not in LINK_KINDS:
                return value  # the kind is refused on its own
            bandwidth = LINK_KINDS.get(kind).bandwidth_Bps
        if not bandwidth <= value <= 2 * bandwidth:
            raise ValueError(f"must be between bandwidth ({bandwidth:g} B/s) and 2 x bandwidth "
                             f"({2 * bandwidth:g} B/s), got {value:g} B/s")
        return value

    @property
    def latency_s(self) -> float:
        return self.latency if self.latency is not None else LINK_KINDS.get(self.kind).latency_s

    @property
    def bandwidth_Bps(self) -> float:
        return self.bandwidth if self.bandwidth is not None else LINK_KINDS.get(self.kind).bandwidth_Bps


class DeviceSpec(_Frozen):
    """The device every rank of a node has (unless overridden per rank)."""

    kind: str = Field("cpu", description="device kind (simdist list devices): cpu, a100, h100")
    speed: float = Field(1.0, ge=1e-3, le=1e3, description="speed factor: compute times are divided by it, 0.001 .. 1000 (default 1)")
    cpus: float | None = Field(None, ge=MIN_CPUS, le=65536, description="CPU share of a cpu rank, like docker --cpus, >= 0.01 (default 1)")
    peak_flops: FlopsPerSecond | None = Field(None, description="override of the kind's peak, e.g. '19.5TFLOPS'")

    @model_validator(mode="after")
    def _kind_known(self):
        DEVICE_KINDS.check(self.kind)
        return self


class CoreSet(_Frozen):
    """Cores of a node that some of its cpu ranks are pinned to (``taskset``): they share them alone."""

    cores: float = Field(ge=MIN_CPUS, le=65536, description="cores in the set, >= 0.01")
    devices: list[Annotated[int, Field(ge=0)]] = Field(
        min_length=1, description="the node's devices (local ranks 0..devices-1) pinned to the set")


class CoRunSpec(_Frozen):
    """How a node's CPU ranks slow each other beyond sharing cores (caches, memory bandwidth,
    SMT, context switches), as ``simdist calibrate cpu-share`` measures it."""

    undersubscribed_factor: float = Field(1.0, ge=1.0, le=10.0, description=(
        "slow-down of every rank when 2 or more ranks run on at least as many cores (k <= c): shared caches "
        "and memory bandwidth. Default 1"))
    oversubscribed_factor: float = Field(1.0, ge=1.0, le=10.0, description=(
        "slow-down on top of processor sharing when more ranks than cores (k > c): context switches. Default 1"))
    wake_run_s: float = Field(0.0, ge=0.0, le=1.0, description=(
        "seconds a rank that starts work after waiting runs ahead of the core-mates already running on its "
        "shared cores, which pause meanwhile (the scheduler favours a task waking from sleep); after that "
        "they share. 0 (default): processor sharing from the first instant"))
    slice_s: float = Field(0.0, ge=0.0, le=1.0, description=(
        "the scheduler's time slice: where ranks outnumber their cores, a core runs one of them at a time and "
        "switches at ticks this far apart (a woken rank preempts at once and keeps its core for wake_run_s). "
        "0 (default): processor sharing, every rank at a fraction of a core"))
    source: str = Field(min_length=1, description="where the factors come from (the cpu-share calibration file)")


class NodeSpec(_Frozen):
    """One node: its devices, intra-node interconnect and NICs."""

    devices: int = Field(1, ge=1, le=4096, description="devices (ranks) per node, at most 4096")
    device: DeviceSpec = Field(default_factory=DeviceSpec)
    cores: float | None = Field(None, ge=MIN_CPUS, le=65536, description="CPU cores the node's cpu ranks share (processor sharing); "
                                "default: every rank has its cpus to itself")
    core_sets: list[CoreSet] | None = Field(
        None, description="instead of cores: the node's cores split into pinned sets, each shared (processor "
        "sharing) by the devices pinned to it; a device in no set has its cpus to itself")
    intra_link: LinkSpec = Field(LinkSpec(kind="shm"), description="device ↔ node interconnect port, per device")
    host_link: LinkSpec | None = Field(None, description=(
        "GPU ↔ host memory link, per device (PCIe), crossed by collectives staged through host memory "
        "(DASO's global_staging: host); default: the device kind's host interface (a100: pcie4, h100: pcie5; "
        "simdist.platform.host_staging); cpu devices have none (their data is in host memory)"))
    storage_write_bandwidth: BytesPerSecond | None = Field(None, description=(
        "what the node's storage takes a checkpoint at, e.g. '2GBps' (a parallel file system's share, a disk "
        "written through); default: none below host memory (a checkpoint lands in the page cache: "
        "simdist.training.epoch_end)"))
    nics: int = Field(1, ge=1, le=64, description="network interfaces per node; device k uses NIC k mod nics")
    co_run: CoRunSpec | None = Field(None, description=(
        "measured slow-down of cpu ranks that share the node (simdist calibrate cpu-share --overlay); default: "
        "none beyond processor sharing"))
    nic_policy: Literal["by-device", "multi-rail"] = Field(
        "by-device", description="which NICs a transfer to another node uses. by-device: device k's NIC k mod nics; "
        "multi-rail: all of them, the transfer split evenly in one stripe per NIC (stripe k leaves by NIC k and "
        "arrives by NIC k, as NCCL and MPI multi-rail do) and done when its last stripe is; switch and fat_tree "
        "fabrics only (ring/torus routes do not cross NICs). Default by-device")
    nic_link: LinkSpec = Field(LinkSpec(kind="ib-hdr"), description="NIC ↔ fabric link, per NIC")

    @model_validator(mode="after")
    def _core_sets_consistent(self):
        if self.core_sets is None:
            return self
        if self.cores is not None:
            raise ValueError("cores and core_sets: give one (core_sets already says how many cores each set has)")
        seen: dict[int, int] = {}
        for i, core_set in enumerate(self.core_sets):
            for device in core_set.devices:
                if device >= self.devices:
                    raise ValueError(f"core_sets[{i}].devices: device {device} does not exist "
                                     f"(a node has devices 0..{self.devices - 1})")
                if device in seen:
                    raise ValueError(f"core_sets[{i}].devices: device {device} is already in core_sets[{seen[device]}];"
                                     " a device is pinned to one set")
                seen[device] = i
        return self

    @property
    def shares_cores(self) -> bool:
        """Whether the node's cpu ranks share cores (``cores`` or ``core_sets``): compute rates then
        depend on what the other ranks do from moment to moment."""
        return self.cores is not None or self.core_sets is not None

    def core_pools(self) -> list[tuple[float, list[int]]]:
        """(cores, local ranks) of each pool of shared cores: the node's ``cores`` for all its
        devices, or each of its ``core_sets``; none where every rank has its cpus to itself."""
        if self.core_sets is not None:
            return [(core_set.cores, list(core_set.devices)) for core_set in self.core_sets]
        return [] if self.cores is None else [(self.cores, list(range(self.devices)))]


class FabricSpec(_Frozen):
    """How nodes connect."""

    topology: Literal["switch", "fat_tree", "ring", "torus"] = Field(
        "switch", description="switch: one non-blocking switch; fat_tree: two levels, leaves of nodes_per_leaf "
        "nodes with uplinks of (leaf NIC bandwidth / oversubscription); ring/torus: direct node-to-node links")
    nodes_per_leaf: int = Field(8, ge=1, le=MAX_DEVICES, description="fat_tree: nodes under one leaf switch")
    oversubscription: float = Field(1.0, ge=1.0, le=1000.0, description="fat_tree: leaf down/up bandwidth ratio (1 = full bisection)")
    dims: list[Annotated[int, Field(ge=1, le=MAX_DEVICES)]] | None = Field(
        None, description="torus: nodes per dimension, product = nodes (default: a ring of all nodes)")
    link: LinkSpec | None = Field(None, description="ring/torus: node-to-node link (default: the NIC link)")
    sharing: Literal["max-min", "rtt-weighted"] = Field(
        "max-min", description="how flows share a bottleneck link. max-min: equal shares (max-min fairness); "
        "rtt-weighted: shares proportional to 1/RTT, RTT = 2 x the route's summed latency, as TCP "
        "and SimGrid's CM02/LV08 models (weighted max-min). Default max-min")


class DeviceOverride(_Frozen):
    """Per-rank differences from the node's device (heterogeneous clusters)."""

    ranks: list[Annotated[int, Field(ge=0)]] = Field(min_length=1, description="ranks this override applies to")
    speed: float | None = Field(None, ge=1e-3, le=1e3, description="speed factor, 0.001 .. 1000")
    cpus: float | None = Field(None, ge=MIN_CPUS, le=65536, description="CPU share, >= 0.01")


class NodeGroup(_Frozen):
    """Nodes that differ from the platform's ``node`` (heterogeneous clusters).

    ``node`` gives the fields that differ; the group's nodes take every other field from the
    platform's ``node`` (a link keeps its kind when only its bandwidth is given). After
    validation ``node`` is the group's whole node.
    """

    nodes: list[Annotated[int, Field(ge=0)]] = Field(min_length=1, description="the nodes of the group (0 .. nodes-1)")
    node: NodeSpec = Field(description="what these nodes have, e.g. {devices: 8, device: {kind: h100}, nics: 4}")


class PlatformSpec(_Frozen):
    """The hardware a scenario runs on."""

    name: str = "custom"
    description: str = ""
    nodes: int = Field(1, ge=1, le=MAX_DEVICES, description="number of nodes")
    node: NodeSpec = Field(default_factory=NodeSpec)
    node_groups: list[NodeGroup] = Field(default_factory=list, description=(
        "nodes that differ from node: each group names its nodes and the node fields that differ (device count "
        "and kind, cores, NICs, links ...); default: every node is node"))
    fabric: FabricSpec = Field(default_factory=FabricSpec)
    device_overrides: list[DeviceOverride] = Field(default_factory=list)
    collectives: CollectiveCostSpec | None = Field(None, description=(
        "measured collective costs: tables of time against size, and the reduction rate (see "
        "docs/calibration.md); default: collectives are priced from the links"))
    messages: MessageCostSpec | None = Field(None, description=(
        "LogGP per-message costs (CPU overhead, gap, eager/rendezvous); default: a message costs its links only"))
    calls: CallCostSpec | None = Field(None, description=(
        "host CPU of the runtime's turn between two requests of an algorithm (calibrate network --path "
        "runtime measures it); default: the turns cost nothing"))
    progress: Literal["async", "on_call"] = Field(
        "async", description="how non-blocking communication advances (docs/network.md, \"MPI progress\"). async: "
        "on its own, as with NCCL or an MPI progress thread; on_call: only while its ranks are inside a runtime "
        "call (a wait, a receive, another collective), as MPICH and Open MPI without a progress thread. "
        "Default async")

    @model_validator(mode="before")
    @classmethod
    def _groups_over_node(cls, data: Any) -> Any:
        """Each node group's fields laid over the platform's ``node`` (before either is validated)."""
        if not isinstance(data, dict) or not isinstance(data.get("node_groups"), list):
            return data
        node = data.get("node", {})
        node = node.model_dump(exclude_unset=True) if isinstance(node, BaseModel) else node
        groups = []
        for group in data["node_groups"]:
            if isinstance(group, dict) and isinstance(group.get("node", {}), dict) and isinstance(node, dict):
                group = {**group, "node": merge_platform_fields(node, group.get("node", {}))}
            groups.append(group)
        return {**data, "node_groups": groups}

    def node_at(self, node: int) -> NodeSpec:
        """What node ``node`` has: its group's node, else ``node``."""
        return self._node_specs[node]

    @cached_property
    def _node_specs(self) -> list[NodeSpec]:
        specs = [self.node] * self.nodes
        for group in self.node_groups:
            for n in group.nodes:
                if n < self.nodes:
                    specs[n] = group.node
        return specs

    @cached_property
    def _first_ranks(self) -> list[int]:
        firsts, rank = [], 0
        for spec in self._node_specs:
            firsts.append(rank)
            rank += spec.devices
        return firsts

    @property
    def heterogeneous_nodes(self) -> bool:
        """Whether some node differs from ``node`` (a node group)."""
        return bool(self.node_groups)

    @property
    def device_count(self) -> int:
        if not self.node_groups:
            return self.nodes * self.node.devices
        return sum(spec.devices for spec in self._node_specs)

    def first_rank(self, node: int) -> int:
        """The rank of node ``node``'s first device (ranks are numbered node by node)."""
        if not self.node_groups:
            return node * self.node.devices
        return self._first_ranks[node]

    @model_validator(mode="after")
    def _consistent(self):
        grouped: dict[int, int] = {}
        for i, group in enumerate(self.node_groups):
            for n in group.nodes:
                if n >= self.nodes:
                    raise ValueError(f"node_groups[{i}].nodes: node {n} does not exist (the platform has nodes "
                                     f"0..{self.nodes - 1})")
                if n in grouped:
                    raise ValueError(f"node_groups[{i}].nodes: node {n} is already in node_groups[{grouped[n]}]; "
                                     "a node belongs to one group")
                grouped[n] = i
        if self.device_count > MAX_DEVICES:
            raise ValueError(f"the nodes have {self.device_count} devices in all; a platform may have at most "
                             f"{MAX_DEVICES}")
        for i, override in enumerate(self.device_overrides):
            bad = [r for r in override.ranks if r >= self.device_count]
            if bad:
                raise ValueError(f"device_overrides[{i}].ranks: rank {bad[0]} does not exist "
                                 f"(the platform has ranks 0..{self.device_count - 1})")
        dims = self.fabric.dims
        if self.fabric.topology == "torus" and dims is not None:
            product = 1
            for d in dims:
                product *= d
            if product != self.nodes:
                raise ValueError(f"fabric.dims {dims} multiply to {product}, but the platform has {self.nodes} nodes")
        return self
