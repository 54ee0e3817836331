"""simdist: a discrete-event simulator of data-parallel neural-network training.

Real training math (PyTorch forward/backward, real optimizer updates, real staleness) in
simulated time (SimPy: compute from calibrated profiles, communication as flows on a
network model). See ``simdist run --help``, or from Python (docs/python-api.md)::

    import simdist
    result = simdist.run("scenarios/quickstart.yaml", set={"stop.epochs": 2})
    result.summary["final_test_accuracy"], result.steps, result.plot_accuracy()

The Python API (:func:`run`, :func:`load`, :func:`sweep`, :func:`compare`, :class:`Result`,
:class:`InputError`) is imported on first use, so ``import simdist`` and ``simdist --help``
load neither pandas nor torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

__all__ = ["run", "load", "sweep", "compare", "Result", "InputError", "__version__"]

_HOMES = {"run": "simdist.api", "load": "simdist.api", "sweep": "simdist.api", "compare": "simdist.api",
          "Result": "simdist.api_result", "InputError": "simdist.errors"}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
