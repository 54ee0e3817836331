"""A parameter-server worker: pull the weights, compute a gradient, push it (docs/algorithms.md §2–§4).

Once at start a worker sends a small pull request to every server and receives ``(w_j, v_j)``;
with a shared epoch pool (dbs, :mod:`simdist.training.data_pool`) every pull and push also
says how many samples the worker wants next (``want``), and server 0's reply carries that
slice of the epoch (``batch``), or None once the pool is exhausted (an acknowledgement).

Its loop: load the received weights, compute the gradient of the next batch, push shard j of
it to server j with the version read, batch size, loss and the time the weights were read;
then receive the next ``(w_j, v_j)`` — the server's reply to the push *is* the next pull
(docs/algorithms.md §2: "reply with the new (w, v) to that worker"). ``push: buckets`` sends
the gradient in buckets as backward produces them (:mod:`.ps_buckets`). The last push is
flagged ``final`` and answered with an acknowledgement, not weights. A worker's batch size is
its :class:`BatchPolicy`'s (dbs resizes batches).

Copies: none. A pushed gradient is fresh and the worker never touches it again, so it is
sent with ``handover=True`` (:meth:`~simdist.runtime.base.Runtime.send`), as a part of the
gradient a message may carry before it is evaluated
(:meth:`~simdist.runtime.base.GradResult.grad_for_message`; the simulator evaluates it, batched,
when its server applies it). The worker adopts the weights it receives as its replica's
parameters; workers that pulled the same version share one tensor, which the gradient
evaluator then recognises as equal weights without comparing values.

Costs (``rt.busy``; seconds: op ``copy`` of :mod:`simdist.platform.op_costs`, measured or estimated):

* ``unpack weights`` [unpack]: the pulled weights into the replica, over all parameters
  (k > 1 shards are joined by a copy; one shard is adopted as received);
* ``pack gradient`` [pack]: the gradient into its send buffer, over all parameters, after
  forward/backward (``push: buckets``: per bucket, :mod:`.ps_buckets`).
"""

from __future__ import annotations

from typing import Any

from ..runtime.base import Runtime
from .ps_buckets import push_in_buckets
from .ps_state import TAG_PULL, TAG_PUSH, TAG_WEIGHTS
from .tensors import flat_concat

__all__ = ["BatchPolicy", "WorkerLoop"]


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


class WorkerLoop:
    """The worker half of :class:`~simdist.algorithms.parameter_server.ParameterServerAlgorithm`
    (a mixin over its replicas, data, policies, servers, buckets and pool)."""

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
                              run=lambda: [result.grad_for_message(s.start, s.stop) for s in self.servers_])
        for server, header, grad in zip(self.servers_, headers, grads):
            rt.send(server.rank, {"grad": grad, "loss": result.loss_for_message(), **header}, tag=TAG_PUSH,
                    handover=True)
        return result

    def _receive(self, rt: Runtime):
        replies = []
        for server in self.servers_:
            message = yield rt.recv(src=server.rank, tag=TAG_WEIGHTS)
            replies.append(message.payload)
        return replies
