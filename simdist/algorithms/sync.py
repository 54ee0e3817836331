"""sync — synchronous data-parallel SGD, the baseline (docs/algorithms.md §1).

Every step each worker computes g_i on its batch; an allreduce averages them,
g = (1/N) Σ g_i; every worker applies the same optimizer step, so replicas stay identical
and staleness is always 0. With equal batches this equals one worker with batch N·b.

Options: ``collective`` (ring, tree, halving_doubling, recursive_doubling, hierarchical, mpich; default: the
scenario's ``network.collective``, else the platform's library's, else ring); ``overlap: backward``
allreduces gradients in buckets of ``bucket_bytes`` as backward produces them, last layer
first (PyTorch DDP / Horovod tensor fusion); ``compression: fp16|bf16`` sends gradients in
half precision (half the bytes; the sum is rounded to that precision, as NCCL's is).
Presets: ``horovod`` = ring, overlap backward, fp16, 64 MiB fusion buffer; ``classic`` = no
compression, one message per parameter tensor, overlap backward.

Timing of ``overlap: backward``: forward takes 1/3 of the compute time and backward 2/3
(backward costs about twice the forward); inside backward each parameter tensor's gradient
is ready after the layers behind it, in proportion to their forward FLOPs. Bucket k's
allreduce starts once it is ready and bucket k−1's has finished (one communication stream).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Sequence

import torch
from pydantic import Field, field_validator, model_validator

from ..runtime.base import Runtime
from ..runtime.collectives import COLLECTIVES
from ..units import parse_size
from .base import ALGORITHMS, AlgorithmConfig, AlgorithmContext, PeerAlgorithm
from .tensors import cast, flat_concat, flat_slice

__all__ = ["SyncConfig", "Sync", "Bucket", "gradient_buckets", "PRESETS", "COMPRESSION_DTYPES"]

MiB = 1 << 20
PRESETS: dict[str, dict[str, Any]] = {
    # Horovod: ring allreduce, tensor fusion buffer HOROVOD_FUSION_THRESHOLD = 64 MiB, fp16 compression
    "horovod": {"collective": "ring", "overlap": "backward", "compression": "fp16", "bucket_bytes": 64 * MiB},
    # classic data parallel: one message per parameter tensor, overlapped with backward, no compression
    "classic": {"overlap": "backward", "compression": "none", "bucket_bytes": 0},
}
COMPRESSION_DTYPES = {"none": None, "fp16": torch.float16, "bf16": torch.bfloat16}


class SyncConfig(AlgorithmConfig):
    """Options of synchronous SGD."""

    name: Literal["sync"] = "sync"
    preset: Literal["horovod", "classic"] | None = Field(None, description="fill unset options from a named preset")
    collective: str | None = Field(None, description=(
        "allreduce algorithm (simdist list collectives); default: network.collective, else the platform's "
        "collectives.schedule, else ring"))
    overlap: Literal["none", "backward"] = Field("none", description="allreduce buckets during backward")
    bucket_bytes: float = Field(25 * MiB, ge=0, description="bucket size for overlap, e.g. '25MiB'; 0 = one per tensor")
    compression: Literal["none", "fp16", "bf16"] = Field("none", description="gradient precision on the wire")

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            preset = data.get("preset")
            if preset in PRESETS:
                for key, value in PRESETS[preset].items():
                    data.setdefault(key, value)
        return data

    @field_validator("bucket_bytes", mode="before")
    @classmethod
    def _size(cls, value: Any) -> float:
        return parse_size(value)

    @field_validator("collective")
    @classmethod
    def _collective_known(cls, value: str | None) -> str | None:
        return None if value is None else COLLECTIVES.check(value)


@dataclass(frozen=True)
class Bucket:
    """A contiguous range of the flat gradient and when backward has produced all of it."""

    start: int
    stop: int
    ready_fraction: float  # of the whole forward/backward time


def gradient_buckets(layers: Sequence[Any], bucket_bytes: float, element_bytes: int,
                     forward_share: float = 1.0 / 3.0) -> list[Bucket]:
    """Buckets in the order backward fills them (last layer first), DDP style.

    ``layers`` are :class:`~simdist.training.models.LayerInfo` (start, stop,
    forward_flops_per_sample) in parameter order. A bucket closes once it holds at least
    ``bucket_bytes`` (0: one bucket per parameter tensor). A tensor's gradient is ready at
    ``forward_share + (1 − forward_share) · (FLOPs of it and the layers after it) / total``.
    """
    flops = [max(float(layer.forward_flops_per_sample), 0.0) for layer in layers]
    weights = flops if sum(flops) > 0 else [float(layer.stop - layer.start) for layer in layers]
    total = sum(weights) or 1.0
    buckets: list[Bucket] = []
    done = 0.0
    start = stop = None
    for layer, weight in zip(reversed(layers), reversed(weights)):
        done += weight
        ready = forward_share + (1.0 - forward_share) * done / total
        stop = layer.stop if stop is None else stop
        start = layer.start
        if (stop - start) * element_bytes >= bucket_bytes:
            buckets.append(Bucket(start, stop, min(ready, 1.0)))
            start = stop = None
    if stop is not None:
        buckets.append(Bucket(start, stop, 1.0))
    return buckets


def average_gradient(total: Any, n_workers: int) -> Any:
    """(1/N) Σ g_i in float32 from the allreduced sum (possibly half precision)."""
    return cast(total, torch.float32) / n_workers


@ALGORITHMS.register("sync", "synchronous data-parallel SGD: allreduce-average of gradients every step",
                     config=SyncConfig)
class Sync(PeerAlgorithm):
    """Synchronous SGD; replicas stay identical."""

    Config = SyncConfig
    lockstep = "always"  # every worker applies the same averaged gradient: the replicas stay equal

    def __init__(self, config: SyncConfig, ctx: AlgorithmContext):
        super().__init__(config, ctx)
        self.wire_dtype = COMPRESSION_DTYPES[config.compression]
        element_bytes = torch.empty((), dtype=self.wire_dtype or torch.float32).element_size()
        self.buckets = gradient_buckets(ctx.workload.layers, config.bucket_bytes, element_bytes)

    def _cost_s(self, rank: int, part: str) -> float:
        """Seconds of a rank's own work per step (:mod:`simdist.platform.op_costs`).

        ``pack``: the gradient into the send buffer (DDP's bucket copy, Horovod's fusion
        buffer): a copy, or with compression a cast in the same pass; ``unpack``: scaling the sum
        by 1/N (a copy's bytes), plus the cast back when compressed; ``update``: the optimizer step.
        """
        params, op = self.ctx.workload.param_count, self.ctx.op_seconds
        cast_s = op(rank, "cast", params) if self.wire_dtype is not None else 0.0
        if part == "pack":
            return cast_s if self.wire_dtype is not None else op(rank, "copy", params)
        if part == "unpack":
            return op(rank, "copy", params) + cast_s
        return op(rank, "update", params)

    def _to_wire(self, grad: Any) -> Any:
        return grad if self.wire_dtype is None else cast(grad, self.wire_dtype)

    def _worker(self, rt: Runtime, index: int):
        ctx, config = self.ctx, self.config
        replica, data = self.replicas[index], self.data[index]
        group = rt.group(ctx.workers, "world")
        step = 0
        while True:
            batch = data.next_batch(ctx.batch_size)
            if batch is None:
                return
            if config.overlap == "backward":
                result, total = yield from self._overlapped_step(rt, group, replica, batch)
            else:
                result = yield rt.compute(replica, batch)
                wire = yield rt.busy(self._cost_s(rt.rank, "pack"), "pack gradient",
                                     run=lambda: self._to_wire(result.grad))
                total = yield rt.allreduce(group, wire, algorithm=config.collective)
            grad = yield rt.busy(self._cost_s(rt.rank, "unpack"), "unpack gradient",
                                 run=lambda: average_gradient(total, ctx.n_workers))
            yield rt.busy(self._cost_s(rt.rank, "update"), "update", run=lambda: replica.apply_gradient(grad))
            step += 1
            rt.record("update", worker=rt.rank, step=step, version=step, staleness=0,
                      batch_size=batch.size, loss=result.loss)

    def _overlapped_step(self, rt: Runtime, group, replica, batch):
        """Forward/backward with bucket allreduces launched as buckets become ready."""
        computing = rt.compute(replica, batch)
        in_flight = None
        requests = []
        for bucket in self.buckets:
            yield computing.at_fraction(bucket.ready_fraction)
            if in_flight is not None:
                yield in_flight  # one communication stream: buckets go one after another
            grad = computing.partial_result().grad
            in_flight = rt.iallreduce(group, self._to_wire(flat_slice(grad, bucket.start, bucket.stop)),
                                      algorithm=self.config.collective)
            requests.append((bucket, in_flight))
        result = yield computing
        sums = {}
        for bucket, request in requests:
            sums[bucket.start] = yield request
        total = flat_concat([sums[start] for start in sorted(sums)])
        return result, total
