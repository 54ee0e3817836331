"""What the two sides of the parameter-server protocol share: message tags and a server's state.

A worker and a server talk in three kinds of message (:data:`TAG_PULL`, :data:`TAG_PUSH`,
:data:`TAG_WEIGHTS`; :mod:`.parameter_server` gives the protocol). A server keeps its shard
of the parameters, its version and the gradients waiting for its next update
(:class:`ServerState`); the k shards together are the model that is evaluated
(:class:`ShardedParameters`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .ps_buckets import PieceAssembly
from .tensors import flat_concat

__all__ = ["TAG_PULL", "TAG_PUSH", "TAG_WEIGHTS", "PendingGradient", "ServerState", "ShardedParameters"]

TAG_PULL = 101  # worker -> server: "send me your shard" (tiny payload)
TAG_PUSH = 102  # worker -> server: a gradient shard plus what the server needs to apply and record it
TAG_WEIGHTS = 103  # server -> worker: (shard, version), or an acknowledgement of a final push


@dataclass
class PendingGradient:
    """A pushed gradient shard waiting at a server for the update that applies it."""

    worker_rank: int
    worker_index: int
    grad: Any
    version_read: int
    batch_size: int
    loss: float | None
    read_s: float


@dataclass
class ServerState:
    """One server: its shard of the parameters, version and pending group."""

    index: int
    rank: int
    start: int
    stop: int
    replica: Any  # Replica (or PhantomReplica) of the shard
    version: int = 0
    gradients_applied: int = 0
    pending: list[PendingGradient] = field(default_factory=list)
    deferred: list[int] = field(default_factory=list)  # worker ranks whose reply waits for the next update
    finished: set[int] = field(default_factory=set)  # worker ranks whose final push has arrived
    total: Any = None  # the running sum of an aggregating server's round (None: no gradient yet)
    assembly: PieceAssembly = field(default_factory=lambda: PieceAssembly(1))  # pieces of bucketed pushes

    @property
    def numel(self) -> int:
        return self.stop - self.start


class ShardedParameters:
    """The k servers' shards seen as one model for evaluation (read-only ``params``)."""

    def __init__(self, replicas: list[Any]):
        self._replicas = replicas

    @property
    def params(self) -> Any:
        return flat_concat([r.params for r in self._replicas])
