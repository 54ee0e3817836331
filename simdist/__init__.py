"""simdist: a discrete-event simulator of data-parallel neural-network training.

Real training math (PyTorch forward/backward, real optimizer updates, real staleness) in
simulated time (SimPy: compute from calibrated profiles, communication as flows on a
network model). See ``simdist run --help``.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
