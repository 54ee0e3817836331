"""Host staging: a GPU's collective routed through host memory, and what that costs.

An MPI library that is not GPU-aware reads and writes host memory only, so a GPU's buffer
goes to the host before the collective and comes back after it. Heat, the reference
implementation of DASO, works this way (helmholtz-analytics/heat, commit 660efec):

* ``heat/core/_config.py``: ``GPU_AWARE_MPI`` is true only where the MPI library is detected
  as CUDA-aware, and the Open MPI detection is switched off ("Seems to be broken, disabled by
  default"), so with Open MPI every GPU buffer is staged;
* ``heat/core/communication.py``: ``_moveToCompDevice`` hands MPI ``x.cpu()`` (a synchronous
  device → host copy) and ``MPIRequest.Wait`` copies the result back,
  ``self.tensor.copy_(self.recvbuf)`` (host → device);
* ``heat/optim/dp_optimizer.py``: every DASO global sync is ``Iallreduce`` on such a buffer
  (``_gs_send_params``), the blocking one followed at once by its ``Wait``. Parameters are
  cast (``__pack_data``) and divided on the GPU; on the host, MPI reduces: float32 with
  ``MPI.SUM`` (non-blocking syncs), bfloat16 with the Python callback ``__sum_bfloat_cb``
  (blocking syncs).

The model, per staged collective on one rank (SI units throughout):

* each copy, device → host and host → device, takes ``latency_s + payload_bytes /
  bandwidth_Bps`` of the device's host link (:func:`copy_s`). The link is ``node.host_link``
  of the platform, else the device kind's host interface (:data:`HOST_INTERFACES`): the
  ``pcie4`` and ``pcie5`` link kinds (:mod:`.links`: PCIe 4.0 x16 31 GB/s, PCIe 5.0 x16
  63 GB/s per direction). ``x.cpu()`` copies into pageable memory, which the driver stages
  through a pinned buffer; the link's bandwidth is the best such a copy reaches, so this is a
  lower bound (hardware_reference.csv, ``pcie_measured``: Azure ND A100 v4 D2H 6.27 GB/s);
* the reduction on the host: the P members' copies need P − 1 additions per element, shared
  evenly by the members in a bandwidth-optimal allreduce (ring, Rabenseifner), so each rank
  reduces (P − 1)/P of the elements (:func:`host_reduction_s`), on one core (MPI reduces in
  the calling thread) streaming at the host's memory bandwidth: the ``cpu`` device kind's
  single-core figure (:mod:`.devices`). Bytes per element (:data:`REDUCTION_BYTES_PER_ELEMENT`)
  are what the code streams: ``MPI.SUM`` on float32 reads two buffers and writes one (12 B,
  the ``average`` op over 2 buffers of :mod:`.op_costs`); ``__sum_bfloat_cb`` copies both
  buffers into tensors (``UntypedStorage.from_buffer`` copies: 2 × (2 + 2) B), adds them
  (2 + 2 + 2 B) and copies the sum back into MPI's buffer (2 + 2 B): 18 B. Both are lower
  bounds: bfloat16 arithmetic on a CPU without native bfloat16 is compute bound.

Devices whose data lives in host memory (CPU ranks) have no host link: staging is a no-op
there (:func:`host_path` gives None).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from .devices import DEVICE_KINDS
from .links import LINK_KINDS
from .op_costs import bytes_per_param

__all__ = ["HOST_INTERFACES", "HOST_CPU_KIND", "REDUCTION_BYTES_PER_ELEMENT", "HostPath", "copy_s",
           "host_reduction_s", "host_link_kind", "host_path"]

_CSV = "hardware_reference.csv"
# a GPU kind's host interface when the platform names none: (link kind, source)
HOST_INTERFACES: dict[str, tuple[str, str]] = {
    "a100": ("pcie4", f"{_CSV}: pcie 'A100 40G SXM4 PCIe Gen4 H2D' = 32+32 GB/s per direction; "
                      "'A100 PCIe Gen4 host link' = 31.5 GB/s"),
    "h100": ("pcie5", f"{_CSV}: pcie 'H100 SXM PCIe Gen5' = 128 GB/s bidirectional total"),
}
HOST_CPU_KIND = "cpu"  # the device kind whose memory bandwidth a host core streams at
REDUCTION_BYTES_PER_ELEMENT: dict[str, float] = {
    "float32": bytes_per_param("average", 2),  # MPI.SUM: read 2 x 4 B, write 4 B
    "bfloat16": 2 * (2 + 2) + (2 + 2 + 2) + (2 + 2),  # Heat's __sum_bfloat_cb: 2 copies in, add, copy out
}


def copy_s(payload_bytes: float, latency_s: float, bandwidth_Bps: float) -> float:
    """One copy of ``payload_bytes`` over a link: ``latency_s + payload_bytes / bandwidth_Bps`` (0 for nothing)."""
    if payload_bytes <= 0:
        return 0.0
    return latency_s + payload_bytes / bandwidth_Bps


def host_reduction_s(elements: int, members: int, bytes_per_element: float, bandwidth_Bps: float) -> float:
    """One rank's share of an allreduce's reduction on a host core: (P − 1)/P · elements ·
    bytes_per_element / bandwidth_Bps, with P = ``members`` (0 for a group of one)."""
    if members <= 1:
        return 0.0
    return (members - 1) / members * elements * bytes_per_element / bandwidth_Bps


def host_link_kind(device_kind: str, host_link: Any = None) -> Any:
    """The LinkSpec-like link between a device of ``device_kind`` and host memory.

    ``host_link``: the platform's ``node.host_link`` (wins where given). None for devices whose
    data lives in host memory (CPU kinds). A GPU kind without a known host interface needs
    ``node.host_link`` (InputError naming it).
    """
    if not DEVICE_KINDS.get(device_kind).is_gpu:
        return None
    if host_link is not None:
        return host_link
    if device_kind not in HOST_INTERFACES:
        raise InputError(f"device kind {device_kind!r} has no known host interface; give platform.node.host_link "
                         f"(a link kind such as {', '.join(sorted(k for k in LINK_KINDS.names() if 'pcie' in k))})",
                         field="platform.node.host_link")
    return _KindLink(HOST_INTERFACES[device_kind][0])


@dataclass(frozen=True)
class _KindLink:
    """A link kind's defaults, read like a LinkSpec (``latency_s``, ``bandwidth_Bps``)."""

    kind: str

    @property
    def latency_s(self) -> float:
        return LINK_KINDS.get(self.kind).latency_s

    @property
    def bandwidth_Bps(self) -> float:
        return LINK_KINDS.get(self.kind).bandwidth_Bps


