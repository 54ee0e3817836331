"""What an algorithm's own arithmetic costs: updates, averages, delay compensation, copies.

Beside forward/backward, algorithms apply gradients (an axpy over the parameters), average
models or gradients, compute delay compensation and copy buffers. None of it is free: each
is a streaming elementwise kernel whose time is set by the bytes it reads and writes.

    seconds = parameters · seconds_per_param(op)

``seconds_per_param`` is, in order of preference:

1. **measured** — ``calibrate compute`` times that very operation on flat float32 vectors
   on the device (a profile's ``ops`` section: ``{update: s, average: s, ...}``, seconds per
   parameter on the profile's device; ``average`` per input buffer);
2. **estimated** — the bytes it moves per parameter over the device kind's memory bandwidth
   (:class:`~simdist.platform.devices.DeviceKind`), recorded as an estimate:

   ==============  =====================================  =====================
   op              what it does per parameter (float32)   bytes
   ==============  =====================================  =====================
   ``update``      w ← w − η·g: read w, g; write w        12
   ``average``     mean of k buffers: read k, write 1     4·(k + 1)
   ``compensate``  DC-S3GD's delay compensation:          68
                   λ = λ0·‖g‖/‖g⊙g⊙D‖ (g⊙g, ⊙D, two
                   norms: 28 B) and g̃ = g + λ·g⊙g⊙D
                   (four passes: 40 B)
   ``merge``       a worker moved to the workers'         48
                   average and its own step (DC-S3GD):
                   D = Σ/N − Δ (20 B), w += D, w += Δ
                   (24 B), ‖D‖ (4 B)
   ``copy``        read 1, write 1                        8
   ``cast``        float32 → 16-bit: read 4 B, write 2 B  6
   ``gather``      rows picked out of a table (a batch    8
                   out of an in-memory dataset): read 1,
                   write 1
   ``save``        serialized into a file (a checkpoint,   8
                   ``torch.save``): read 1, write 1 into
                   the page cache
   ==============  =====================================  =====================

``copy`` prices packing (flattening gradients into one buffer, a bucket copy) and unpacking
(copying a reduced buffer back); ``cast`` a dtype conversion either way (16 → 32 bit reads 2
and writes 4: the same bytes). ``save`` prices a checkpoint on the host: a GPU rank's state
crosses its host link first and is serialized by the host's CPU
(:func:`simdist.training.epoch_end.save_seconds`).

A CPU rank with less than one core (``cpus`` < 1) streams at that share of the core's rate.
:meth:`OpCostModel.describe` says for every device which figure each op used, for the
run's manifest.
"""

from __future__ import annotations

from typing import Any

from ..errors import InputError
from .topology import Platform

__all__ = ["OPS", "BYTES_PER_PARAM", "bytes_per_param", "OpCostModel", "ops_from_profile"]

OPS = ("update", "average", "compensate", "merge", "copy", "cast", "gather", "save")
BYTES_PER_PARAM = {"update": 12.0, "compensate": 68.0, "merge": 48.0, "copy": 8.0, "cast": 6.0, "gather": 8.0,
                   "save": 8.0}  # average: 4 (k + 1), see bytes_per_param


def bytes_per_param(op: str, buffers: int = 1) -> float:
    """Bytes a float32 ``op`` reads and writes per parameter (``average`` of ``buffers`` buffers)."""
    if op == "average":
        return 4.0 * (buffers + 1)
    return BYTES_PER_PARAM[op]


def ops_from_profile(document: dict, path: str) -> dict[str, dict[str, float]]:
    """The measured ``ops`` section of a profile document (``{op: seconds per parameter}`` on the
    profile's ``device``), as ``{device: {op: seconds per parameter}}``."""
    ops = document.get("ops")
    if ops is None:
        return {}
    if not isinstance(ops, dict):
        raise InputError(f"ops: must map an op ({', '.join(OPS)}) to seconds per parameter", source=path)
    for op, value in ops.items():
        if op not in OPS:
            raise InputError(f"ops.{op}: unknown op; known: {', '.join(OPS)}", source=path)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e-3:
            raise InputError(f"ops.{op}: must be seconds per parameter, > 0 and < 1e-3, got {value!r}", source=path)
    return {str(document["device"]): {op: float(v) for op, v in ops.items()}}


