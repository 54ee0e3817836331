"""Assemble a run from a scenario: the one place both runtimes build what they run.

A run of a scenario, simulated or real, needs the same parts built the same way: the
platform (which rank is where), the workload (model, data, optimizer, validation split),
the op-cost model an algorithm prices its own work with, the epoch sharder and the
registered algorithm with its replicas. :func:`assemble_run` builds exactly these, and
both :class:`~simdist.simulate.Simulation` and the MPI worker (:mod:`simdist.real.worker`)
call it, so a real run executes the very algorithm object the simulator would have, with
the same initial weights and data order.

What only the simulator needs (the compute model, the flow network, data-loading and
epoch-end *costs*) is built from these parts by the simulator
(:func:`epoch_end_costs` prices the job's epoch-end work from them); what only a real
run needs (an MPI world, a driver) is built by the worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .algorithms import ALGORITHMS, AlgorithmContext
from .content_hash import run_inputs
from .errors import InputError
from .inputfile import file_exists
from .platform.compute import default_profile_paths, load_profile_ops
from .platform.op_costs import OpCostModel
from .platform.topology import Platform
from .resources import resolve_reference
from .scenario import Scenario
from .training.data import EpochSharder, ShardIterator
from .training.epoch_end import EpochEndCosts, EpochEndSchedule, optimizer_state_buffers, save_seconds
from .training.replica import PhantomReplica
from .training.workload import Workload, build_workload

__all__ = ["AssembledRun", "assemble_run", "profile_paths", "epoch_end_costs"]


def profile_paths(scenario: Scenario) -> list[Path]:
    """The compute-profile files the run reads: the shipped defaults, then the scenario's own.

    A scenario's profile is resolved beside the scenario file first, then as a shipped file;
    one found in neither place is an :class:`InputError` naming ``compute.profiles[i]``.
    """
    base = Path(scenario.source).parent if scenario.source else Path(".")
    extra = [resolve_reference(base, p) for p in scenario.compute.profiles]
    for i, path in enumerate(extra):
        if not file_exists(path):
            raise InputError(f"compute profile {str(path)!r} not found", source=scenario.source,
                             field=f"compute.profiles[{i}]")
    return default_profile_paths() + extra


@dataclass
class AssembledRun:
    """The parts of one run of a scenario, as both runtimes use them (see the module docstring)."""

    scenario: Scenario
    platform: Platform
    workers: list[int]  # the training ranks, 0 .. N-1
    workload: Workload
    inputs: dict[str, Any]  # every file the run reads, hashed before it was read (the manifest's ``inputs``)
    op_costs: OpCostModel  # what an algorithm's own work (copies, updates, casts) costs per rank
    sharder: EpochSharder
    algorithm: Any  # the registered algorithm, built with its replicas
    validation_samples: int  # samples of the job's epoch-end validation pass (0: none), checked

    @property
    def timing_only(self) -> bool:
        return self.scenario.workload.timing_only


def _workload(scenario: Scenario) -> Workload:
    """The scenario's workload; an input error names the scenario file."""
    config = scenario.workload
    try:
        workload = build_workload(config.model.name, config.model.options, config.dataset.name, config.dataset.options,
                                  config.optimizer, scenario.seed, allow_import=config.allow_code_import,
                                  validation_split=scenario.validation_split)
    except InputError as exc:
        raise exc.at(source=exc.source or scenario.source) from None
    if workload.dataset.shape_only and not config.timing_only:
        raise InputError(f"dataset {workload.dataset.name!r} holds no sample values; it needs "
                         "workload.timing_only: true (or --timing-only)", source=scenario.source,
                         field="workload.dataset")
    return workload


def _sharder(scenario: Scenario, workload: Workload, workers: list[int]) -> EpochSharder:
    try:
        return EpochSharder(len(workload.dataset.train_y), len(workers), scenario.seed,
                            shuffle=not scenario.workload.timing_only)  # timing-only: no sample is read
    except InputError as exc:
        raise exc.at(source=scenario.source, field_prefix="workload.dataset") from None


