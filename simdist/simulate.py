"""Run one scenario in the simulator and return its :class:`~simdist.run_result.RunResult`.

Builds the run's parts with :func:`~simdist.assembly.assemble_run` (platform, workload, op
costs, data shards, the registered algorithm: exactly what a real run builds), then what only
the simulator needs: the compute model and flow network in a SimWorld, the data-loading and
epoch-end costs, the lazily batched gradient evaluator, and one process per rank. Then it
runs virtual time until the first stop criterion (epochs done, step or time limit, target
accuracy), evaluating the test set at the configured interval, and collects everything into
a RunResult.

Gradient requests are evaluated lazily: compute calls submit (weights, batch) and the first
result needed evaluates every pending request in one batched call, so workers that start
computing at the same instant on identical weights cost one vectorised forward/backward.
"""

from __future__ import annotations

import gc
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable

import simpy
import torch

from .assembly import assemble_run, epoch_end_costs, profile_paths
from .errors import InputError
from .faults import FaultInjector
from .platform.compute import ComputeModel, load_profiles
from .platform.cost_spec import calls_basis
from .platform.link_usage import LinkUsage, link_series
from .platform.stragglers import StragglerSchedule
from .recorder import Recorder
from .run_result import LinkStats, RankInfo, RunResult
from .runtime.collectives import default_schedule
from .runtime.sim import SimWorld
from .scenario import Scenario
from .training.data_loading import build_data_loading
from .training.loss_curve import LossCurveConfig
from .training.replica import PhantomTensor
from .training.workload import Workload

__all__ = ["simulate", "Simulation", "DEFAULT_EVAL_EVERY_STEPS", "Progress"]

DEFAULT_EVAL_EVERY_STEPS = 50

Progress = Callable[[float, str], None]  # (fraction done 0..1, short status text)


def _gradient_source(workload: Workload, timing_only: bool, loss_curve: LossCurveConfig | None):
    if timing_only:
        numel = workload.param_count

        def phantom(rank: int, replica: Any, batch: Any):
            loss = None if loss_curve is None else loss_curve.loss(batch.epoch)
            return lambda: (PhantomTensor(numel), loss)

        phantom.uniform = True  # equal for every rank given a batch of the same epoch and size
        return phantom

    def real(rank: int, replica: Any, batch: Any):  # tensors gathered with the other queued batches
        return workload.pending.submit_batch(replica.params, batch).result

    def many(ranks: list[int], replicas: list[Any], batches: list[Any]):  # a lockstep group's batches, gathered at once
        return [workload.pending.submit(replica.params, x, y).result
                for replica, (x, y) in zip(replicas, workload.many_batch_tensors(batches))]

    real.many = many
    return real


@dataclass
class _StopState:
    reason: str | None = None
    max_step: int = 0


