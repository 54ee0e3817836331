"""nnt — Nearest-Neighbours Training (docs/algorithms.md §7).

Workers sit on a logical ring (two neighbours, N ≥ 3) or 2-D torus (four neighbours, at
least 3 × 3; :mod:`.nnt_topology`) and exchange gradients, not weights, with their
neighbours only. Per mini-batch, per worker::

    g = ∇L(w) on the local batch;  w ← w − η·g
    while a neighbour gradient is waiting (non-blocking poll):  w ← w − η·g_neighbour
    send g to every neighbour (non-blocking)

Gradients are the mean over the local batch (divided by the local batch size only, not by
N). Data is reshuffled and repartitioned every epoch by the shared epoch sharder.

Every ``sync_every_epochs`` epochs (default 1), at the end of the epoch: each worker waits
until its own sends are delivered, all meet at a barrier (so every gradient sent is then in
its receiver's mailbox) and apply what is still waiting; each worker measures its replica's
accuracy on the validation split (``workload.validation_metrics`` on at most
``evaluation.max_samples`` of the samples ``workload.validation_split`` holds out of the
training set; default split 0.1 for nnt, :attr:`NntConfig.default_validation_split`; an explicit
0 is refused: choosing on the test set would bias the test accuracy the run reports). This
evaluation is part of the protocol and costs a forward pass over those samples
(``rt.inference``); the scenario's monitoring evaluations (test set, ``evals.csv``) cost nothing
and steer nothing. An allgather shares the accuracies, and the best worker (lowest index on
ties) broadcasts its weights, which every replica loads. Barrier, allgather and broadcast are
timed collectives. A run that ends between syncs ends with the same drain (wait, barrier,
apply) so every gradient reaches each neighbour exactly once. Timing-only runs have no
accuracy (their training loss follows ``workload.loss_curve``): worker 0's weights are
broadcast, after the same evaluation cost.

Options (:class:`NntConfig`): ``topology`` (ring | grid, default ring), ``grid_shape``
(rows, cols; default the most square factorisation), ``sync_every_epochs`` (1),
``update_rule`` (``sgd``: exactly w ← w − η·g with η the optimizer's ``lr``, ignoring its
momentum and weight decay; ``optimizer``: the scenario's optimizer applied to every gradient
in arrival order, its state kept across syncs), ``update_time_per_param`` (seconds per
parameter charged for every applied gradient, own and neighbours'; default: every applied
gradient, own or a neighbour's, costs the device's ``update`` op — one axpy over the
parameters, measured by ``calibrate compute`` or estimated from memory bandwidth
(:mod:`simdist.platform.op_costs`); the compute profile's own optimizer step is taken out of
forward/backward (:mod:`simdist.platform.compute`), so it is not paid twice).

Records: one ``update`` row per applied gradient. A worker's own gradient: no staleness (empty),
``batch_size`` the samples it consumed, ``source: own``. A neighbour's gradient
(``source: neighbour``): ``step`` and ``version`` are the receiver's local step; staleness is
the receiver's local-step lag between the sender computing it and the receiver applying it,
i.e. how many of the receiver's own steps so far have gradients computed after the sender's
(strictly later compute end; 1 in lock-step, where a neighbour's gradient is applied right
after the receiver's next step; 0 if the receiver has not stepped since); ``age_s`` is the
seconds from the end of the sender's compute to the application; ``sender``, ``sender_step`` and ``sender_batch_size`` say where it came from; and
``batch_size`` is 0, because those samples are counted in the sender's own row (so samples
and throughput are not counted three or five times). The summary's staleness figures are
therefore those of the neighbours' gradients alone. In lock-step, information
spreads one hop per two local steps. Epoch syncs are ``nnt_sync`` events (``worker``, ``epoch``,
``validation_accuracy``, ``best_worker``, ``best_accuracy``: the best validation accuracy).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from ..config import FROM_LIST
from ..errors import InputError
from ..runtime.base import Runtime
from .base import ALGORITHMS, AlgorithmConfig, AlgorithmContext, PeerAlgorithm
from .nnt_topology import Layout, make_layout

__all__ = ["NntConfig", "Nnt", "TAG_GRADIENT", "sgd_step", "best_worker"]

TAG_GRADIENT = 201  # worker -> neighbour: a gradient and where it came from


class NntConfig(AlgorithmConfig):
    """Options of Nearest-Neighbours Training."""

    name: Literal["nnt"] = "nnt"
    # workload.validation_split where the scenario leaves it null: the best worker is chosen on it
    default_validation_split: ClassVar[float] = 0.1
    topology: Literal["ring", "grid"] = Field("ring", description="ring (2 neighbours, >= 3 workers) or grid "
                                                                  "(2-D torus, 4 neighbours, >= 3x3 workers)")
    grid_shape: Annotated[tuple[int, int], FROM_LIST] | None = Field(
        None, description="grid: (rows, cols), product = workers (default: the most square factorisation)")
    sync_every_epochs: int = Field(1, ge=1, description="epochs between restarts from the best worker. Default 1")
    update_rule: Literal["sgd", "optimizer"] = Field(
        "sgd", description="'sgd': w <- w - lr*g with the optimizer's lr; 'optimizer': the scenario's optimizer")
    update_time_per_param: float | None = Field(
        None, ge=0, description="seconds per parameter charged per applied gradient, own and neighbours'. Default: "
                                "the device's 'update' op, own and neighbours' alike")

    @model_validator(mode="after")
    def _shape_for_grid(self):
        if self.grid_shape is not None and self.topology != "grid":
            raise ValueError("grid_shape applies to topology: grid only")
        return self

    def check_scenario(self, scenario: Any) -> None:
        """A ring needs >= 3 workers, a grid >= 3x3 (InputError naming workers or the algorithm field);
        the best worker is chosen on a validation split, so ``workload.validation_split`` may not be 0."""
        make_layout(self.topology, scenario.worker_count, self.grid_shape)
        if scenario.workload.validation_split == 0:
            raise InputError("nnt chooses its best worker on the validation split; give a fraction in (0, 0.5) "
                             f"(or leave it out: {self.default_validation_split})", field="workload.validation_split")


def sgd_step(params: Any, grad: Any, lr: float) -> None:
    """``w ← w − η·g`` in place (nothing happens to a timing-only phantom)."""
    params.add_(grad, alpha=-lr)


def best_worker(accuracies: list[float | None]) -> int:
    """Index of the highest accuracy (lowest index on ties; unknown values lose; 0 if none is known)."""
    def key(i: int) -> float:
        a = accuracies[i]
        return -math.inf if a is None or not math.isfinite(a) else a
    return max(range(len(accuracies)), key=lambda i: (key(i), -i))


@dataclass
class _WorkerState:
    step: int = 0
    computed_s: list[float] = field(default_factory=list)  # when each own step's gradient was computed
    sends: list[Any] = field(default_factory=list)  # send requests since the last drain


@ALGORITHMS.register("nnt", "Nearest-Neighbours Training: each worker applies its own gradient and its ring/torus "
                            "neighbours' gradients; every epoch all restart from the best worker",
                     citation="docs/algorithms.md §7 (nearest-neighbour gradient exchange on a logical torus)",
                     config=NntConfig)
class Nnt(PeerAlgorithm):
    """Nearest-neighbour gradient exchange with periodic restarts from the best replica."""

    Config = NntConfig

    def __init__(self, config: NntConfig, ctx: AlgorithmContext):
        super().__init__(config, ctx)
        self.layout: Layout = make_layout(config.topology, ctx.n_workers, config.grid_shape)
        self.lr = ctx.workload.optimizer_config.lr
        per_param = config.update_time_per_param
        self.update_s = None if per_param is None else per_param * ctx.workload.param_count
        if ctx.workload.validation_size == 0:
            raise InputError("nnt chooses its best worker on the validation split, and the workload holds none out",
                             field="workload.validation_split")

    def _update_s(self, rank: int) -> float:
        """Time charged for applying one gradient on ``rank`` (see ``update_time_per_param``)."""
        if self.update_s is not None:
            return self.update_s
        return self.ctx.op_seconds(rank, "update", self.ctx.workload.param_count)

    def evaluation_replicas(self) -> dict[int, Any]:
        return dict(zip(self.ctx.workers, self.replicas))

    def _apply(self, replica: Any, grad: Any) -> None:
        if self.config.update_rule == "optimizer":
            replica.apply_gradient(grad)
        else:
            sgd_step(replica.params, grad, self.lr)

    # -- the protocol ------------------------------------------------------------------

    def _worker(self, rt: Runtime, index: int):
        ctx = self.ctx
        replica, data = self.replicas[index], self.data[index]
        neighbours = [ctx.workers[j] for j in self.layout.neighbours[index]]
        group = rt.group(ctx.workers, "world")
        state = _WorkerState()
        drained = True
        while True:
            batch = data.next_batch(ctx.batch_size)
            if batch is None:
                break
            result = yield rt.compute(replica, batch)
            yield rt.busy(self._update_s(rt.rank), "nnt update", run=lambda: self._apply(replica, result.grad))
            state.step += 1
            state.computed_s.append(result.end_s)
            rt.record("update", worker=rt.rank, step=state.step, version=state.step, staleness=None,
                      batch_size=batch.size, loss=result.loss, source="own", sender=rt.rank, sender_step=state.step,
                      sender_batch_size=batch.size, age_s=rt.now() - result.end_s)
            yield from self._apply_waiting(rt, replica, state)
            payload = yield rt.busy(self.ctx.op_seconds(rt.rank, "copy", self.ctx.workload.param_count),
                                    "pack gradient", run=lambda: {"grad": result.grad, "step": state.step,
                                                                  "batch_size": batch.size, "computed_s": result.end_s})
            state.sends.extend(rt.send(dst, payload, tag=TAG_GRADIENT) for dst in neighbours)
            drained = False
            if data.epoch != batch.epoch and (batch.epoch + 1) % self.config.sync_every_epochs == 0:
                yield from self._epoch_sync(rt, replica, group, state, batch.epoch + 1)
                drained = True
        if not drained:
            yield from self._drain(rt, replica, group, state)

    def _apply_waiting(self, rt: Runtime, replica: Any, state: _WorkerState):
        """Apply neighbour gradients as long as one is waiting (gradients arriving meanwhile count too)."""
        while True:
            message = rt.poll(tag=TAG_GRADIENT)
            if message is None:
                return
            sent = message.payload
            yield rt.busy(self._update_s(rt.rank), "nnt neighbour update",
                          run=lambda: self._apply(replica, sent["grad"]))
            lag = state.step - bisect_right(state.computed_s, sent["computed_s"])  # own steps computed after it
            rt.record("update", worker=rt.rank, step=state.step, version=state.step, staleness=lag, batch_size=0,
                      loss=None, source="neighbour", sender=message.src, sender_step=sent["step"],
                      sender_batch_size=sent["batch_size"], age_s=rt.now() - sent["computed_s"])

    def _drain(self, rt: Runtime, replica: Any, group: Any, state: _WorkerState):
        """Own sends delivered, then a barrier (everyone's are), then apply whatever is waiting."""
        for request in state.sends:
            yield request
        state.sends.clear()
        yield rt.barrier(group)
        yield from self._apply_waiting(rt, replica, state)

    def _evaluate(self, rt: Runtime, replica: Any):
        """The replica's validation accuracy (None for timing-only runs); costs a forward pass over the
        validation samples evaluated (at most ``evaluation.max_samples``)."""
        ctx = self.ctx
        samples = ctx.workload.validation_samples(ctx.eval_max_samples)
        run = None if ctx.timing_only else (
            lambda: ctx.workload.validation_metrics(replica.params, max_samples=ctx.eval_max_samples)[1])
        return (yield rt.inference(samples, run, "nnt evaluation"))

    def _epoch_sync(self, rt: Runtime, replica: Any, group: Any, state: _WorkerState, epoch: int):
        """Evaluate every replica on the validation split, share the accuracies, restart from the best."""
        yield from self._drain(rt, replica, group, state)
        accuracy = yield from self._evaluate(rt, replica)
        accuracies = yield rt.allgather(group, math.nan if accuracy is None else float(accuracy))
        best = best_worker(list(accuracies))
        best_rank = self.ctx.workers[best]
        params = yield rt.broadcast(group, replica.params, root=best_rank)
        replica.load(params)
        rt.record("nnt_sync", worker=rt.rank, epoch=epoch, validation_accuracy=accuracy, best_worker=best_rank,
                  best_accuracy=None if math.isnan(accuracies[best]) else accuracies[best])
