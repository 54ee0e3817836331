"""The parameter-server protocol shared by asgd, nsoftsync and dbs (docs/algorithms.md §2–§4).

Ranks and options: the workers are the scenario's first N ranks, the k servers run on ranks
of their own (:mod:`.ps_config`: ``servers``, ``server_ranks``, ``apply_time_per_param``,
``staleness_aware``, ``push``, ``bucket_bytes``).

Sharding: the flat parameter vector is split into k contiguous shards of nearly equal
size; server j holds shard j, its optimizer state and its own version counter. A worker
pulls and pushes every shard (k messages each way); staleness of a gradient at server j
is that server's version when it applies the gradient minus the version the worker read.

Protocol (tags :data:`TAG_PULL`, :data:`TAG_PUSH`, :data:`TAG_WEIGHTS`, :mod:`.ps_state`):

* worker (:mod:`.ps_worker`): pull every shard once at start; then loop: load the received
  weights, compute the gradient of the next batch, push shard j of it to server j with the
  version read, batch size, loss and the time the weights were read, receive the next
  ``(w_j, v_j)`` — the server's reply to the push *is* the next pull (docs/algorithms.md §2:
  "reply with the new (w, v) to that worker"). ``push: buckets`` sends the gradient in buckets
  as backward produces them (:mod:`.ps_buckets`); the server waits for all of a push's
  buckets before using it. With a shared epoch pool (dbs) pulls and pushes say how many
  samples the worker wants next (``want``) and server 0's replies carry the batch;
* server (:mod:`.ps_server`): answer pulls at once; sum a push into the round's aggregate or
  apply it; when the group holds c gradients (asgd and dbs: c = 1; nsoftsync: c = ⌊N/n⌋)
  apply the update and bump the version; reply when done with the push (``pull:
  immediate``) or once the update containing it has been applied (``pull: after_update``).
  Sends never block the server.

End of data: a worker flags its last push (``final``) and waits for an acknowledgement,
not weights; a server applies a partial group once no further gradient can arrive, so every
gradient is applied exactly once and the run ends once all workers have their
acknowledgements. Servers loop forever; the simulation ends when every worker process has ended.

Copies: none per message. Gradients and weights are sent with ``handover=True``: the sender
never writes them again (a server's update makes a new weight tensor), so receivers read the
sender's tensor. In the simulator a pushed gradient travels unevaluated
(``GradResult.grad_for_message``) and is evaluated when its server applies it, batched with
every request queued by then; the numbers are the same.

Records: every applied gradient is one ``update`` row written by server 0, with ``age_s`` =
apply time − time the worker read the weights. Every server's version and gradient count are
kept in :attr:`ParameterServerAlgorithm.servers_` for inspection.

Costs: what workers pay (``pack gradient``, ``unpack weights``) is in :mod:`.ps_worker`,
what servers pay (``apply``, ``accumulate``, ``unpack gradient``) in :mod:`.ps_server`; all
of it runs inside ``rt.busy``, with seconds from :mod:`simdist.platform.op_costs`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..errors import InputError, SimulationError
from ..runtime.base import Runtime
from ..training.data_pool import EpochPool
from ..training.replica import PhantomReplica, Replica
from .async_math import shard_bounds
from .base import Algorithm, AlgorithmContext, Process
from .ps_buckets import PieceAssembly, pieces_per_server, plan_buckets
from .ps_config import ParameterServerConfig
from .ps_server import ServerLoop
from .ps_state import TAG_PULL, TAG_PUSH, TAG_WEIGHTS, PendingGradient, ServerState, ShardedParameters
from .ps_worker import BatchPolicy, WorkerLoop

__all__ = ["TAG_PULL", "TAG_PUSH", "TAG_WEIGHTS", "ParameterServerConfig",
           "ParameterServerAlgorithm", "ServerState", "PendingGradient", "BatchPolicy", "ShardedParameters"]


class ParameterServerAlgorithm(WorkerLoop, ServerLoop, Algorithm):
    """Workers pull, compute and push; servers apply groups of ``group_size`` gradients.

    The worker loop is :class:`~.ps_worker.WorkerLoop`'s, the server loop :class:`~.ps_server.ServerLoop`'s.
    Subclasses set ``group_size`` / ``reply_after_update`` in ``__init__`` and may override
    :meth:`combine` (the rule of a server applying gradients one by one), :meth:`accumulate`
    and :meth:`average` (the rule of an aggregating server, ``group_size`` > 1), :meth:`scales`,
    :meth:`make_policy`, :meth:`on_push` and :meth:`reply_extra`.
    """

    Config: ClassVar[type[ParameterServerConfig]] = ParameterServerConfig

    def __init__(self, config: ParameterServerConfig, ctx: AlgorithmContext):
        super().__init__(config, ctx)
        numel = ctx.workload.param_count
        if config.servers > numel:
            raise InputError(f"{config.servers} servers cannot share {numel} parameters", field="algorithm.servers")
        self.group_size = 1
        self.reply_after_update = False
        self.lr = ctx.workload.optimizer_config.lr
        self.server_ranks = config.resolved_server_ranks(ctx.n_workers)
        self.replicas = [ctx.make_replica() for _ in ctx.workers]
        self.data = [ctx.make_data(i) for i in range(ctx.n_workers)]
        self.policies = [self.make_policy(i) for i in range(ctx.n_workers)]
        self._index_of = {rank: i for i, rank in enumerate(ctx.workers)}
        full = ctx.make_replica()
        bounds = shard_bounds(numel, config.servers)
        self.servers_ = [ServerState(j, rank, start, stop, self._shard_replica(full, start, stop))
                         for j, (rank, (start, stop)) in enumerate(zip(self.server_ranks, bounds))]
        self.buckets = self._plan_buckets(bounds, full.params.element_size()) if config.push == "buckets" else None
        self.pool = self.make_pool()

    def _shard_replica(self, full: Any, start: int, stop: int) -> Any:
        if len(self.server_ranks) == 1:
            return full
        if self.ctx.timing_only:
            return PhantomReplica(stop - start, full.optimizer)
        return Replica(full.params[start:stop].clone(), full.optimizer)

    def _plan_buckets(self, bounds: list[tuple[int, int]], element_bytes: int):
        plans = plan_buckets(self.ctx.workload.layers, self.config.bucket_bytes, element_bytes, bounds)
        for server, expected in zip(self.servers_, pieces_per_server(plans, len(bounds))):
            server.assembly = PieceAssembly(expected)
        return plans

    # -- what subclasses change -------------------------------------------------------

    def make_policy(self, index: int) -> BatchPolicy:
        return BatchPolicy(self.ctx.batch_size)

    def make_pool(self) -> EpochPool | None:
        """The shared epoch pool server 0 hands batches out of, or None: each worker walks its own shard."""
        return None

    def combine(self, pending: list[PendingGradient], stalenesses: list[int]) -> tuple[Any, float]:
        """(gradient to apply, learning rate) of one update from its pending gradients."""
        raise NotImplementedError

    def accumulate(self, total: Any, gradient: Any, s: int) -> Any:
        """An aggregating server's running sum with one more gradient of staleness ``s`` (total None: the first)."""
        raise NotImplementedError

    def average(self, total: Any, count: int) -> tuple[Any, float]:
        """(gradient to apply, learning rate) from an aggregating server's sum of ``count`` gradients."""
        raise NotImplementedError

    def scales(self, gradient: PendingGradient, s: int) -> bool:
        """Whether the rule scales this gradient before using it (one more pass over the shard)."""
        return False

    def on_push(self, server: ServerState, worker_index: int, payload: dict[str, Any]) -> None:
        """A push arrived at ``server`` (before it joins the pending group)."""

    def reply_extra(self, server: ServerState) -> dict[str, Any]:
        """Extra fields of every reply of ``server`` (dbs: worker 0's iteration times)."""
        return {}

    # -- Algorithm interface ----------------------------------------------------------

    def processes(self) -> dict[int, Process]:
        if self.pool is not None and (self.group_size > 1 or self.reply_after_update):
            raise SimulationError("a shared epoch pool needs servers that reply to every push right away")
        procs: dict[int, Process] = {rank: self._bind(self._worker, i) for i, rank in enumerate(self.ctx.workers)}
        procs.update({server.rank: self._bind(self._server, server) for server in self.servers_})
        return procs

    def evaluation_replicas(self) -> dict[int, Any]:
        if len(self.servers_) == 1:
            return {self.servers_[0].rank: self.servers_[0].replica}
        return {self.servers_[0].rank: ShardedParameters([s.replica for s in self.servers_])}

    def epochs_completed(self) -> float:
        if self.pool is not None:
            return self.pool.epochs_completed
        return sum(d.epochs_completed for d in self.data) / len(self.data)

    @staticmethod
    def _bind(method, arg) -> Process:
        def run(rt: Runtime):
            return method(rt, arg)
        return run