class Simulation:
    """One simulation of a scenario: built from it, executed once; its parts stay inspectable.

    ``simulate(scenario)`` is ``Simulation(scenario).execute()``; tests that need the final
    replicas read them from ``.algorithm`` afterwards.
    """

    def __init__(self, scenario: Scenario, progress: Progress | None = None, *, lockstep: bool = True):
        self.scenario = scenario
        self.lockstep = lockstep  # let the algorithm run its workers as one lockstep group where results are equal
        self.execution: dict[str, str] = {}  # how the workers were run, and why (the manifest's ``execution``)
        self.progress = progress
        self.timing_only = scenario.workload.timing_only
        run = assemble_run(scenario)  # platform, workload, op costs, sharder, algorithm: as a real run builds them
        self.platform, self.workers, self.workload, self.inputs = run.platform, run.workers, run.workload, run.inputs
        self.op_costs, self.sharder, self.algorithm = run.op_costs, run.sharder, run.algorithm
        params = self.workload.param_count
        self.compute = ComputeModel(
            self.platform, load_profiles(profile_paths(scenario)), model=self.workload.model_name,
            forward_flops_per_sample=self.workload.forward_flops_per_sample,
            parameter_layers=sum(1 for layer in self.workload.layers if layer.forward_flops_per_sample > 0),
            seed=scenario.seed, noise_sigma=scenario.compute.noise_sigma, noise=scenario.compute.noise,
            efficiency=scenario.compute.efficiency, kernel_overhead_s=scenario.compute.kernel_overhead_s,
            stragglers=StragglerSchedule(scenario.compute.stragglers, scenario.seed) if scenario.compute.stragglers else None,
            optimizer_step_s=lambda device: self.op_costs.core_seconds(device, "update", params))
        self.recorder = Recorder()
        schedule, self.schedule_basis = default_schedule(scenario.network.collective, self.platform.spec.collectives)
        self.world = SimWorld(self.platform, self.compute, self.recorder,
                              gradient_source=_gradient_source(self.workload, self.timing_only,
                                                               scenario.workload.loss_curve),
                              fidelity=scenario.network.collective_fidelity,
                              default_collective=schedule,
                              network_model=scenario.network.model)
        if scenario.outputs.link_usage:
            self.world.network.usage = LinkUsage(len(self.platform.links), max_bins=scenario.outputs.link_usage_bins)
        try:  # what getting a batch costs before each forward/backward (the ledger's data part)
            self.world.data_loading = build_data_loading(scenario.workload.data_loading, self.workload.dataset,
                                                         self.platform, self.op_costs.measured)
        except InputError as exc:
            raise exc.at(source=exc.source or scenario.source) from None
        # the job's validation pass and checkpoint (ledger eval, checkpoint)
        self.world.epoch_end = epoch_end_costs(run, self.compute.forward_s, self.world.data_loading)
        self.stop = _StopState()
        self.stop_event = self.world.env.event()
        self.best_accuracy: float | None = None
        self._eval_pending = False
        self._last_progress_wall = 0.0
        self._executed = False
        self.process_ranks: list[int] = []
        self.events_processed = 0
        self._background: set[simpy.Event] = set()  # timers that must not keep a stalled run alive

    # -- evaluation and stopping ---------------------------------------------------------

    def evaluate(self) -> None:
        if self.timing_only:
            return
        for rank, replica in sorted(self.algorithm.evaluation_replicas().items()):
            loss, accuracy = self.workload.test_metrics(replica.params, max_samples=self.scenario.evaluation.max_samples)
            self.recorder.evaluation(time_s=self.world.env.now, step=self.stop.max_step, worker=rank,
                                     test_loss=loss, test_accuracy=accuracy)
            self.best_accuracy = accuracy if self.best_accuracy is None else max(self.best_accuracy, accuracy)
        target = self.scenario.stop.target_accuracy
        if (target is not None and self.scenario.stop.stop_at_target and self.best_accuracy is not None
                and self.best_accuracy >= target):
            self.request_stop("target_reached")

    def _deferred_evaluate(self):
        yield self.world.env.timeout(0)  # after every process due at this instant has applied its update
        self._eval_pending = False
        self.evaluate()

    def request_stop(self, reason: str) -> None:
        if self.stop.reason is None:
            self.stop.reason = reason
            self.stop_event.succeed()

    def on_update(self, row: dict[str, Any]) -> None:
        loss = row.get("loss")
        if loss is not None and not math.isfinite(loss):  # the weights are no longer numbers
            self.request_stop("diverged")
        step = int(row["step"])
        if step > self.stop.max_step:
            self.stop.max_step = step
            every = self.scenario.evaluation.every_steps
            if self.scenario.evaluation.every_time is None:
                every = every or DEFAULT_EVAL_EVERY_STEPS
                if step % every == 0 and not self._eval_pending:
                    self._eval_pending = True
                    self.world.env.process(self._deferred_evaluate())
            limit = self.scenario.stop.steps
            if limit is not None and step >= limit:
                self.request_stop("step_limit")
        if self.progress is not None:
            self._report_progress()

    def _timed_evaluations(self, every_s: float):
        while True:
            yield self.background(self.world.env.timeout(every_s))
            self.evaluate()

    def background(self, event: simpy.Event) -> simpy.Event:
        """Mark a timer as background: a queue holding only such timers means the run has stalled."""
        self._background.add(event)
        event.callbacks.append(self._background.discard)
        return event

    def _report_progress(self) -> None:
        if self.progress is None:
            return
        wall = time.perf_counter()
        if wall - self._last_progress_wall < 0.1:
            return
        self._last_progress_wall = wall
        stop, fractions = self.scenario.stop, [0.0]
        if stop.steps:
            fractions.append(self.stop.max_step / stop.steps)
        if stop.virtual_time:
            fractions.append(self.world.env.now / stop.virtual_time)
        if stop.epochs and self.algorithm.epochs_completed() is not None:
            fractions.append(self.algorithm.epochs_completed() / stop.epochs)
        self.progress(min(max(fractions), 1.0), f"step {self.stop.max_step}, t={self.world.env.now:.3g}s")

    # -- the run -------------------------------------------------------------------------

    def _run_until_stop(self) -> str:
        env = self.world.env
        self.world.update_listeners.append(self.on_update)
        processes = self._spawn_processes()
        self.process_ranks = sorted(processes)
        injector = FaultInjector(self.scenario.faults, self.world, self.background)
        crashes = injector.crash_events()
        injector.schedule_degradations()
        # a worker is done when its process ends or its node crashes (a crashed rank never ends)
        worker_done = [simpy.AnyOf(env, [processes[r], crashes[r]]) if r in crashes else processes[r]
                       for r in self.workers if r in processes]
        worker_done = list({id(done): done for done in worker_done}.values())  # a lockstep group is one process
        waits = [simpy.AllOf(env, worker_done), self.stop_event]
        if self.scenario.stop.virtual_time is not None:
            waits.append(self.background(env.timeout(self.scenario.stop.virtual_time)))
        if self.scenario.evaluation.every_time is not None and not self.timing_only:
            env.process(self._timed_evaluations(self.scenario.evaluation.every_time))
        self.evaluate()
        guard = self._step_until(simpy.AnyOf(env, waits))
        if self.stop.reason is not None:
            return self.stop.reason
        if guard is not None:
            return guard
        if all(p.triggered for p in worker_done):
            return "completed"
        return "time_limit"

    @property
    def in_lockstep(self) -> bool:
        """Whether the workers moved as one lockstep group (``execution``)."""
        return self.execution.get("mode") == "lockstep"

    def _spawn_processes(self) -> dict[int, simpy.Process]:
        """Each rank's process (rank -> process); workers of a lockstep group share one."""
        self.world.crash_possible = bool(self.scenario.faults.node_crash)
        obstacle = "forced: one process per rank (--per-rank)" if not self.lockstep else self.world.lockstep_obstacle()
        fixed_links = not self.scenario.faults.link_degradation
        if obstacle is None and getattr(self.algorithm, "lockstep_lanes_join", False) and not fixed_links:
            obstacle = ("links change capacity (faults.link_degradation): collectives joining lockstep lanes are "
                        "priced alone on fixed links")
        form = self.algorithm.lockstep_form() if obstacle is None else None
        self.execution = _execution(self.algorithm, form, obstacle)
        if form is not None:
            processes = self.world.spawn_lanes([(lane.ranks, lane.process) for lane in form.lanes], apart=form.apart)
            # the lanes' collectives are then the only traffic, each alone on its links: each phase's outcome
            # is fixed, and replayed from its first run (a stop inside one counts what its flows had moved)
            self.world.network_exclusive = fixed_links
            return processes
        return {rank: self.world.spawn(rank, make(self.world.runtime(rank)))
                for rank, make in self.algorithm.processes().items()}

    def _step_until(self, until: simpy.Event) -> str | None:
        """Process events until ``until`` has been processed (as ``env.run(until=...)`` does).

        Returns ``None`` then, or the guard that ended the run first: ``stalled`` when only
        background timers (evaluation, fault, time-limit timers) are left — no process can
        ever move again —, ``event_limit`` after ``stop.max_events`` events, ``wall_time_limit``
        after ``stop.max_wall_time`` seconds of real time.
        """
        env, stop = self.world.env, self.scenario.stop
        background = self._background  # pending background timers (each leaves the set when processed)
        wall_deadline = None if stop.max_wall_time is None else time.perf_counter() + stop.max_wall_time
        step, events, max_events = env.step, self.events_processed, stop.max_events  # locals: this loop is hot
        try:
            while not until.processed:
                if env.scheduled - events <= len(background):  # every pending event is a background timer
                    return "stalled"
                step()
                events += 1
                if events >= max_events and not until.processed:
                    return "event_limit"
                if wall_deadline is not None and not events & 1023 and time.perf_counter() > wall_deadline:
                    return "wall_time_limit"
            return None
        finally:
            self.events_processed = events

    def execute(self) -> RunResult:
        """Run to the first stop criterion and collect the result (once)."""
        if self._executed:
            raise RuntimeError("a Simulation runs once; build a new one to run again")
        self._executed = True
        wall_start = time.perf_counter()
        previous_threads = torch.get_num_threads()
        torch.set_num_threads(self.scenario.compute.threads)
        try:
            with fewer_collections():
                status = self._run_until_stop()
            evals = self.recorder.evals
            if status != "target_reached" or not evals or evals[-1]["time_s"] != self.world.env.now:
                self.evaluate()
        finally:
            torch.set_num_threads(previous_threads)
        return self._result(status, time.perf_counter() - wall_start)

    def _result(self, status: str, wall_time_s: float) -> RunResult:
        now, net, scenario = self.world.env.now, self.world.network, self.scenario
        self.recorder.clip_spans(now)  # work in flight when the run stopped counts up to the stop only
        self.recorder.clip_records(now)
        self.world.settle_alone_at_stop(now)
        net.finalize(now)
        links = [LinkStats(link.name, link.kind, net.link_bytes[link.index], net.link_busy_s[link.index])
                 for link in self.platform.links if net.link_bytes[link.index] > 0 or net.link_busy_s[link.index] > 0]
        link_usage = None if net.usage is None else link_series(net.usage.series(now), self.platform.links)
        workers = set(self.workers)
        ranks = [RankInfo(d.rank, d.node, d.kind, "worker" if d.rank in workers else "server")
                 for d in self.platform.devices if d.rank in workers or d.rank in self.process_ranks]
        return RunResult(
            scenario=scenario.resolved(), platform=self.platform.describe(), seed=scenario.seed,
            algorithm=scenario.algorithm_name, ranks=ranks, recorder=self.recorder, links=links, link_usage=link_usage,
            virtual_time_s=now, wall_time_s=wall_time_s, status=status,
            target_accuracy=scenario.stop.target_accuracy, epochs=self.algorithm.epochs_completed(),
            timing_only=self.timing_only,
            extra={"inputs": self.inputs,
                   "compute_profiles": self.compute.describe(), "param_count": self.workload.param_count,
                   "sent_bytes": sum(net.sent_bytes.values()), "received_bytes": sum(net.received_bytes.values()),
                   "events": self.events_processed, "faults": self._fault_figures(),
                   "collective_pricing": self.world.pricer.provenance(), "op_costs": self.op_costs.describe(),
                   "collective_reduction": self.world.reduction_basis(), "collective_schedule": self.schedule_basis,
                   "message_copies": self.platform.copies.basis(),
                   "runtime_calls": calls_basis(self.platform.spec.calls),
                   "execution": self.execution,
                   "data_loading": self.world.data_loading.describe(),
                   "validation_split": {"fraction": scenario.validation_split,
                                        "samples": self.workload.validation_size,
                                        "training_samples": self.workload.dataset.train_size},
                   "epoch_end": self.world.epoch_end.describe() if self.world.epoch_end is not None else None})

    def _fault_figures(self) -> dict[str, Any]:
        """Crashed ranks and what was lost with them (all zero without faults)."""
        dropped = self.world.dropped
        return {"crashed_ranks": sorted(self.world.crashed),
                "dropped_messages": sum(dropped["messages"].values()),
                "dropped_bytes": sum(dropped["bytes"].values()),
                "dropped_gradients": sum(dropped["gradients"].values())}


