"""``python -m simdist.real.worker SCENARIO --out DIR`` — one rank of a real run (under mpiexec).

Every rank reads the scenario itself and builds workload, data shards and algorithm with
:func:`~simdist.assembly.assemble_run`, as the simulator does (same seed, same initial weights,
same data order), then drives only its own rank's process with an :class:`~.runtime.MPIRuntime`.
At the end every rank sends its recorder rows to rank 0, which writes the result directory
(:func:`~simdist.results.write_result_dir`): the same files and schema as ``simdist run``,
with wall-clock seconds where the simulator has virtual ones.

Evaluation: the test set is evaluated before the clock starts and once at the end (an
evaluation in the middle of a real run would cost wall time the simulator does not charge).

Calibration (``--calibrate R``): before the clock starts and again after the run, every worker
rank times its forward/backward ``R`` times per batch size, all at once
(:func:`~.calibration.measure_compute`: the host's speed drifts, so the run is bracketed), and
before the clock the ranks time messages and allreduces through the runtime
(:func:`~.calibration.measure_network`); rank 0 writes both to ``calibration.json`` in the
result directory, where ``simdist validate`` fits the simulation's compute profile and link.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from typing import Sequence

import torch

__all__ = ["main", "run_rank"]


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m simdist.real.worker")
    parser.add_argument("scenario")
    parser.add_argument("--out", required=True)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--threads", type=int, default=None, help="torch threads per rank (default: scenario's)")
    parser.add_argument("--affinity", default=None,
                        help="CPU sets per rank, ';'-separated, each a ','-list of cores, e.g. '0;0;1'")
    parser.add_argument("--calibrate", type=int, default=0, metavar="R",
                        help="before the run, time each worker's forward/backward R times per batch size and the "
                             "runtime's messages and allreduces (0: off)")
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--no-plots", action="store_true")
    return parser.parse_args(argv)


def _pin(rank: int, spec: str | None) -> None:
    if not spec:
        return
    sets = [s for s in spec.split(";")]
    cores = {int(c) for c in sets[rank % len(sets)].split(",") if c.strip()}
    if cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores)


def run_rank(args: argparse.Namespace, comm) -> int:
    """Run this rank's share of the scenario; rank 0 writes ``args.out``. Returns an exit status."""
    from ..errors import InputError
    from ..recorder import Recorder
    from ..results import write_result_dir
    from ..run_result import RankInfo, RunResult
    from ..scenario import load_scenario
    from ..assembly import assemble_run
    from .driver import MPIDriver
    from .runtime import MPIRuntime, MPIWorld

    from ..calibrate.compute_profile import steady_allocator
    from .calibration import calibration_sizes, measure_compute, measure_network
    from .placement import rank_spins

    rank, size = comm.Get_rank(), comm.Get_size()
    _pin(rank, args.affinity)
    steady_allocator()  # the allocator setting compute profiles are measured with
    scenario = load_scenario(args.scenario, args.overrides)
    if scenario.workload.timing_only:
        raise InputError("real runs need tensors; timing_only is not supported", source=args.scenario,
                         field="workload.timing_only")
    setup = assemble_run(scenario)  # the workload, sharder and algorithm the simulator would run
    if setup.platform.size != size:
        raise InputError(f"the platform has {setup.platform.size} ranks but mpiexec started {size}",
                         source=args.scenario, field="platform")
    torch.set_num_threads(args.threads or scenario.compute.threads)
    workload, algorithm = setup.workload, setup.algorithm
    processes = algorithm.processes()

    def gradient(replica, tensors):  # the batch's tensors, fetched (and timed) by the runtime
        x, y = tensors
        return workload.evaluator.gradient(replica.params, x, y)

    recorder = Recorder()
    calibration = None
    comm.Barrier()  # the workers time their steps together: the cores are as busy as in the run
    if args.calibrate and rank in setup.workers:
        calibration = measure_compute(workload, calibration_sizes(scenario.workload.batch_size), args.calibrate,
                                      seed=scenario.seed)

    def evaluate(time_s: float, step: int) -> None:
        for holder, replica in sorted(algorithm.evaluation_replicas().items()):
            if holder == rank:
                loss, acc = workload.test_metrics(replica.params, max_samples=scenario.evaluation.max_samples)
                recorder.evaluation(time_s=time_s, step=step, worker=holder, test_loss=loss, test_accuracy=acc)

    evaluate(0.0, 0)
    wall_start = time.perf_counter()
    world = MPIWorld(comm, recorder, gradient=gradient, fetch=workload.batch_tensors, workers=setup.workers, stop_steps=scenario.stop.steps,
                     time_limit_s=scenario.stop.virtual_time, spin=rank_spins(rank, size, args.affinity),
                     epoch_end=_epoch_end_runner(scenario, workload, setup.workers))
    driver = MPIDriver(world)
    if args.calibrate:
        network = measure_network(world, driver, setup.workers, workload.param_count)
        calibration = {**(calibration or {}), "network": network}
        world.restart_clock()
    status = driver.drive(processes[rank](MPIRuntime(world, rank))) if rank in processes else "completed"
    end_s = world.now()
    if status == "completed":
        status = driver.linger()
    final_s = world.now() if status == "completed" else end_s
    evaluate(final_s, max((int(u["step"]) for u in recorder.updates), default=0))
    if args.calibrate:
        comm.Barrier()  # the workers time their steps together again: the run is bracketed
        if rank in setup.workers:
            after = measure_compute(workload, calibration_sizes(scenario.workload.batch_size), args.calibrate,
                                    seed=scenario.seed)
            calibration.update(cpu_after_s=after["cpu_s"], wall_after_s=after["wall_s"])
    gathered = world.ctl.gather((recorder, status, final_s, calibration), root=0)
    if rank == 0:
        merged = Recorder()
        statuses = [g[1] for g in gathered]
        for part, *_ in gathered:
            merged.spans += part.spans
            merged.updates += part.updates
            merged.evals += part.evals
            merged.events += part.events
        merged.updates.sort(key=lambda u: (u["time_s"], u["step"], u["worker"]))
        merged.spans.sort(key=lambda s: (s.start_s, s.rank))
        status = next((s for s in ("step_limit", "time_limit") if s in statuses), "completed")
        if status == "step_limit" and merged.updates:
            end = max(u["time_s"] for u in merged.updates)
        else:
            end = max(g[2] for g in gathered)
        max_step = max((int(u["step"]) for u in merged.updates), default=0)
        merged.evals = [dict(e, step=max_step, time_s=end) if e["time_s"] > 0 else e for e in merged.evals]
        merged.clip_spans(end)
        workers = set(setup.workers)
        ranks = [RankInfo(d.rank, d.node, d.kind, "worker" if d.rank in workers else "server")
                 for d in setup.platform.devices if d.rank in workers or d.rank in processes]
        result = RunResult(
            scenario=scenario.resolved(), platform=setup.platform.describe(), seed=scenario.seed,
            algorithm=scenario.algorithm_name, ranks=ranks, recorder=merged, links=[], virtual_time_s=end,
            wall_time_s=time.perf_counter() - wall_start, status=status,
            target_accuracy=scenario.stop.target_accuracy, epochs=None, timing_only=False,
            extra={"runtime": "mpi", "ranks": size, "param_count": workload.param_count,
                   "threads": torch.get_num_threads(), "affinity": args.affinity})
        out = write_result_dir(result, args.out, overwrite=args.overwrite, plots=not args.no_plots)
        _write_calibration(out, [g[3] for g in gathered if g[3] is not None], torch.get_num_threads())
    world.ctl.Barrier()
    return 0


