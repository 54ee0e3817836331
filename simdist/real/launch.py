"""Spawn a real run: ``mpiexec -n N python -m simdist.real.worker ...`` with a timeout.

Missing ``mpiexec`` or ``mpi4py`` is an :class:`~simdist.errors.InputError` (one line), as is a
run that fails or outlives its timeout; the last lines the ranks wrote are part of the message.

MPICH's progress throttle is switched on (:data:`MPICH_ENV`): a rank blocked in an MPI wait
that has made no progress for a while (a peer descheduled: more ranks than cores, or other
processes on the host) then sleeps briefly instead of spinning, leaving the core to the rank
it waits for.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from ..errors import InputError

__all__ = ["mpi_available", "run_real", "MPICH_ENV"]

# MPICH (ch4): after this many progress polls without progress, usleep(1) before the next poll;
# a poll takes well under a microsecond, so a live exchange never reaches the count
MPICH_ENV = {"MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1", "MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT": "1024"}


def mpi_available() -> str | None:
    """None when real runs can start here, else why not."""
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed (pip install mpi4py mpich)"
    if shutil.which("mpiexec") is None:
        return "mpiexec is not on PATH (pip install mpich, or install an MPI)"
    return None


def run_real(scenario: str | Path, ranks: int, out: str | Path, *, overrides: Sequence[str] = (),
             threads: int | None = None, affinity: str | None = None, timeout_s: float = 600.0,
             plots: bool = True, calibrate: int = 0) -> Path:
    """Run ``scenario`` for real on ``ranks`` MPI processes; the result directory is ``out``.

    ``affinity``: cores per rank (see :mod:`.placement`; None or '' = not pinned);
    ``calibrate``: timed forward/backwards per batch size before the run, plus the runtime's
    message and allreduce timings (0 = none; :mod:`.calibration`).
    """

    why = mpi_available()
    if why:
        raise InputError(why, source="simdist validate")
    command = ["mpiexec", "-n", str(ranks), sys.executable, "-m", "simdist.real.worker", str(scenario),
               "--out", str(out), "--overwrite"]
    for item in overrides:
        command += ["--set", item]
    if threads:
        command += ["--threads", str(threads)]
    if affinity:
        command += ["--affinity", affinity]
    if not plots:
        command.append("--no-plots")
    if calibrate:
        command += ["--calibrate", str(calibrate)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads or 1), **MPICH_ENV)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        raise InputError(f"the real run did not finish within {timeout_s:g} s", source=str(scenario)) from None
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-6:])
        raise InputError(f"the real run failed (exit {done.returncode}): {tail}", source=str(scenario))
    return Path(out)
