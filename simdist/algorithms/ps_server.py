"""A parameter server: take pushes, apply gradients to its shard, reply (docs/algorithms.md §2–§4).

A server receives messages from any rank in arrival order. A pull request is answered at
once. A push is summed into the round's aggregate or, one gradient at a time, applied (costs
below); when the group holds c gradients (asgd and dbs: c = 1; nsoftsync: c = ⌊N/n⌋) the
server applies the update and bumps its version. The reply goes out when the server is done
with the push (``pull: immediate``: after the update if this push completed the group,
otherwise right away) or, with ``pull: after_update``, once the update containing the
gradient has been applied. Sends never block the server. A bucketed push is used once all its
pieces have arrived (:mod:`.ps_buckets`).

End of data: a server applies a partial group when no further gradient can arrive (every
worker has sent its final push or waits for an ``after_update`` reply), so every gradient is
applied exactly once; a final push is answered with an acknowledgement. Servers loop forever;
the run ends when every worker process has ended.

Copies: none. An update makes a new weight tensor instead of writing into the old one
(:meth:`~simdist.training.replica.Replica.apply_gradient_fresh`), so replies send the weights
with ``handover=True``: the receivers read the server's tensor, which nobody writes to any
more. What each gradient is computed on, and the numbers, are the same as with copies.

Records: every applied gradient is one ``update`` row written by server 0 (for k > 1, server
0's shard stands for the model: rows = gradients, versions are server 0's), with ``age_s`` =
apply time − time the worker read the weights.

Costs: all arithmetic runs inside ``rt.busy(seconds, name, run=...)``: the simulator charges
the modelled seconds, a real run times the math itself, under the same name (ledger part in
brackets). Seconds: the op model (:mod:`simdist.platform.op_costs`, measured or estimated):

* ``apply`` [update]: a server applying gradients one by one (asgd, dbs, nsoftsync with
  c = 1) pays op ``update`` (w ← w − η·g, 12 B/param) per gradient, plus op ``copy`` (a
  read-1/write-1 pass) when the rule scales the gradient first (dbs ``weight_by_batch``,
  staleness-aware n-softsync);
* aggregating (nsoftsync, c > 1): ``accumulate`` [update] per push — the running sum
  ``Σ + g`` is op ``update``'s traffic (read 2, write 1); the round's first gradient starts
  the sum without a pass (the message's buffer is the server's and is never written), a
  staleness-scaled one adds a ``copy`` pass — and once per round ``apply`` [update]: op
  ``update`` plus, for more than one gradient, the ``(1/c)`` scaling pass (op ``copy``);
* ``unpack gradient`` [unpack] (``push: buckets`` only): a push's pieces joined into the
  shard's gradient, op ``copy`` over the shard, when the shard gets more than one piece.

``apply_time_per_param`` overrides the server's figure: that many seconds per parameter of its
shard for each ``apply`` and each ``accumulate``. A gradient the simulator has not evaluated yet
stays unevaluated through the sum (``rt.busy(..., inputs=..., lazy=True)``), so evaluations
stay batched.
"""

from __future__ import annotations

from typing import Any

from ..errors import SimulationError
from ..runtime.base import Runtime
from .async_math import staleness
from .ps_state import TAG_PULL, TAG_PUSH, TAG_WEIGHTS, PendingGradient, ServerState

__all__ = ["ServerLoop"]


class ServerLoop:
    """The server half of :class:`~simdist.algorithms.parameter_server.ParameterServerAlgorithm`
    (a mixin over its config, context, group size, reply rule, pool and update rules)."""

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
            push = yield from server.assembly.complete(rt, message, copy_s)
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
                run=lambda total, grad: self.accumulate(total, grad, s), inputs=(server.total, gradient.grad),
                lazy=True)
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
            cost_s, inputs = seconds(1, len(pending) > 1), (total,)
        else:
            cost_s = seconds(1, sum(self.scales(p, s) for p, s in zip(pending, stalenesses)))
            inputs = tuple(p.grad for p in pending)
        yield rt.busy(cost_s, "apply", run=lambda *grads: self._apply_math(server, pending, stalenesses, grads),
                      inputs=inputs)
        server.version += 1
        server.gradients_applied += len(pending)
        if server.index == 0:
            now = rt.now()
            for p, s in zip(pending, stalenesses):
                rt.record("update", worker=p.worker_rank, step=server.version, version=server.version, staleness=s,
                          batch_size=p.batch_size, loss=p.loss, age_s=now - p.read_s)
        deferred, server.deferred = server.deferred, []
        for rank in deferred:  # in the order their pushes arrived
            self._reply(rt, server, rank, ack=rank in server.finished)

    def _apply_math(self, server: ServerState, pending: list[PendingGradient], stalenesses: list[int],
                    grads: tuple[Any, ...]) -> None:
        """The update itself, on the round's sum or each pending gradient (``grads``, evaluated):
        a new weight tensor, so replies already sent keep their weights."""
        if self.group_size > 1:
            grad, lr = self.average(grads[0], len(pending))
        else:
            for p, grad in zip(pending, grads):
                p.grad = grad
            grad, lr = self.combine(pending, stalenesses)
        server.replica.apply_gradient_fresh(grad, lr=lr)

    def _reply(self, rt: Runtime, server: ServerState, dst: int, *, ack: bool = False, want: int | None = None) -> None:
        extra = self.reply_extra(server)
        if self.pool is not None and server.index == 0 and not ack:  # server 0 hands out the worker's next batch
            extra["batch"] = self.pool.take(want)
            if extra["batch"] is None:  # nothing left: the worker stops, so no weights
                ack = True
                server.finished.add(dst)
        payload = {"params": None if ack else server.replica.params, "version": server.version, **extra}
        rt.send(dst, payload, tag=TAG_WEIGHTS, handover=True)