class OpCostModel:
    """Seconds of an algorithm's elementwise work on a rank's device.

    ``measured``: ``{profile device: {op: seconds per parameter}}`` from calibration; what is
    missing is estimated from the device kind's memory bandwidth.
    """

    def __init__(self, platform: Platform, measured: dict[str, dict[str, float]] | None = None):
        self.platform = platform
        self.measured = measured or {}
        self._used: dict[tuple[str, str], str] = {}
        self._per_param: dict[tuple[str, str, str, int], tuple[float, str]] = {}  # _per_param_s's answers and bases

    def seconds(self, rank: int, op: str, params: int, buffers: int = 1) -> float:
        """Time of ``op`` over ``params`` float32 parameters on ``rank``'s device (``average``: of ``buffers``)."""
        if op not in OPS:
            raise ValueError(f"unknown op {op!r}; known: {', '.join(OPS)}")
        device = self.platform.devices[rank]
        share = device.cpus if (device.cpus is not None and device.cpus < 1) else 1.0
        return self.core_seconds(device, op, params, buffers) / share

    def core_seconds(self, device: Any, op: str, params: int, buffers: int = 1) -> float:
        """Time of ``op`` on one full core (or the whole GPU) of ``device``, whatever its share."""
        return params * self._per_param_s(device.kind, device.profile_device, op, buffers)

    def kind_seconds(self, kind_name: str, op: str, params: int) -> float:
        """Time of ``op`` on one full core of device kind ``kind_name`` (a GPU rank's host CPU, say)."""
        from .devices import DEVICE_KINDS

        return params * self._per_param_s(kind_name, DEVICE_KINDS.get(kind_name).profile_device, op, 1)

    def _per_param_s(self, kind_name: str, profile_device: str, op: str, buffers: int) -> float:
        """Seconds per parameter of ``op``: asked for every update of every rank, found once per
        (device kind, profile, op, buffers)."""
        key = (kind_name, profile_device, op, buffers)
        found = self._per_param.get(key)
        if found is None:
            found = self._per_param[key] = self._find_per_param_s(kind_name, profile_device, op, buffers)
        self._used[(kind_name, op)] = found[1]  # the basis of the latest question, as describe() reports
        return found[0]

    def _find_per_param_s(self, kind_name: str, profile_device: str, op: str, buffers: int) -> tuple[float, str]:
        """(seconds per parameter, basis: measured or estimate)."""
        measured = self.measured.get(profile_device, {}).get(op)
        if measured is not None:
            return measured * (buffers if op == "average" else 1), "measured"
        from .devices import DEVICE_KINDS

        kind = DEVICE_KINDS.get(kind_name)
        if not kind.memory_bandwidth_Bps:
            raise InputError(f"device kind {kind_name!r} has no measured '{op}' cost and no memory bandwidth to "
                             "estimate it from; run simdist calibrate compute on it", source="platform")
        return bytes_per_param(op, buffers) / kind.memory_bandwidth_Bps, "estimate"

    def describe(self) -> list[dict[str, Any]]:
        """Per device kind and op used in the run: measured, or estimated (from what)."""
        from .devices import DEVICE_KINDS

        rows = []
        for (kind_name, op), how in sorted(self._used.items()):
            kind = DEVICE_KINDS.get(kind_name)
            row = {"device": kind_name, "op": op, "basis": how}
            if how == "estimate":
                row.update(bytes_per_param=bytes_per_param(op) if op != "average" else "4 (k + 1)",
                           memory_bandwidth_Bps=kind.memory_bandwidth_Bps, source=kind.memory_source)
            rows.append(row)
        return rows
