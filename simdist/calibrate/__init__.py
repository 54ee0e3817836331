"""Calibration: turn real measurements into the profiles and platforms scenarios reference.

``simdist calibrate compute|network|trace|cpu-share`` (:mod:`simdist.calibrate.cli`):

* :mod:`~simdist.calibrate.compute_profile` — time real forward/backward/optimizer steps (CPU,
  or CUDA with events) and fit ``t = t0 + t1 * batch`` → ``calibration/profiles/*.yaml``;
* :mod:`~simdist.calibrate.network` (+ :mod:`~simdist.calibrate.mpi_worker` under ``mpiexec``)
  — ping-pong and allreduce sweeps → a platform overlay (``calibration/platforms/*.yaml``);
* :mod:`~simdist.calibrate.traces` — parsers of nccl-tests, OSU, PyTorch profiler and simdist
  files; :mod:`~simdist.calibrate.trace_fit` fits them (nccl-tests → overlay);
* :mod:`~simdist.calibrate.cpu_share` — k ranks on c cores vs processor sharing.

The fitters (:mod:`~simdist.fitting`, :mod:`~simdist.calibrate.collective_fit`)
follow the scikit-learn contract; every file written carries its provenance
(:mod:`~simdist.calibrate.provenance`). Submodules are not imported here, so running one
with ``python -m`` imports it only once.
"""

__all__: list[str] = []