@dataclass(frozen=True)
class HostPath:
    """A device's way to host memory: its host link and the host core's memory bandwidth."""

    link_kind: str
    latency_s: float
    bandwidth_Bps: float  # per direction
    host_memory_Bps: float  # one host core streaming

    def copy_s(self, payload_bytes: float) -> float:
        """One copy of ``payload_bytes`` across the host link (either direction)."""
        return copy_s(payload_bytes, self.latency_s, self.bandwidth_Bps)

    def reduction_s(self, elements: int, members: int, dtype_name: str) -> float:
        """This rank's share of reducing ``elements`` of ``dtype_name`` (float32, bfloat16) over ``members``."""
        return host_reduction_s(elements, members, REDUCTION_BYTES_PER_ELEMENT[dtype_name], self.host_memory_Bps)


def host_path(platform: Any, rank: int) -> HostPath | None:
    """The host path of ``rank``'s device on ``platform`` (a :class:`~.topology.Platform`); None
    where the device's data already lives in host memory (CPU devices)."""
    device = platform.devices[rank]
    link = host_link_kind(device.kind, platform.spec.node_at(device.node).host_link)  # its node's (group's)
    if link is None:
        return None
    host = DEVICE_KINDS.get(HOST_CPU_KIND)
    return HostPath(link.kind, link.latency_s, link.bandwidth_Bps, host.memory_bandwidth_Bps)