def _algorithm(scenario: Scenario, platform: Platform, workers: list[int], workload: Workload,
               op_costs: OpCostModel, sharder: EpochSharder) -> Any:
    """The scenario's registered algorithm with its context: data shards, replicas, op costs."""
    timing_only = scenario.workload.timing_only
    initial = None if timing_only else workload.initial_params()

    def make_replica():
        if timing_only:
            return PhantomReplica(workload.param_count, workload.optimizer)
        return workload.new_replica(initial.clone())

    ctx = AlgorithmContext(
        workers=workers, node_of=platform.node_of, workload=workload, batch_size=scenario.workload.batch_size,
        seed=scenario.seed, max_epochs=scenario.stop.epochs, timing_only=timing_only,
        make_data=lambda i: ShardIterator(sharder, i, scenario.stop.epochs), make_replica=make_replica,
        eval_max_samples=scenario.evaluation.max_samples, op_cost=op_costs.seconds, platform=platform)
    return ALGORITHMS.entry(scenario.algorithm_name).factory(scenario.algorithm_config(), ctx)


def assemble_run(scenario: Scenario) -> AssembledRun:
    """Build the platform, workload, op costs, sharder and algorithm of ``scenario`` (deterministic per seed).

    Bad input found while building (a missing profile, a dataset too small for the workers, a
    shape-only dataset without timing-only mode) is an :class:`InputError` naming the scenario file.
    """
    platform = Platform(scenario.platform)
    workers = list(range(scenario.worker_count))
    workload = _workload(scenario)
    inputs = run_inputs(scenario)  # hashed before they are read: a file edited meanwhile reads as changed
    op_costs = OpCostModel(platform, load_profile_ops(profile_paths(scenario)))
    validation_samples = _validation_samples(scenario, workload)
    sharder = _sharder(scenario, workload, workers)
    algorithm = _algorithm(scenario, platform, workers, workload, op_costs, sharder)
    return AssembledRun(scenario, platform, workers, workload, inputs, op_costs, sharder, algorithm,
                        validation_samples)


def _validation_samples(scenario: Scenario, workload: Workload) -> int:
    """How many samples the job's epoch-end validation pass reads (0: none), checked against what is held out."""
    validation = scenario.workload.validation
    if validation is None:
        return 0
    held_out = workload.held_out_size  # the validation split, else the test set
    samples = validation.samples or held_out
    if samples == 0:
        raise InputError("the dataset has no test samples to validate on; give the validation set's size",
                         source=scenario.source, field="workload.validation.samples")
    if samples > held_out and not workload.dataset.shape_only:  # a real run evaluates what it holds
        raise InputError(f"{samples} is more than the {held_out} held-out samples; give at most "
                         f"{held_out} (or leave it out: all of them)", source=scenario.source,
                         field="workload.validation.samples")
    return samples


def epoch_end_costs(run: AssembledRun, forward_s: Any, loading: Any) -> EpochEndCosts | None:
    """What the job does at epoch ends (``workload.validation``, ``workload.checkpoint``), priced for the simulator.

    ``forward_s``: the compute model's forward-pass seconds; ``loading``: the run's data-loading
    model (validation samples are loaded as training batches are). None when the scenario
    declares neither.
    """
    config, platform, op_costs = run.scenario.workload, run.platform, run.op_costs
    if config.validation is None and config.checkpoint is None:
        return None
    return EpochEndCosts(
        EpochEndSchedule(config.validation, config.checkpoint, run.workers), validation_samples=run.validation_samples,
        state_buffers=optimizer_state_buffers(config.optimizer.name, config.optimizer.momentum),
        params=run.workload.param_count, forward_s=forward_s,
        save_s=lambda rank, values: save_seconds(op_costs, platform, rank, values),
        loading=loading, storage_Bps=platform.spec.node_at(platform.node_of(run.workers[0])).storage_write_bandwidth)
