"""Platform files: the hardware only (nodes, devices, links, fabric), validated by pydantic.

Scenario files say what runs on a platform; platform files say what it is. A platform is
``nodes`` identical nodes of ``node.devices`` devices each (rank = node · devices + local
index), an intra-node link kind, ``node.nics`` NICs per node (device k uses NIC k mod nics)
and a fabric joining the nodes. Individual ranks may differ through ``device_overrides``
(speed factor, CPU share), which is how heterogeneous clusters are described.

Units are strings at the edge (``"200Gbps"``, ``"1.5us"``) or SI numbers.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, Field, model_validator

from ..config import USER_CONFIG
from ..units import parse_bandwidth, parse_flops, parse_time
from .devices import DEVICE_KINDS
from .links import LINK_KINDS

__all__ = ["LinkSpec", "DeviceSpec", "CoreSet", "NodeSpec", "FabricSpec", "DeviceOverride", "PlatformSpec",
           "Seconds", "LatencySeconds", "Interval", "BytesPerSecond", "FlopsPerSecond", "MAX_DEVICES"]


MAX_DEVICES = 1 << 20  # a million ranks: beyond any cluster a scenario can describe today
MAX_LATENCY_S = 60.0  # slower than any link, a misplaced unit
MIN_BANDWIDTH_BPS, MAX_BANDWIDTH_BPS = 1.0, 1e15  # 1 B/s .. 1 PB/s (no link is faster)
MIN_FLOPS, MAX_FLOPS = 1e6, 1e18  # 1 MFLOP/s .. 1 EFLOP/s per device
MIN_CPUS = 0.01  # the CPU share granularity of docker --cpus and cgroups


def _within(parse, low: float, high: float, example: str):
    """``parse`` and then check ``low <= value <= high`` (the physical range of the quantity)."""
    def check(value):
        x = parse(value)
        if x <= 0:
            raise ValueError(f"must be greater than zero, got {value!r}")
        if not low <= x <= high:
            raise ValueError(f"must be between {low:g} and {high:g} {example}, got {value!r}")
        return x
    return check


def _time_between(low: float, high: float):
    def check(value):
        x = parse_time(value)
        if not low <= x <= high:
            raise ValueError(f"must be between {low:g} s and {high:g} s, got {value!r}")
        return x
    return check


Seconds = Annotated[float, BeforeValidator(parse_time)]
LatencySeconds = Annotated[float, BeforeValidator(_time_between(0.0, MAX_LATENCY_S))]
MIN_INTERVAL_S, MAX_INTERVAL_S = 1e-9, 1e9  # 1 ns (below, a timer stalls a clock of seconds) .. 30 years
Interval = Annotated[float, BeforeValidator(_time_between(MIN_INTERVAL_S, MAX_INTERVAL_S))]
BytesPerSecond = Annotated[float, BeforeValidator(_within(parse_bandwidth, MIN_BANDWIDTH_BPS, MAX_BANDWIDTH_BPS,
                                                          "bytes/s (1Bps .. 1PBps)"))]
FlopsPerSecond = Annotated[float, BeforeValidator(_within(parse_flops, MIN_FLOPS, MAX_FLOPS, "FLOP/s"))]


class _Frozen(BaseModel):
    model_config = USER_CONFIG


class LinkSpec(_Frozen):
    """A link kind, optionally with its latency or bandwidth overridden."""

    kind: str = Field(description="named link kind (simdist list links), e.g. nvlink3, ib-hdr, shm")
    latency: LatencySeconds | None = Field(None, description="one-way latency, e.g. '1.5us' (default: the kind's)")
    bandwidth: BytesPerSecond | None = Field(None, description="per direction, e.g. '200Gbps' or '25GBps' (default: the kind's)")

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, value):
        return {"kind": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _kind_known(self):
        LINK_KINDS.check(self.kind)
        return self

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
    nics: int = Field(1, ge=1, le=64, description="network interfaces per node; device k uses NIC k mod nics")
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


class DeviceOverride(_Frozen):
    """Per-rank differences from the node's device (heterogeneous clusters)."""

    ranks: list[Annotated[int, Field(ge=0)]] = Field(min_length=1, description="ranks this override applies to")
    speed: float | None = Field(None, ge=1e-3, le=1e3, description="speed factor, 0.001 .. 1000")
    cpus: float | None = Field(None, ge=MIN_CPUS, le=65536, description="CPU share, >= 0.01")


class PlatformSpec(_Frozen):
    """The hardware a scenario runs on."""

    name: str = "custom"
    description: str = ""
    nodes: int = Field(1, ge=1, le=MAX_DEVICES, description="number of identical nodes")
    node: NodeSpec = Field(default_factory=NodeSpec)
    fabric: FabricSpec = Field(default_factory=FabricSpec)
    device_overrides: list[DeviceOverride] = Field(default_factory=list)

    @property
    def device_count(self) -> int:
        return self.nodes * self.node.devices

    @model_validator(mode="after")
    def _consistent(self):
        if self.device_count > MAX_DEVICES:
            raise ValueError(f"nodes x node.devices = {self.device_count} devices; a platform may have at most "
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
