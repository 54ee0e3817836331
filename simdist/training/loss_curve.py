"""Scripted training-loss curves for timing-only runs.

Timing-only runs compute no loss, but some algorithms steer by it (DASO's plateau test
shortens or resets its global-sync interval). A loss curve supplies the value their control
flow needs: either an explicit list of per-epoch losses, or a named decay law.

* ``values: [7.0, 5.2, 4.1, ...]`` — the loss during epoch e is ``values[e]`` (the last value
  holds afterwards);
* ``law: exponential`` — ``end + (start − end) · exp(−e / scale)``;
* ``law: power`` — ``end + (start − end) · (1 + e / scale) ** −exponent``;
* ``law: step`` — ``start`` until epoch ``scale``, then ``end`` (a plateau then a drop);

where e is the (fractional) epoch of the batch.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from ..config import USER_CONFIG

__all__ = ["LossCurveConfig"]


class LossCurveConfig(BaseModel):
    """A per-epoch loss list or a named decay law (see the module docstring)."""

    model_config = USER_CONFIG

    values: list[float] | None = Field(None, min_length=1, description="loss per epoch, in order")
    law: Literal["exponential", "power", "step"] | None = Field(None, description="named decay law")
    start: float = Field(7.0, description="loss at epoch 0 (laws). Default 7.0 (ImageNet cross-entropy ~ ln 1000)")
    end: float = Field(1.0, description="loss the law tends to. Default 1.0")
    scale: float = Field(10.0, gt=0, description="epochs: decay time (exponential, power) or drop epoch (step). Default 10")
    exponent: float = Field(1.0, gt=0, description="power law exponent. Default 1.0")

    @model_validator(mode="after")
    def _one_source(self):
        if (self.values is None) == (self.law is None):
            raise ValueError("give either values (a per-epoch list) or law (exponential, power or step)")
        return self

    def loss(self, epoch: float) -> float:
        """The training loss at (fractional) epoch ``epoch``."""
        e = max(0.0, float(epoch))
        if self.values is not None:
            return float(self.values[min(int(e), len(self.values) - 1)])
        span = self.start - self.end
        if self.law == "exponential":
            return self.end + span * math.exp(-e / self.scale)
        if self.law == "power":
            return self.end + span * (1.0 + e / self.scale) ** (-self.exponent)
        return self.start if e < self.scale else self.end
