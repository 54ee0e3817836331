"""What a DASO GPU's own work costs (docs/algorithms.md §5).

**Costs** (each rank's own work, ``rt.busy`` with its math in ``run=``; seconds from
:mod:`simdist.platform.op_costs`, over the parameter count, so replay and timing-only charge
the same). Every batch: ``pack gradient`` (``copy``: the gradient into the allreduce buffer,
as DDP's bucket copy in Heat's node-local sync), ``unpack gradient`` (``copy``: the sum back,
divided by G), ``update`` (``update``: the optimizer step). A blocking global sync's member:
``pack parameters bf16`` / ``unpack parameters bf16`` (``cast`` each way; Heat casts on the
GPU). A non-blocking one: ``pack parameters`` (``copy`` into the send buffer) and, on receipt,
``update: global merge`` (``average`` over 2 buffers: x_local and the sum in, x out). The node
broadcast writes into the parameters in place (NCCL in Heat): no copy is charged.

**Host staging** (``global_staging``, default ``host``): Heat's global syncs are MPI
``Iallreduce`` calls on buffers that, with an MPI library that is not GPU-aware (Heat's Open MPI
default), go to host memory and back (:mod:`simdist.platform.host_staging`). On a GPU device
each global sync's member then pays ``pack host staging`` (device → host copy of the sent
bytes over the device's host link, before the call: ``x.cpu()`` is synchronous),
``update: host reduction`` (its share of the allreduce's sums on a host core, float32 ``MPI.SUM``
or Heat's bfloat16 Python callback; charged when the result is taken, since MPI without a
progress thread reduces inside the wait) and ``unpack host staging`` (host → device copy of
the result, in ``Wait``). Busy work, not communication: the rank's thread does the copies and
sums and nothing else meanwhile. ``device`` is GPU-direct (no staging); CPU devices never
stage (their data is in host memory), and a real run times what it does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import AlgorithmContext

__all__ = ["DasoCosts", "tensor_nbytes"]


@dataclass(frozen=True)
class DasoCosts:
    """Seconds of one GPU's own work (:mod:`simdist.platform.op_costs`) and its way to host memory."""

    copy_s: float  # a float32 copy of the parameters (pack, unpack)
    cast_s: float  # float32 <-> bfloat16 of the parameters
    update_s: float  # the optimizer step
    merge_s: float  # x <- (2S x_local + sum) / (2S + P): two buffers in, one out
    host: Any  # HostPath where global syncs are staged through host memory, else None

    @classmethod
    def of(cls, ctx: AlgorithmContext, rank: int, staging: str) -> "DasoCosts":
        params, op = ctx.workload.param_count, ctx.op_seconds
        return cls(copy_s=op(rank, "copy", params), cast_s=op(rank, "cast", params),
                   update_s=op(rank, "update", params), merge_s=op(rank, "average", params, 2),
                   host=ctx.host_path(rank) if staging == "host" else None)


def tensor_nbytes(t: Any) -> int:
    """Bytes of a flat tensor (or a timing-only phantom): what a host staging copy moves."""
    return t.numel() * t.element_size()
