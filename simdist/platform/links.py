"""Named link kinds with their default latency and bandwidth.

By default a link is full duplex: each direction has the full ``bandwidth_Bps``. Figures
come from ``hardware_reference.csv`` (published data sheets and maintainers' measurements);
the row each one comes from is named in ``source``. Platform files may override latency or
bandwidth of any link, make it half duplex or cap the sum of its two directions
(:class:`~simdist.platform.spec.LinkSpec`, ``docs/network.md``): those are properties of a
link as installed, not of its kind, so the kinds here carry none.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..registry import Registry

__all__ = ["LinkKind", "LINK_KINDS", "link_kind"]


@dataclass(frozen=True)
class LinkKind:
    """Defaults of one kind of link, per direction."""

    name: str
    latency_s: float
    bandwidth_Bps: float
    source: str
    # CPU seconds per byte each end of a message spends copying it (LogGOPS O), for transports
    # that move bytes through the ranks' CPUs; 0 where a DMA engine moves them (RDMA, NVLink)
    cpu_per_byte_s: float = 0.0
    cpu_source: str = ""


LINK_KINDS: Registry[LinkKind] = Registry("link kind")

_CSV = "hardware_reference.csv"
_INTRA_LATENCY = f"{_CSV}: mpi_latency_measured 'OCI BM.GPU4.8 GPU-GPU osu_latency 1 B ... intra-node' = 2.50 us"


def _add(name: str, latency_s: float, bandwidth_Bps: float, description: str, source: str, *,
         cpu_per_byte_s: float = 0.0, cpu_source: str = "") -> None:
    LINK_KINDS.add(name, LinkKind(name, latency_s, bandwidth_Bps, source, cpu_per_byte_s, cpu_source), description,
                   citation=source)


_add("nvlink3", 2.5e-6, 300e9, "NVLink 3 (A100), 300 GB/s per GPU and direction",
     f"{_CSV}: intra_node 'NVLink 3 (A100) per GPU' = 300 GB/s unidirectional; latency: {_INTRA_LATENCY}")
_add("nvlink4", 2.5e-6, 450e9, "NVLink 4 (H100/H200), 450 GB/s per GPU and direction",
     f"{_CSV}: intra_node 'NVLink 4 (H100/H200) per GPU' = 450 GB/s unidirectional; latency: {_INTRA_LATENCY}")
_add("nvswitch", 2.5e-6, 300e9, "NVSwitch of an A100 system: every GPU at NVLink 3 speed to a crossbar",
     f"{_CSV}: intra_node 'NVSwitch speed' = same as NVLink of that generation (NVLink 3: 300 GB/s); "
     f"latency: {_INTRA_LATENCY}")
_add("nvswitch4", 2.5e-6, 450e9, "NVSwitch of an H100/H200 system: every GPU at NVLink 4 speed to a crossbar",
     f"{_CSV}: intra_node 'NVSwitch speed' = same as NVLink of that generation (NVLink 4: 450 GB/s); "
     f"latency: {_INTRA_LATENCY}")
_add("pcie4", 2.5e-6, 31e9, "PCIe 4.0 x16, 31 GB/s per direction",
     f"{_CSV}: pcie 'PCIe 4.0 x16' = 31 GB/s unidirectional; latency: {_INTRA_LATENCY}")
_add("pcie5", 2.5e-6, 63e9, "PCIe 5.0 x16, 63 GB/s per direction",
     f"{_CSV}: pcie 'PCIe 5.0 x16' = 63 GB/s unidirectional; latency: {_INTRA_LATENCY}")
_add("shm", 0.11e-6, 13.8e9, "shared memory between processes on one host (MPI vader-style copy)",
     f"latency: {_CSV}: mpi_latency_measured 'shared memory (vader) osu_latency 0 B, Haswell' = 0.11 us; "
     "bandwidth: single-core memory copy measured on the development host (numpy copyto of 256 MiB: 13.8 GB/s)")
_add("ib-edr", 0.5e-6, 100e9 / 8, "InfiniBand EDR 4x port, 100 Gb/s",
     f"{_CSV}: inter_node 'InfiniBand EDR per lane / 4x port' = 100 Gb/s; 'InfiniBand latency EDR / HDR' = 0.5 us")
_add("ib-hdr", 0.6e-6, 200e9 / 8, "InfiniBand HDR 4x port, 200 Gb/s",
     f"{_CSV}: inter_node 'InfiniBand HDR per lane / 4x port' = 200 Gb/s; 'InfiniBand latency EDR / HDR' = 0.6 us")
_add("ib-ndr", 0.6e-6, 400e9 / 8, "InfiniBand NDR 4x port, 400 Gb/s",
     f"{_CSV}: inter_node 'InfiniBand NDR per lane / 4x port' = 400 Gb/s; latency: the table gives none for NDR, "
     "HDR's 0.6 us is used")
_add("ethernet-100g", 3.89e-6, 100e9 / 8, "100 Gb/s RoCEv2 Ethernet NIC",
     f"{_CSV}: inter_node 'OCI BM.GPU4.8 cluster network' = 100 Gbps x 16 RoCEv2; latency: mpi_latency_measured "
     "'OCI BM.GPU4.8 GPU-GPU osu_latency 1 B inter-node (RoCE)' = 3.89 us")
_add("ethernet-tcp", 19.17e-6, 6.24e9, "MPI over TCP on cloud Ethernet (Google Cloud c3-standard-176)",
     f"{_CSV}: mpi_latency_measured 'GCP c3-standard-176 TCP osu_latency 0 B' = 19.17 us; bandwidth: peak of "
     "osu_bw_2nodes_tcp_ethernet.txt (6243 MB/s at 512 KiB)",
     cpu_per_byte_s=1 / 5996.96e6,
     cpu_source="calibration/traces/osu_bibw_2nodes_tcp_ethernet.txt: 5996.96 MB/s both ways together at 512 KiB, "
                "not twice osu_bw's 6243 MB/s one way: each rank's CPU copies what it sends and what it receives, "
                "1 / 5997 MB/s per byte each (simdist calibrate trace --bibw-limit cpu; docs/network.md)")


def link_kind(name: str) -> LinkKind:
    """The defaults of link kind ``name`` (InputError listing the known kinds on a typo)."""
    return LINK_KINDS.get(name)


# Cray XC (appended): the Aries NIC for dragonfly-class CPU clusters
_add("aries", 3.7e-6, 8e9, "Cray XC Aries (dragonfly) NIC: ~8 GB/s MPI bandwidth per node and direction",
     "NERSC, Cori configuration (www.nersc.gov/users/computational-systems/cori/configuration/): 'Cray Aries "
     "high-speed interconnect with Dragonfly topology as on Edison (0.25 us to 3.7 us MPI latency, ~8GB/sec MPI "
     "bandwidth)'; latency: the upper end of that range (farthest node pairs), a conservative choice")
