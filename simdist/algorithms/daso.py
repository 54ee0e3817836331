"""daso — Distributed Asynchronous and Selective Optimization (docs/algorithms.md §5).

P nodes × G GPUs (nodes are ``ctx.node_of`` of the worker ranks; at least 2 nodes with the
same number of workers each). Two networks: each node's GPUs (node-local group), and G
global groups, group k holding the GPU with local rank k on every node.

Every batch, every GPU: forward/backward, node-local allreduce-average of the gradients, the
local optimizer step (replicas inside a node stay identical). Every B batches one global group
synchronises the parameters across nodes; the group rotates with each global sync:

* blocking (warm-up and cool-down, and whenever S = 0): the members allreduce their
  parameters cast to bfloat16, cast the sum back and divide by P;
* non-blocking (cycling, S ≥ 1): the members start an allreduce(sum) of their float32
  parameters and every GPU goes on with local steps; after S more batches the members take
  the sum and merge, x ← (2S·x_local + Σ x_i) / (2S + P) (:func:`.daso_math.daso_merge`);

then the member broadcasts the result to the other GPUs of its node. Phases and (B, S) come
from :mod:`.daso_math`: warm-up for ``warmup_epochs`` (blocking, every batch), cycling from
B = max_global_skips // 2, S = 1, steered by a plateau test on the epoch's training loss,
cool-down for the last ``cooldown_epochs`` (blocking, every batch). ``schedule: fixed``
keeps B and S for the whole run, without phases (the published parameter study).

Agreeing on the schedule: each worker knows only its own losses, so at the end of every
epoch (adaptive schedule) all workers allreduce their epoch's mean training loss (8 bytes,
timed like any collective) and every worker runs the same state machine on the same average.
Timing-only runs take losses from ``workload.loss_curve``.

Records: an ``update`` row per worker per local step (``step`` = ``version`` = the worker's
local step count) whose ``staleness`` is the number of local steps the worker's parameters
had taken since a global sync was last merged into them when its gradient was computed
(0 while syncing every batch; 0 … B − 1 in steady cycling, up to B + S − 1 right after
warm-up or a schedule change); a ``global_sync`` event per sync
(group, S waited, blocking, B); ``phase`` and ``schedule`` events when they change
(recorded once, by the first worker); an ``epoch_loss`` event per averaged epoch loss.

**choices** (docs/algorithms.md §5 lists them):

* B counts batches across epochs (a send after every B-th batch since the previous send);
  Heat's reference restarts the count every epoch (sends at batch 0, B, 2B, ...) and also
  syncs every epoch's last batch — not done here: docs/algorithms.md §5 says every B batches;
* with the adaptive schedule no global sync crosses an epoch end, where (B, S) may change:
  a non-blocking sync still pending at the epoch's last batch is merged there, weighted with
  the S' < S batches it actually waited (Heat's reference cuts the wait the same way); with
  ``schedule: fixed`` syncs run across epoch ends. A sync still pending when the data ends
  is merged after the last batch;
* the merge and the node broadcast come before a new send in the same batch (S = B);
* evaluation reports worker 0's replica (node 0), as sync does;
* ``schedule: fixed`` without B or S uses B = 4, S = 1 (the published experiments' values).

**Costs**: every rank's own work is charged through ``rt.busy`` with its math in ``run=``
(what each piece costs, and the host staging of global syncs: :mod:`.daso_costs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..runtime.base import Runtime
from .base import ALGORITHMS, AlgorithmContext, PeerAlgorithm, Process
from .daso_config import DEFAULT_FIXED_B, DEFAULT_FIXED_S, DasoConfig, node_layout
from .daso_costs import DasoCosts, tensor_nbytes
from .daso_math import Schedule, bf16_average, daso_merge, initial_schedule, local_average, next_schedule, to_bf16

__all__ = ["DasoConfig", "Daso", "node_layout", "DEFAULT_FIXED_B", "DEFAULT_FIXED_S"]


@dataclass
class _Pending:
    """A non-blocking global sync in flight; every GPU keeps one, only the group's members a request."""

    group: int  # index of the global group (= the local rank of its members)
    request: Any  # the iallreduce request on members, None elsewhere
    sent_batch: int  # the batch count when it was sent
    S: int  # batches it is to wait


@ALGORITHMS.register("daso", "DASO: node-local gradient allreduce every batch, global parameter sync by one "
                             "rotating group every B batches, non-blocking with a stale merge, adaptive B and S",
                     citation="Coquelin et al., Accelerating neural network training with distributed asynchronous "
                              "and selective optimization (DASO), J. Big Data 9, 14 (2022); Heat heat.optim.DASO",
                     config=DasoConfig)
