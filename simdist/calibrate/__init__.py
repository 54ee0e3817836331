"""Calibration: turn real measurements into the profiles and platforms scenarios reference.

:mod:`simdist.calibrate.compute_profile` times the zoo's models with real kernels on this
machine and fits ``t = t0 + t1 * batch`` (run it with ``python -m``). Submodules are not
imported here, so running one with ``python -m`` imports it only once.
"""

__all__: list[str] = []
