"""Real runs over MPI: the same algorithm generators on one OS process per rank.

* :mod:`~simdist.real.runtime` — :class:`MPIRuntime` and the driver loop (wall-clock trace);
* :mod:`~simdist.real.worker` — ``python -m simdist.real.worker``, one rank under mpiexec;
* :mod:`~simdist.real.launch` — spawns mpiexec with a timeout;
* :mod:`~simdist.real.validate` — real run vs simulation: ``validation.csv`` and a summary;
* :mod:`~simdist.real.cli` — ``simdist validate``.

Submodules import mpi4py only when a rank runs, so this package imports without it.
"""

__all__: list[str] = []