class Daso(PeerAlgorithm):
    """DASO: hierarchical, partly asynchronous data parallelism."""

    Config = DasoConfig
    # without tensor math every GPU of one local rank runs the same program (lanes: lockstep_lanes);
    # each leaves a node's collective at its node's own time
    lockstep = "timing_only"
    lockstep_apart = True
    lockstep_lanes_join = True

    def __init__(self, config: DasoConfig, ctx: AlgorithmContext):
        super().__init__(config, ctx)
        self.nodes = node_layout(ctx.workers, ctx.node_of)
        self.options = config.options(ctx.max_epochs)

    def lockstep_lanes(self) -> list[list[int]]:
        """One lane per local rank, its GPUs in node order: local rank k's GPUs take part in the
        same global syncs, and every node's GPUs meet in their node's collectives."""
        return [[ranks[k] for ranks in self.nodes] for k in range(len(self.nodes[0]))]

    def _bind(self, index: int) -> Process:
        rank = self.ctx.workers[index]
        node = next(n for n, ranks in enumerate(self.nodes) if rank in ranks)

        def run(rt: Runtime):
            return _Gpu(self, rt, index, node, self.nodes[node].index(rank)).run()
        return run


class _Gpu:
    """One worker's process: its replica, its groups and the schedule state it shares with every GPU.

    Every GPU takes the same decisions in the same order (when to receive, send, change the
    schedule), so collectives on the node group, the global groups and the world always match.
    """

    def __init__(self, daso: Daso, rt: Runtime, index: int, node: int, local_rank: int):
        ctx = daso.ctx
        self.rt, self.options = rt, daso.options
        self.replica, self.data, self.batch_size = daso.replicas[index], daso.data[index], ctx.batch_size
        self.node, self.local_rank = node, local_rank
        self.gpus_per_node, self.nodes = len(daso.nodes[node]), len(daso.nodes)
        self.node_group = rt.group(daso.nodes[node], f"node{node}")
        self.global_group = rt.group([ranks[local_rank] for ranks in daso.nodes], f"global{local_rank}")
        self.world = rt.group(ctx.workers, "world") if self.options.adaptive else None
        self.recorder = index == 0  # records the run-wide events (phase, schedule, epoch loss) once
        self.schedule = initial_schedule(self.options)
        self.batches = 0  # local steps taken
        self.since_merge = 0  # local steps since a global sync was last merged into the parameters
        self.since_send = 0  # batches since the last global sync was sent
        self.syncs = 0  # global syncs started: sync j is done by group j mod G
        self.pending: _Pending | None = None
        self.loss_sum, self.samples = 0.0, 0  # this epoch's sample-weighted training loss
        self.params = ctx.workload.param_count
        self.costs = DasoCosts.of(ctx, ctx.workers[index], daso.config.global_staging)

    def run(self):
        rt, replica, data = self.rt, self.replica, self.data
        if self.recorder:
            self._record_schedule(None, epoch=0)
        while True:
            batch = data.next_batch(self.batch_size)
            if batch is None:
                return
            result = yield rt.compute(replica, batch)
            yield from self._local_step(result.grad)
            self.batches += 1
            rt.record("update", worker=rt.rank, step=self.batches, version=self.batches,
                      staleness=self.since_merge, batch_size=batch.size, loss=result.loss)
            self.since_merge += 1
            self.since_send += 1
            if result.loss is not None:
                self.loss_sum += float(result.loss) * batch.size
                self.samples += batch.size
            epoch_ended = data.epoch != batch.epoch
            cut_short = epoch_ended and (data.exhausted or self.options.adaptive)  # no sync may cross this point
            if self.pending is not None and (self.batches - self.pending.sent_batch >= self.pending.S or cut_short):
                yield from self._receive()
            if self.since_send >= self.schedule.B:
                yield from self._send(finish_now=cut_short)
            if epoch_ended and self.options.adaptive and not data.exhausted:
                yield from self._next_schedule(finished_epoch=batch.epoch)

    def _local_step(self, grad: Any):
        """Node-local allreduce-average of the gradient (packed into a buffer, unpacked after), then the step."""
        rt, costs, replica = self.rt, self.costs, self.replica
        packed = yield rt.busy(costs.copy_s, "pack gradient", run=grad.clone)
        total = yield rt.allreduce(self.node_group, packed)
        average = yield rt.busy(costs.copy_s, "unpack gradient", run=lambda: local_average(total, self.gpus_per_node))
        yield rt.busy(costs.update_s, "update", run=lambda: replica.apply_gradient(average))

    def _send(self, *, finish_now: bool):
        """Start global sync number ``self.syncs`` on the rotating group."""
        k = self.syncs % self.gpus_per_node
        self.syncs += 1
        self.since_send = 0
        member = k == self.local_rank
        rt, costs, replica = self.rt, self.costs, self.replica
        if self.schedule.blocking:
            if member:
                sent = yield rt.busy(costs.cast_s, "pack parameters bf16", run=lambda: to_bf16(replica.params))
                yield from self._stage_out(sent)
                total = yield rt.allreduce(self.global_group, sent)
                yield from self._stage_in(total)
                yield rt.busy(costs.cast_s, "unpack parameters bf16",
                              run=lambda: replica.load(bf16_average(total, self.nodes)))
            yield from self._node_broadcast(k)
            self.since_merge = 0
            self._record_sync(k, S=0, blocking=True)
            return
        request = None
        if member:
            sent = yield rt.busy(costs.copy_s, "pack parameters", run=replica.params.clone)
            yield from self._stage_out(sent)
            request = rt.iallreduce(self.global_group, sent)
        self.pending = _Pending(k, request, self.batches, self.schedule.S)
        if finish_now:  # the epoch (adaptive) or the data ends with this batch: no batches left to wait
            yield from self._receive()

    def _receive(self):
        """Merge the pending non-blocking sync (members), then the node broadcast."""
        pending, self.pending = self.pending, None
        waited = self.batches - pending.sent_batch
        if pending.request is not None:
            total = yield pending.request
            yield from self._stage_in(total)
            replica = self.replica
            yield self.rt.busy(self.costs.merge_s, "global merge", part="update",
                               run=lambda: replica.load(daso_merge(replica.params, total, waited, self.nodes)))
        yield from self._node_broadcast(pending.group)
        self.since_merge = 0
        self._record_sync(pending.group, S=waited, blocking=False)

    def _stage_out(self, sent: Any):
        """Host staging (``global_staging: host`` on a GPU): the buffer MPI sends goes to host memory."""
        host = self.costs.host
        if host is not None:
            yield self.rt.busy(host.copy_s(tensor_nbytes(sent)), "pack host staging")

    def _stage_in(self, total: Any):
        """Host staging: this rank's share of the sums on a host core, then the result back to the device."""
        host = self.costs.host
        if host is not None:
            dtype_name = str(total.dtype).removeprefix("torch.")
            yield self.rt.busy(host.reduction_s(self.params, self.nodes, dtype_name), "host reduction", part="update")
            yield self.rt.busy(host.copy_s(tensor_nbytes(total)), "unpack host staging")

    def _node_broadcast(self, group_index: int):
        """The global group's member on this node sends its parameters to the node's other GPUs."""
        if self.node_group.size > 1:
            root = self.node_group.ranks[group_index]
            params = yield self.rt.broadcast(self.node_group, self.replica.params, root=root)
            self.replica.load(params)

    def _next_schedule(self, finished_epoch: int):
        """Average the epoch's training loss over all workers (a timed 8-byte allreduce) and step the schedule."""
        mean = self.loss_sum / self.samples if self.samples else 0.0
        self.loss_sum, self.samples = 0.0, 0
        total = yield self.rt.allreduce(self.world, torch.tensor([mean], dtype=torch.float64))
        loss = float(total[0]) / self.world.size
        previous = self.schedule
        self.schedule = next_schedule(previous, loss, finished_epoch + 1, self.options)
        if self.recorder:
            self.rt.record("epoch_loss", run_wide=True, epoch=finished_epoch, loss=loss)
            self._record_schedule(previous, epoch=finished_epoch + 1)

    def _record_sync(self, group_index: int, *, S: int, blocking: bool) -> None:
        if self.node == 0 and group_index == self.local_rank:  # once per sync: by the group's node-0 member
            self.rt.record("global_sync", run_wide=True, group=group_index, S=S, blocking=blocking,
                           B=self.schedule.B, step=self.batches)

    def _record_schedule(self, previous: Schedule | None, *, epoch: int) -> None:
        schedule = self.schedule
        if previous is None or schedule.phase != previous.phase:
            self.rt.record("phase", run_wide=True, phase=schedule.phase, epoch=epoch, B=schedule.B, S=schedule.S)
        if previous is None or (schedule.B, schedule.S) != (previous.B, previous.S):
            self.rt.record("schedule", run_wide=True, epoch=epoch, phase=schedule.phase, B=schedule.B,
                           S=schedule.S)