def simulate(scenario: Scenario, *, progress: Progress | None = None, per_rank: bool = False) -> RunResult:
    """Simulate ``scenario``; deterministic for a given scenario and seed. ``per_rank``: one
    process per rank even where the workers could move as one lockstep group (same results,
    slower: for debugging the group; the manifest's ``execution`` says which ran)."""
    return Simulation(scenario, progress, lockstep=not per_rank).execute()


def _execution(algorithm: Any, form: Any, obstacle: str | None) -> dict[str, str]:
    """How the workers run (``lockstep``: one generator for all, :mod:`simdist.runtime.group`;
    ``per_rank``: one process each) and why."""
    if form is not None and len(form.lanes) > 1:
        return {"mode": "lockstep", "why": f"the workers run as {len(form.lanes)} lockstep lanes, one per role: "
                                          "one process moves each lane's workers"}
    if form is not None:
        return {"mode": "lockstep", "why": "every worker runs the same step: one process moves them all"}
    if obstacle is not None:
        return {"mode": "per_rank", "why": obstacle}
    if getattr(algorithm, "lockstep", None) is None:
        name = getattr(getattr(algorithm, "config", None), "name", type(algorithm).__name__)
        return {"mode": "per_rank", "why": f"algorithm {name!r} has no lockstep form"}
    if algorithm.lockstep == "timing_only" and not algorithm.ctx.timing_only:
        name = algorithm.config.name
        return {"mode": "per_rank", "why": f"algorithm {name!r} runs in lockstep only without tensor math "
                                           "(its workers' replicas differ in replay)"}
    return {"mode": "per_rank", "why": "the workers' own work differs by rank, so they leave a step apart"}


RUN_GC_THRESHOLDS = (20_000, 20, 100)  # collector thresholds while a simulation runs (at least)


@contextmanager
def fewer_collections():
    """Raise the garbage collector's thresholds while a simulation runs, then restore them.

    From a few hundred ranks on, events and messages that live for an iteration outlive two
    young collections and reach the oldest generation, whose collections walk the whole heap
    (torch, pydantic and the run: about 400,000 objects) each time: 37-45 % of a 1,024-GPU DASO
    run's host time went there. Larger thresholds collect the same garbage less often; nothing
    simulated depends on when (DASO at 1,024 GPUs: 180 -> 115 ms per iteration; sync one
    process per rank: 105 -> 59 ms).
    """
    previous = gc.get_threshold()
    gc.set_threshold(*(max(a, b) for a, b in zip(previous, RUN_GC_THRESHOLDS)))
    try:
        yield
    finally:
        gc.set_threshold(*previous)
