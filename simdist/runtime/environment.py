"""The simulation's SimPy environment, which also counts the events it has scheduled.

A run must notice when it has *stalled*: no rank process can ever move again, and only
background timers are left (a periodic evaluation, a fault window, the time limit), which would
otherwise keep advancing virtual time forever. SimPy keeps its event queue private; counting
what is scheduled, through :meth:`simpy.Environment.schedule` (the public hook every event,
timeout and process start goes through), tells a driver how many events are pending
(scheduled less processed) without reading it: when that equals the number of background
timers pending, the run has stalled (:meth:`simdist.simulate.Simulation._step_until`).
"""

from __future__ import annotations

from typing import Any

import simpy
from simpy.core import NORMAL

__all__ = ["CountingEnvironment"]


class CountingEnvironment(simpy.Environment):
    """A :class:`simpy.Environment` whose ``scheduled`` counts every event it has scheduled."""

    def __init__(self, initial_time: float = 0) -> None:
        super().__init__(initial_time)
        self.scheduled = 0

    def schedule(self, event: Any, priority: int = NORMAL, delay: float = 0) -> None:
        self.scheduled += 1
        super().schedule(event, priority, delay)
