"""Where sweep points run: a local process pool (default) or a Dask distributed cluster.

A backend takes :class:`PointTask` objects and yields :class:`PointOutcome` objects as the
points finish, in any order. Each task is run by :func:`run_point`, a top-level function
(picklable, ``spawn``-safe) that simulates one scenario and writes its result directory
atomically; a failing point comes back as an outcome with its one-line error, so the other
points carry on. Results do not depend on the backend: every point is a deterministic
function of its scenario (``compute.threads`` pins torch's thread count inside the run).

``local``
    :class:`concurrent.futures.ProcessPoolExecutor` with the ``spawn`` start method and
    ``jobs`` processes; ``jobs=1`` runs the points one after another in this process.
``dask``
    ``distributed.Client``: a ``LocalCluster`` of ``jobs`` single-threaded worker processes
    when no scheduler address is given, else the running scheduler at ``scheduler``. The
    result folder must be on a filesystem that every worker sees. For SLURM (or PBS), start
    the cluster with dask-jobqueue and pass its scheduler address::

        from dask_jobqueue import SLURMCluster
        cluster = SLURMCluster(cores=1, processes=1, memory="4GB", walltime="01:00:00",
                               job_extra_directives=["--cpus-per-task=1"])
        cluster.scale(jobs=32)            # 32 single-core workers, one SLURM job each
        print(cluster.scheduler_address)  # -> simdist sweep S.yaml --backend dask --scheduler ADDR

Dask is optional: ``pip install "simdist[dask]"``.
"""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from .errors import InputError

__all__ = ["PointTask", "PointOutcome", "run_point", "run_tasks", "BACKENDS"]

BACKENDS = ("local", "dask")


@dataclass(frozen=True)
class PointTask:
    """One point to run: its key (content hash), the validated scenario and where to write it."""

    key: str
    scenario: Any  # simdist.scenario.Scenario (picklable)
    out_dir: str
    plots: bool = True


@dataclass(frozen=True)
class PointOutcome:
    """How a point ended: ``error`` is None on success, else one line (type: message)."""

    key: str
    error: str | None
    wall_time_s: float


def run_point(task: PointTask) -> PointOutcome:
    """Simulate ``task.scenario`` and write its result directory; never raises for a failing point."""
    start = time.perf_counter()
    try:
        from .results import write_result_dir
        from .simulate import simulate

        result = simulate(task.scenario)
        write_result_dir(result, task.out_dir, overwrite=True, plots=task.plots)
    except Exception as exc:  # one bad point must not sink the sweep
        line = " ".join(str(exc).split()) or traceback.format_exception_only(type(exc), exc)[-1].strip()
        return PointOutcome(task.key, f"{type(exc).__name__}: {line}", time.perf_counter() - start)
    return PointOutcome(task.key, None, time.perf_counter() - start)


def run_tasks(tasks: Iterable[PointTask], *, backend: str = "local", jobs: int | None = None,
              scheduler: str | None = None) -> Iterator[PointOutcome]:
    """Run ``tasks`` on ``backend``, yielding outcomes as points finish."""
    tasks = list(tasks)
    if backend not in BACKENDS:
        raise InputError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}", source="--backend")
    if jobs is not None and jobs < 1:
        raise InputError("must be at least 1", source="--jobs")
    if not tasks:
        return iter(())
    if backend == "dask":
        return _run_dask(tasks, jobs, scheduler)
    if scheduler:
        raise InputError("--scheduler needs --backend dask", source="--scheduler")
    return _run_local(tasks, jobs)


def _default_jobs(n_tasks: int) -> int:
    return max(1, min(n_tasks, os.cpu_count() or 1))


def _run_local(tasks: list[PointTask], jobs: int | None) -> Iterator[PointOutcome]:
    jobs = jobs or _default_jobs(len(tasks))
    if jobs == 1:
        for task in tasks:
            yield run_point(task)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    pool = ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=multiprocessing.get_context("spawn"))
    try:
        futures = [pool.submit(run_point, task) for task in tasks]
        for future in as_completed(futures):
            yield future.result()
    finally:  # on interruption: drop the points not started; finished ones are already on disk
        pool.shutdown(wait=True, cancel_futures=True)


def _run_dask(tasks: list[PointTask], jobs: int | None, scheduler: str | None) -> Iterator[PointOutcome]:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise InputError("the dask backend needs dask.distributed; install it with pip install 'simdist[dask]'",
                         source="--backend") from None
    cluster = None
    if scheduler:
        client = Client(scheduler)
    else:
        cluster = LocalCluster(n_workers=jobs or _default_jobs(len(tasks)), threads_per_worker=1, processes=True,
                               dashboard_address=None)
        client = Client(cluster)
    try:
        futures = [client.submit(run_point, task, key=f"simdist-point-{task.key}-{os.urandom(4).hex()}") for task in tasks]
        for future in as_completed(futures):
            yield future.result()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def resolve_out(path: str | os.PathLike[str]) -> str:
    """An absolute path string (workers may run in another directory)."""
    return str(Path(path).resolve())
