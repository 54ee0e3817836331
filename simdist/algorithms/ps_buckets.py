"""Bucketed pushes to parameter servers (``push: buckets``; asgd, nsoftsync, dbs).

With ``push: whole`` a worker pushes its gradient once backward has finished. With
``push: buckets`` it pushes each bucket of ``bucket_bytes`` as soon as backward has produced
it, last layer first, so that the transfer of early buckets overlaps the rest of backward —
the behaviour of MXNet's kvstore (a push per parameter array, issued from backward; Chen et
al., MXNet, arXiv:1512.01274, 2015) and of PyTorch DDP's gradient buckets (``bucket_cap_mb``
25 MiB; Li et al., PyTorch Distributed, VLDB 2020). Buckets and their ready times are
:func:`~simdist.algorithms.sync.gradient_buckets` (the model's layers, forward 1/3 and
backward 2/3 of the compute time). A bucket that straddles two servers' shards goes as one
message to each; every message pays its own per-message costs and carries the push's header
(version read, batch size, loss, read time, final flag, report) and its ``offset`` in the shard.

What the server does with buckets (**choice**): it applies a worker's gradient once every
bucket of it has arrived, as with a whole push, so staleness keeps its meaning (one version
read per gradient, one update per gradient or round) and the number of updates is unchanged;
only the transfer overlaps backward. With k servers, a server whose shard's buckets have all
arrived goes ahead while backward still produces the other shards' buckets. MXNet's kvstore
instead updates each key on arrival, which makes staleness a per-bucket quantity (buckets of
one gradient applied at different versions); that is not what docs/algorithms.md §2–§4 define, so
it is not done here. The server joins the pieces of a push into its shard's gradient (a copy,
``unpack gradient``). Where the server's link is the bottleneck, early buckets share it with
other workers' pushes the server could already apply, so buckets can be slower there
(docs/algorithms.md gives figures).

Packing (op ``copy``, :mod:`simdist.platform.op_costs`): a bucket is copied into its send
buffer when it is ready, inside backward (as DDP's autograd hooks copy into the bucket), so
each copy delays the buckets after it and the end of backward by its time: bucket k leaves at
``f_k·C + Σ_{j≤k} p_j`` (``f_k`` its ready fraction of the compute time C, ``p_j`` the copy
times). The simulator's forward/backward keeps its own length, so the copy time that ends
after it is charged right after it as ``pack gradient`` spans — the same total as a whole
push's pack, and each bucket leaves when the model says (:func:`pack_schedule`). A bucket
packed while backward still runs (only in the simulator: a real run's forward/backward has
finished before any bucket is packed) has no span of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .sync import Bucket, gradient_buckets
from .tensors import flat_concat

__all__ = ["DEFAULT_BUCKET_BYTES", "Piece", "BucketPlan", "plan_buckets", "pieces_per_server", "pack_schedule",
           "push_in_buckets", "PieceAssembly"]

DEFAULT_BUCKET_BYTES = 25 * (1 << 20)  # PyTorch DDP's bucket_cap_mb = 25 (MiB)


@dataclass(frozen=True)
class Piece:
    """The part ``start:stop`` (flat gradient indices) of one bucket that goes to server ``server``."""

    server: int
    start: int
    stop: int


@dataclass(frozen=True)
class BucketPlan:
    """One bucket in the order backward fills it, and its pieces, one per server it overlaps."""

    bucket: Bucket
    pieces: tuple[Piece, ...]

    @property
    def numel(self) -> int:
        return self.bucket.stop - self.bucket.start


def plan_buckets(layers: Sequence[Any], bucket_bytes: float, element_bytes: int,
                 shard_bounds: Sequence[tuple[int, int]]) -> list[BucketPlan]:
    """The model's gradient buckets (last layer first) cut at the servers' shard bounds."""
    plans = []
    for bucket in gradient_buckets(layers, bucket_bytes, element_bytes):
        pieces = tuple(Piece(j, max(bucket.start, lo), min(bucket.stop, hi))
                       for j, (lo, hi) in enumerate(shard_bounds) if bucket.start < hi and lo < bucket.stop)
        plans.append(BucketPlan(bucket, pieces))
    return plans


def pieces_per_server(plans: Sequence[BucketPlan], servers: int) -> list[int]:
    """How many messages of one push each server receives."""
    counts = [0] * servers
    for plan in plans:
        for piece in plan.pieces:
            counts[piece.server] += 1
    return counts


def pack_schedule(ready_fractions: Sequence[float], pack_s: Sequence[float],
                  compute_s: float) -> list[tuple[float, float]]:
    """When each bucket leaves, as ``(fraction of the compute time, pack seconds after compute)``.

    Bucket k's copy ends at ``E_k = f_k·C + Σ_{j≤k} p_j`` (copies run inline in backward, see
    the module docstring). If ``E_k < C`` it leaves at fraction ``E_k / C`` with nothing charged
    after compute; otherwise at fraction 1 after ``E_k − max(C, E_{k−1})`` seconds of packing,
    so the packing charged after compute adds up to ``E_last − C``.
    """
    schedule, packed_s, previous_end_s = [], 0.0, 0.0
    for fraction, seconds in zip(ready_fractions, pack_s):
        packed_s += seconds
        end_s = fraction * compute_s + packed_s
        if end_s < compute_s:
            schedule.append((end_s / compute_s, 0.0))
        else:
            schedule.append((1.0, end_s - max(compute_s, previous_end_s)))
        previous_end_s = end_s
    return schedule


def push_in_buckets(rt: Any, computing: Any, plans: Sequence[BucketPlan], pack_s: Sequence[float],
                    servers: Sequence[Any], headers: Sequence[dict[str, Any]], tag: int):
    """Run one forward/backward and push its gradient bucket by bucket (a generator).

    ``pack_s``: each bucket's copy time; ``servers``: ``rank`` and ``start`` of each shard;
    ``headers``: the push's fields for each server. The return value is the compute's result.
    """
    result = computing.partial_result()
    loss = result.loss_for_message()  # taken once: a shard's server may evaluate the gradient before the last bucket
    schedule = pack_schedule([p.bucket.ready_fraction for p in plans], pack_s, result.end_s - result.start_s)
    for plan, (fraction, after_s) in zip(plans, schedule):
        if fraction < 1.0:
            yield computing.at_fraction(fraction)
        if fraction < 1.0 and rt.now() < result.end_s:  # packed inside backward: part of its time
            parts = _pack(result, plan)
        else:
            yield computing
            parts = yield rt.busy(after_s, "pack gradient", run=lambda plan=plan: _pack(result, plan))
        for piece, part in zip(plan.pieces, parts):
            server = servers[piece.server]
            rt.send(server.rank, {"grad": part, "offset": piece.start - server.start, "loss": loss,
                                  **headers[piece.server]}, tag=tag, handover=True)
    return (yield computing)


def _pack(result: Any, plan: BucketPlan) -> list[Any]:
    """The bucket's pieces as they go on the wire (see ``GradResult.grad_for_message``)."""
    return [result.grad_for_message(piece.start, piece.stop) for piece in plan.pieces]


