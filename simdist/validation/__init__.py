"""``simdist validate``: a real MPI run of a scenario against its simulation.

It sits above both runtimes: it launches the real run (:mod:`simdist.real`), simulates the
same scenario (:mod:`simdist.simulate`) and compares the two result directories.

* :mod:`~simdist.validation.run` — :func:`validate`: pilot, real run, calibrated simulation, summary;
* :mod:`~simdist.validation.tables` — iteration tables, errors, repeatability, timeline overlay;
* :mod:`~simdist.validation.cli` — the ``simdist validate`` command line.
"""

from .run import CALIBRATION_REPEATS, CALIBRATIONS, DEFAULT_OVERLAY, validate
from .tables import compare, iteration_table, plot_timelines, repeatability, summarize

__all__ = ["validate", "compare", "iteration_table", "plot_timelines", "repeatability", "summarize",
           "DEFAULT_OVERLAY", "CALIBRATION_REPEATS", "CALIBRATIONS"]
