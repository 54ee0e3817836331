"""Real runs over MPI: the same algorithm generators on one OS process per rank.

* :mod:`~simdist.real.runtime` — :class:`MPIRuntime` and the driver loop (wall-clock trace);
* :mod:`~simdist.real.worker` — ``python -m simdist.real.worker``, one rank under mpiexec;
* :mod:`~simdist.real.launch` — spawns mpiexec with a timeout;
* :mod:`~simdist.real.pilot`, :mod:`~simdist.real.calibration`, :mod:`~simdist.real.describe` — what a
  real run tells the simulation of it (``simdist validate``, in :mod:`simdist.validation`, compares the two).

This package never imports the simulator: both build a run with :func:`simdist.assembly.assemble_run`.

Submodules import mpi4py only when a rank runs, so this package imports without it.
"""

__all__: list[str] = []
