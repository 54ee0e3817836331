"""The parameter-server protocol shared by asgd, nsoftsync and dbs (docs/algorithms.md §2–§4).

Ranks: the workers are the scenario's first N ranks (``ctx.workers``); the k servers
(``servers: k``, default 1) run on ``server_ranks``, by default the k ranks right after the
workers (N .. N+k−1). A scenario therefore needs at least N + k devices and must set
``workers`` explicitly (``workers: 4`` on a 5-device platform): by default every device
trains, leaving none for a server. :meth:`ParameterServerConfig.check_scenario` says so.

Sharding: the flat parameter vector is split into k contiguous shards of nearly equal
size; server j holds shard j, its optimizer state and its own version counter. A worker
pulls and pushes every shard (k messages each way); staleness of a gradient at server j
is that server's version when it applies the gradient minus the version the worker read.

Protocol (tags :data:`TAG_PULL`, :data:`TAG_PUSH`, :data:`TAG_WEIGHTS`):

* worker, once at start: send a small pull request to every server, receive ``(w_j, v_j)``;
  with a shared epoch pool (dbs, :mod:`simdist.training.data_pool`) every pull and push also
  says how many samples the worker wants next (``want``), and server 0's reply carries that
  slice of the epoch (``batch``), or None once the pool is exhausted (an acknowledgement);
* worker loop: load the received weights, compute the gradient of the next batch, push
  shard j of it to server j with the version read, batch size, loss and the time the
  weights were read; then receive the next ``(w_j, v_j)`` — the server's reply to the
  push *is* the next pull (docs/algorithms.md §2: "reply with the new (w, v) to that worker").
  ``push: buckets`` sends the gradient in buckets as backward produces them
  (:mod:`.ps_buckets`); the server waits for all of a push's buckets before using it;
* server loop: receive messages from any rank in arrival order. A pull request is
  answered at once. A push is summed into the round's aggregate or, one gradient at a time,
  applied (costs below); when the group holds c gradients (asgd and dbs: c = 1;
  nsoftsync: c = ⌊N/n⌋) the server applies the update and bumps its version. The reply
  goes out when the server is done with the push (``pull: immediate``: after the update if
  this push completed the group, otherwise right away) or, with ``pull: after_update``,
  once the update containing the gradient has been applied. Sends never block the server.

End of data: a worker flags its last push (``final``) and waits for an acknowledgement,
not weights. A server applies a partial group when no further gradient can arrive (every
worker has sent its final push or waits for an ``after_update`` reply), so every gradient
is applied exactly once and the run ends once all workers have their acknowledgements.
Servers loop forever; the simulation ends when every worker process has ended.

Copies: none per message. A pushed gradient is fresh and its worker never touches it
again, and a server's update makes a new weight tensor instead of writing into the old
one (:meth:`~simdist.training.replica.Replica.apply_gradient_fresh`), so both travel as a
:class:`~simdist.training.replica.Handover`: the receiver reads the sender's tensor, which
nobody writes to any more. A worker adopts the weights it receives as its replica's
parameters; workers that pulled the same version share one tensor, which the gradient
evaluator then recognises as equal weights without comparing values. What each gradient
is computed on, and the numbers, are the same as with copies. In the simulator a pushed
gradient travels unevaluated (``GradResult.grad_later``) and is evaluated when its server
applies it, batched with every request queued by then; the numbers are the same.

Records: every applied gradient is one ``update`` row written by server 0 (for k > 1,
server 0's shard stands for the model: rows = gradients, versions are server 0's), with
``age_s`` = apply time − time the worker read the weights. Every server's version and
gradient count are kept in :attr:`ParameterServerAlgorithm.servers_` for inspection.

Costs: all arithmetic runs inside ``rt.busy(seconds, name, run=...)``: the simulator charges
the modelled seconds, a real run times the math itself, under the same name (ledger part in
brackets). Seconds: the op model (:mod:`simdist.platform.op_costs`, measured or estimated):

* worker, ``unpack weights`` [unpack]: the pulled weights into the replica, op ``copy`` over
  all parameters (k > 1 shards are joined by a copy; one shard is adopted as received);
* worker, ``pack gradient`` [pack]: the gradient into its send buffer, op ``copy`` over all
  parameters, after forward/backward (``push: buckets``: per bucket, :mod:`.ps_buckets`);
* server, ``apply`` [update]: a server applying gradients one by one (asgd, dbs, nsoftsync
  with c = 1) pays op ``update`` (w ← w − η·g, 12 B/param) per gradient, plus op ``copy``
  (a read-1/write-1 pass) when the rule scales the gradient first (dbs ``weight_by_batch``,
  staleness-aware n-softsync);
* server, aggregating (nsoftsync, c > 1): ``accumulate`` [update] per push — the running sum
  ``Σ + g`` is op ``update``'s traffic (read 2, write 1); the round's first gradient starts
  the sum without a pass (the message's buffer is the server's and is never written), a
  staleness-scaled one adds a ``copy`` pass — and once per round ``apply`` [update]: op
  ``update`` plus, for more than one gradient, the ``(1/c)`` scaling pass (op ``copy``);
* server, ``unpack gradient`` [unpack] (``push: buckets`` only): a push's pieces joined into
  the shard's gradient, op ``copy`` over the shard, when the shard gets more than one piece.

``apply_time_per_param`` overrides the server's figure: that many seconds per parameter of its
shard for each ``apply`` and each ``accumulate``. A gradient the simulator has not evaluated yet
stays unevaluated through the sum (:func:`.ps_buckets.lazily`), so evaluations stay batched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import Field, NonNegativeInt, field_validator, model_validator

from ..errors import InputError, SimulationError
from ..runtime.base import Runtime
from ..training.data_pool import EpochPool
from ..training.replica import Handover, PhantomReplica, Replica, resolved
from ..units import parse_size
from .async_math import shard_bounds, staleness
from .base import Algorithm, AlgorithmConfig, AlgorithmContext, Process
from .ps_buckets import DEFAULT_BUCKET_BYTES, PieceAssembly, lazily, pieces_per_server, plan_buckets, push_in_buckets
from .tensors import flat_concat

__all__ = ["TAG_PULL", "TAG_PUSH", "TAG_WEIGHTS", "ParameterServerConfig",
           "ParameterServerAlgorithm", "ServerState", "PendingGradient", "BatchPolicy", "ShardedParameters"]

TAG_PULL = 101  # worker -> server: "send me your shard" (tiny payload)
TAG_PUSH = 102  # worker -> server: a gradient shard plus what the server needs to apply and record it
TAG_WEIGHTS = 103  # server -> worker: (shard, version), or an acknowledgement of a final push


class ParameterServerConfig(AlgorithmConfig):
    """Options every parameter-server algorithm shares."""

    servers: int = Field(1, ge=1, description="parameter servers k; parameters are split into k contiguous shards. "
                                              "Default 1 (or the length of server_ranks)")
    server_ranks: list[NonNegativeInt] | None = Field(
        None, description="ranks the servers run on, none of them a worker. Default: the k ranks after the "
                          "workers, N..N+k-1")
    apply_time_per_param: float | None = Field(
        None, ge=0, description="server time per parameter of its shard for each gradient it handles, in seconds. "
                                "Default: the device's measured or estimated 'update' op (simdist.platform.op_costs)")
    staleness_aware: bool = Field(
        False, description="damp a gradient of staleness s by 1/max(1, s) (Zhang et al.). Default false")
    push: Literal["whole", "buckets"] = Field(
        "whole", description="push the gradient once backward is done (whole) or bucket by bucket as backward "
                             "produces it, last layer first (buckets: MXNet kvstore / DDP style). Default whole")
    bucket_bytes: float = Field(
        DEFAULT_BUCKET_BYTES, ge=0, description="bucket size for push: buckets, e.g. '4MiB'; 0 = one bucket per "
                                                "parameter tensor. Default 25 MiB (PyTorch DDP)")

    @field_validator("bucket_bytes", mode="before")
    @classmethod
    def _size(cls, value: Any) -> float:
        return parse_size(value)

    @model_validator(mode="before")
    @classmethod
    def _servers_from_ranks(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("server_ranks"), list) and data.get("servers") is None:
            data = {**data, "servers": len(data["server_ranks"])}
        return data

    @model_validator(mode="after")
    def _ranks_consistent(self):
        ranks = self.server_ranks
        if ranks is not None:
            if len(ranks) != self.servers:
                raise ValueError(f"server_ranks lists {len(ranks)} ranks but servers is {self.servers}")
            if len(set(ranks)) != len(ranks):
                raise ValueError(f"server_ranks {ranks} repeats a rank; each server needs its own rank")
        return self

    def resolved_server_ranks(self, n_workers: int) -> list[int]:
        """The servers' ranks: ``server_ranks`` or N .. N+k−1."""
        if self.server_ranks is not None:
            return list(self.server_ranks)
        return list(range(n_workers, n_workers + self.servers))

    def check_scenario(self, scenario: Any) -> None:
        """Every server needs a rank of its own that exists and is not a worker."""
        n, k, devices = scenario.worker_count, self.servers, scenario.platform.device_count
        if self.server_ranks is None:
            if n + k > devices:
                raise InputError(
                    f"{self.name} needs {n} worker ranks plus {k} server rank(s) = {n + k} devices, but the platform "
                    f"has {devices}; set workers to at most {max(devices - k, 0)} (workers default to every device) "
                    f"or add devices", field="workers")
            return
        for rank in self.server_ranks:
            if rank >= devices:
                raise InputError(f"unknown server rank {rank}: the platform has ranks 0..{devices - 1}",
                                 field="algorithm.server_ranks")
            if rank < n:
                raise InputError(f"server rank {rank} is also a worker (workers are ranks 0..{n - 1}); "
                                 f"choose ranks from {n} to {devices - 1} or lower workers",
                                 field="algorithm.server_ranks")


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


