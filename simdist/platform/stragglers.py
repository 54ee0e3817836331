"""Straggler windows: a rank's compute slowed by a factor for a while, fixed, periodic or random.

A straggler entry of the scenario's ``compute.stragglers`` list names ranks, a slow-down
``factor`` and when the slow-down holds:

* fixed: one window ``[start, start + duration)``;
* periodic: the same window repeated ``every`` seconds;
* random: windows of ``duration`` arriving as a Poisson process with mean interval
  ``mean_interval``, drawn per rank from the seeded stream ``stragglers/<entry>/rank<r>``.

A forward/backward that *starts* inside a window takes ``factor`` times as long (the factor
of overlapping windows multiplies). Windows are generated lazily, so an endless periodic or
random pattern costs only what the run reaches.
"""

from __future__ import annotations

import bisect
import math
from typing import Annotated

from pydantic import BaseModel, Field, model_validator

from ..config import USER_CONFIG
from ..seeding import numpy_stream
from .spec import Interval, Seconds

__all__ = ["RandomWindows", "StragglerSpec", "StragglerSchedule"]


class RandomWindows(BaseModel):
    """Poisson arrivals of straggler windows."""

    model_config = USER_CONFIG
    mean_interval: Interval = Field(description="mean time between window starts, e.g. '30s'")


class StragglerSpec(BaseModel):
    """Ranks slowed by ``factor`` during some windows."""

    model_config = USER_CONFIG
    ranks: list[Annotated[int, Field(ge=0)]] = Field(min_length=1, description="ranks affected")
    factor: float = Field(ge=1e-3, le=1e3, description="compute time multiplier inside a window (2 = twice as slow), 0.001 .. 1000")
    duration: Interval = Field(description="length of each window, e.g. '2s'")
    start: Seconds = Field(0.0, description="start of the first window (fixed and periodic)")
    every: Interval | None = Field(None, description="period of repeated windows (periodic)")
    random: RandomWindows | None = Field(None, description="random windows instead of fixed/periodic ones")

    @model_validator(mode="after")
    def _consistent(self):
        if self.duration <= 0:
            raise ValueError("duration must be greater than zero")
        if self.every is not None and self.random is not None:
            raise ValueError("give every (periodic) or random, not both")
        if self.every is not None and self.every <= 0:
            raise ValueError("every must be greater than zero")
        if self.random is not None and self.random.mean_interval <= 0:
            raise ValueError("random.mean_interval must be greater than zero")
        return self


class _Windows:
    """Window start times of one (entry, rank), extended on demand."""

    def __init__(self, spec: StragglerSpec, seed: int, index: int, rank: int):
        self.spec = spec
        self.starts: list[float] = []
        self._rng = numpy_stream(seed, f"stragglers/{index}/rank{rank}") if spec.random else None
        self._next = spec.start if not spec.random else float(self._rng.exponential(spec.random.mean_interval))
        self._exhausted = False

    def _extend_to(self, t: float) -> None:
        spec = self.spec
        while not self._exhausted and self._next <= t:
            self.starts.append(self._next)
            if spec.random is not None:
                self._next += float(self._rng.exponential(spec.random.mean_interval))
            elif spec.every is not None:
                self._next += spec.every
            else:
                self._exhausted = True

    def active(self, t: float) -> int:
        """How many windows contain ``t``."""
        self._extend_to(t)
        lo = bisect.bisect_right(self.starts, t - self.spec.duration)
        hi = bisect.bisect_right(self.starts, t)
        return max(0, hi - lo)


class StragglerSchedule:
    """All straggler entries of a run; ``factor(rank, t)`` is the slow-down at time ``t``."""

    def __init__(self, specs: list[StragglerSpec], seed: int):
        self._by_rank: dict[int, list[_Windows]] = {}
        for index, spec in enumerate(specs):
            for rank in spec.ranks:
                self._by_rank.setdefault(rank, []).append(_Windows(spec, seed, index, rank))

    def factor(self, rank: int, t: float) -> float:
        out = 1.0
        for windows in self._by_rank.get(rank, ()):
            n = windows.active(t)
            if n:
                out *= math.pow(windows.spec.factor, n)
        return out
