"""Platform presets named after real machines; ordinary code producing platform mappings.

A scenario names a preset (``platform: dgx-a100``) or starts from one and overrides fields
(``platform: {preset: cluster-a100-hdr, nodes: 16}``). Figures come from
``hardware_reference.csv`` through the link and device kinds; the rows are named there and
in the comments below.
"""

from __future__ import annotations

from typing import Any, Callable

from ..registry import Registry

__all__ = ["PLATFORMS", "preset"]

PLATFORMS: Registry[Callable[[], dict[str, Any]]] = Registry("platform")


@PLATFORMS.register("laptop-cpu", "1 node of N CPU ranks (default 4), one core each, talking over shared memory")
def _laptop_cpu() -> dict[str, Any]:
    return {
        "name": "laptop-cpu",
        "description": "one host; CPU ranks with one core each; shared-memory transport",
        "nodes": 1,
        "node": {
            "devices": 4,
            "device": {"kind": "cpu", "cpus": 1.0},
            "intra_link": "shm",
            "nics": 1,
            "nic_link": "ethernet-tcp",
        },
        "fabric": {"topology": "switch"},
    }


@PLATFORMS.register("dgx-a100", "one DGX A100: 8 A100 on NVSwitch, 8 HDR 200 Gb/s NICs",
                    citation="hardware_reference.csv: inter_node 'DGX A100 / MLPerf v1.0 NVIDIA system compute network' "
                             "= 8 x ConnectX-6 IB HDR 200Gb/Sec; intra_node 'NVSwitch speed'")
def _dgx_a100() -> dict[str, Any]:
    return {
        "name": "dgx-a100",
        "description": "NVIDIA DGX A100: 8 A100-SXM on NVSwitch (NVLink 3 speed), 8 x HDR 200 Gb/s",
        "nodes": 1,
        "node": {
            "devices": 8,
            "device": {"kind": "a100"},
            "intra_link": "nvswitch",  # row: intra_node 'NVSwitch speed' (= NVLink 3, 300 GB/s)
            "nics": 8,  # row: inter_node 'DGX A100 / MLPerf v1.0 ...' 8 x ConnectX-6 HDR
            "nic_link": "ib-hdr",
        },
        "fabric": {"topology": "switch"},
    }


@PLATFORMS.register("cluster-a100-hdr", "P nodes (default 4) x 4 A100 on NVLink 3, one HDR 200 Gb/s NIC per GPU, fat tree",
                    citation="hardware_reference.csv: intra_node 'NVLink 3 (A100) per GPU'; inter_node "
                             "'InfiniBand HDR per lane / 4x port'")
def _cluster_a100_hdr() -> dict[str, Any]:
    return {
        "name": "cluster-a100-hdr",
        "description": "nodes of 4 A100 (NVLink 3 inside), one HDR 200 Gb/s NIC per GPU, non-blocking two-level fat tree",
        "nodes": 4,
        "node": {
            "devices": 4,
            "device": {"kind": "a100"},
            "intra_link": "nvlink3",  # row: intra_node 'NVLink 3 (A100) per GPU' = 300 GB/s unidirectional
            "nics": 4,
            "nic_link": "ib-hdr",  # row: inter_node 'InfiniBand HDR per lane / 4x port' = 200 Gb/s
        },
        "fabric": {"topology": "fat_tree", "nodes_per_leaf": 8, "oversubscription": 1.0},
    }


def preset(name: str) -> dict[str, Any]:
    """A fresh mapping of preset ``name`` (InputError listing the presets on a typo)."""
    return PLATFORMS.get(name)()