class BatchPolicy:
    """A worker's batch size: the scenario's ``batch_size`` every step (dbs overrides this)."""

    def __init__(self, base_batch_size: int):
        self.batch_size = base_batch_size

    def next_batch_size(self, rt: Runtime, reply: dict[str, Any]) -> int:
        """Called before each step with server 0's latest reply: the size of this step's batch (or, drawing
        from a shared epoch pool, the size this step's push asks for next)."""
        return self.batch_size

    def observe(self, iteration_s: float, compute_s: float, samples: int) -> None:
        """One loop (compute, push, reply) took ``iteration_s``, its forward/backward ``compute_s``
        on ``samples`` samples."""

    def report(self) -> Any:
        """What the next push tells the server about this worker (dbs: its last measurement), or None."""
        return None


class ParameterServerAlgorithm(Algorithm):
    """Workers pull, compute and push; servers apply groups of ``group_size`` gradients.

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

    # -- worker -------------------------------------------------------------------------

    def _worker(self, rt: Runtime, index: int):
        replica, data, policy = self.replicas[index], self.data[index], self.policies[index]
        copy_s = self.ctx.op_seconds(rt.rank, "copy", self.ctx.workload.param_count)
        bucket_s = [self.ctx.op_seconds(rt.rank, "copy", plan.numel) for plan in self.buckets or ()]
        for server in self.servers_:
            rt.send(server.rank, {"worker": index, "want": policy.batch_size}, tag=TAG_PULL)
        replies = yield from self._receive(rt)
        read_s = rt.now()
        while True:
            if self.pool is not None and replies[0]["batch"] is None:
                return  # the pool is exhausted: server 0's last reply was an acknowledgement
            yield rt.busy(copy_s, "unpack weights", run=lambda: replica.adopt(self._weights(replies)))
            size = policy.next_batch_size(rt, replies[0])
            if self.pool is None:
                batch = data.next_batch(size)
                final = data.exhausted
            else:  # the batch came with the reply; this push asks for the next one at the new size
                batch, final = replies[0]["batch"].batch(data.sharder, index), False
            headers = [{"version": reply["version"], "batch_size": batch.size, "read_s": read_s, "final": final,
                        "report": policy.report(), "want": size} for reply in replies]
            computing = rt.compute(replica, batch)
            if self.buckets is None:
                result = yield from self._push_whole(rt, computing, headers, copy_s)
            else:
                result = yield from push_in_buckets(rt, computing, self.buckets, bucket_s, self.servers_, headers,
                                                    TAG_PUSH)
            replies = yield from self._receive(rt)
            if final:
                return
            now = rt.now()
            policy.observe(now - read_s, result.end_s - result.start_s, batch.size)
            read_s = now

    @staticmethod
    def _weights(replies: list[dict[str, Any]]) -> Any:
        return replies[0]["params"] if len(replies) == 1 else flat_concat([r["params"] for r in replies])

    def _push_whole(self, rt: Runtime, computing: Any, headers: list[dict[str, Any]], pack_s: float):
        result = yield computing
        grads = yield rt.busy(pack_s, "pack gradient",
                              run=lambda: [result.grad_later(s.start, s.stop) for s in self.servers_])
        for server, header, grad in zip(self.servers_, headers, grads):
            rt.send(server.rank, {"grad": grad, "loss": result.loss_later(), **header}, tag=TAG_PUSH)
        return result

    def _receive(self, rt: Runtime):
        replies = []
        for server in self.servers_:
            message = yield rt.recv(src=server.rank, tag=TAG_WEIGHTS)
            replies.append(message.payload)
        return replies

    # -- server -------------------------------------------------------------------------

    def _server(self, rt: Runtime, server: ServerState):
        update_s, copy_s = (self.ctx.op_seconds(rt.rank, op, server.numel) for op in ("update", "copy"))
        seconds = self._seconds_of(server, update_s, copy_s)
        while True:
            message = yield rt.recv()
            if message.tag == TAG_PULL:
                self._reply(rt, server, message.src, want=message.payload.get("want"))
                continue
            if message.tag != TAG_PUSH:
                raise SimulationError(f"server rank {rt.rank} got a message with tag {message.tag} from rank "
                                      f"{message.src}; servers expect only pulls ({TAG_PULL}) and pushes ({TAG_PUSH})")
            push = yield from server.assembly.complete(rt, message, copy_s, server.replica.nbytes)
            if push is not None:
                yield from self._take(rt, server, message.src, push, seconds)

    def _seconds_of(self, server: ServerState, update_s: float, copy_s: float):
        """Seconds of an apply or accumulate: ``update`` and ``copy`` passes, or apply_time_per_param."""
        per_param = self.config.apply_time_per_param
        if per_param is not None:
            return lambda updates, copies: per_param * server.numel
        return lambda updates, copies: updates * update_s + copies * copy_s

    def _take(self, rt: Runtime, server: ServerState, src: int, push: dict[str, Any], seconds):
        index = self._index_of[src]
        self.on_push(server, index, push)
        gradient = PendingGradient(src, index, push["grad"], push["version"], push["batch_size"], push["loss"],
                                   push["read_s"])
        if self.group_size > 1:  # summed into the round's aggregate now
            s = staleness(server.version, gradient.version_read)
            server.total = yield rt.busy(
                seconds(server.total is not None, self.scales(gradient, s)), "accumulate",
                run=lambda: lazily(lambda total, grad: self.accumulate(total, grad, s), server.total, gradient.grad,
                                   nbytes=server.replica.nbytes))
        server.pending.append(gradient)
        if push["final"]:
            server.finished.add(src)
        if self.reply_after_update:
            server.deferred.append(src)
        if len(server.pending) >= self.group_size or self._no_more_gradients(server):
            yield from self._update(rt, server, seconds)
        if not self.reply_after_update:
            self._reply(rt, server, src, ack=push["final"], want=push.get("want"))

    def _no_more_gradients(self, server: ServerState) -> bool:
        """True when every worker has finished or waits for this server's next update."""
        waiting = sum(1 for rank in server.deferred if rank not in server.finished)
        return len(server.finished) + waiting >= len(self.ctx.workers)

    def _update(self, rt: Runtime, server: ServerState, seconds):
        pending, server.pending = server.pending, []
        total, server.total = server.total, None
        stalenesses = [staleness(server.version, p.version_read) for p in pending]
        if self.group_size > 1:
            cost_s = seconds(1, len(pending) > 1)
        else:
            cost_s = seconds(1, sum(self.scales(p, s) for p, s in zip(pending, stalenesses)))
        yield rt.busy(cost_s, "apply", run=lambda: self._apply_math(server, pending, stalenesses, total))
        server.version += 1
        server.gradients_applied += len(pending)
        if server.index == 0:
            now = rt.now()
            for p, s in zip(pending, stalenesses):
                rt.record("update", worker=p.worker_rank, step=server.version, version=server.version, staleness=s,
                          batch_size=p.batch_size, loss=resolved(p.loss), age_s=now - p.read_s)
        deferred, server.deferred = server.deferred, []
        for rank in deferred:  # in the order their pushes arrived
            self._reply(rt, server, rank, ack=rank in server.finished)

    def _apply_math(self, server: ServerState, pending: list[PendingGradient], stalenesses: list[int],
                    total: Any) -> None:
        """The update itself: a new weight tensor, so replies already sent keep their weights."""
        if self.group_size > 1:
            grad, lr = self.average(resolved(total), len(pending))
        else:  # gradients pushed unevaluated are evaluated now, batched with all queued by now
            for p in pending:
                p.grad = resolved(p.grad)
            grad, lr = self.combine(pending, stalenesses)
        server.replica.apply_gradient_fresh(grad, lr=lr)

    def _reply(self, rt: Runtime, server: ServerState, dst: int, *, ack: bool = False, want: int | None = None) -> None:
        extra = self.reply_extra(server)
        if self.pool is not None and server.index == 0 and not ack:  # server 0 hands out the worker's next batch
            extra["batch"] = self.pool.take(want)
            if extra["batch"] is None:  # nothing left: the worker stops, so no weights
                ack = True
                server.finished.add(dst)
        payload = {"params": None if ack else Handover(server.replica.params), "version": server.version, **extra}
        rt.send(dst, payload, tag=TAG_WEIGHTS)