def _epoch_end_runner(scenario, workload, workers):
    """The job's validation pass and checkpoint, done for real at epoch ends (None: the scenario has neither)."""
    from ..training.epoch_end import EpochEndRunner, EpochEndSchedule

    config = scenario.workload
    if config.validation is None and config.checkpoint is None:
        return None
    samples = config.validation.samples if config.validation is not None else None
    return EpochEndRunner(EpochEndSchedule(config.validation, config.checkpoint, workers), workload, samples)


def _write_calibration(out, parts: list, threads: int) -> None:
    """``calibration.json``: every worker's timed forward/backwards and the network figures (if asked)."""
    if parts:
        from pathlib import Path

        from ..outdir import write_text_atomically

        network = {kind: part["network"][kind] for part in parts for kind in ("p2p", "allreduce")
                   if part["network"].get(kind)}
        document = {"threads": threads, "compute_clock": "thread CPU time (time.thread_time), and wall time",
                    "workers": [{k: v for k, v in part.items() if k != "network"} for part in parts if "sizes" in part],
                    "network": network}
        write_text_atomically(Path(out) / "calibration.json", json.dumps(document) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    try:
        code = run_rank(args, comm)
    except Exception as exc:  # one rank failing must not leave the others blocked
        from ..errors import InputError

        if isinstance(exc, InputError):
            message = f"rank {comm.Get_rank()}: {exc}"
        else:
            message = f"rank {comm.Get_rank()}: {type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
        comm.Abort(2 if isinstance(exc, InputError) else 1)
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # abandoned non-blocking operations (a stopped run) must not hang MPI_Finalize


if __name__ == "__main__":
    sys.exit(main())