class PieceAssembly:
    """A server's pieces of the workers' bucketed pushes, held until a push is complete."""

    def __init__(self, expected: int):
        self.expected = expected
        self._parts: dict[int, list[dict[str, Any]]] = {}

    def complete(self, rt: Any, message: Any, copy_s: float):
        """The push ``message`` completes, or None (a generator): a whole push as it came; a
        bucketed push's last piece joins its pieces into the shard's gradient (``unpack
        gradient``, ``copy_s`` seconds; pieces not evaluated yet stay so, ``lazy``)."""
        if self.expected == 1:
            return message.payload
        parts = self.add(message.src, message.payload)
        if parts is None:
            return None
        ordered = self.ordered(parts)
        grad = yield rt.busy(copy_s, "unpack gradient", run=lambda *grads: flat_concat(grads),
                             inputs=[part["grad"] for part in ordered], lazy=True)
        return {**ordered[0], "grad": grad}

    def add(self, src: int, push: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The push's pieces once all ``expected`` have arrived from ``src``, else None."""
        parts = self._parts.setdefault(src, [])
        parts.append(push)
        if len(parts) < self.expected:
            return None
        del self._parts[src]
        return parts

    @staticmethod
    def ordered(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A push's pieces in offset order (pieces may overtake each other)."""
        return sorted(parts, key=lambda part: part["offset"])
