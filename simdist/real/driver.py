"""MPIDriver: drives one rank's algorithm generator through a real run.

Each request the generator yields is waited on (:meth:`MPIDriver.wait`) and its value sent
back; blocking communication is recorded as ``wait`` (the awaited peer not there yet) and
``comm`` spans. Waiting is a test loop that also watches the control communicator, so that a
rank can be told to stop while blocked; a rank with a core to itself spins for a while before
it sleeps between tests, one sharing its cores sleeps at once and longer the longer it waits
(the figures behind these choices: :mod:`simdist.real.runtime`), but not while a message it
sent is still in flight: that one's receiver may wait on this rank's next call to move it.
"""

from __future__ import annotations

import time
from typing import Any, Generator

from ..errors import SimulationError
from .requests import RecvRequest, Request
from .runtime import CTL_DONE, CTL_STOP, MPIWorld

__all__ = ["MPIDriver", "Stopped", "SPIN_S", "SLEEP_S", "SLEEP_MAX_S"]

SPIN_S = 0.5e-3  # a rank with a core to itself spins this long before sleeping between tests
SLEEP_S = 50e-6  # first sleep between tests; a rank sharing its cores doubles it up to SLEEP_MAX_S
SLEEP_MAX_S = 1e-3
_CONTROL_EVERY = 16  # tests between looks at the control communicator


class Stopped(Exception):
    """The run was stopped (step limit, time limit, every worker done) while this rank waited."""


class MPIDriver:
    """Drives one rank's generator to its end or to the run's stop; returns the status."""

    def __init__(self, world: MPIWorld):
        self.world = world

    def _check_stop(self) -> None:
        world = self.world
        if world.step_limit_hit and world.stop_reason is None:
            world.stop_reason = "step_limit"
            world.notify_all(CTL_STOP, "step_limit")
        if world.time_limit_s is not None and world.now() >= world.time_limit_s and world.stop_reason is None:
            world.stop_reason = "time_limit"
        world.check_control()
        if world.stop_reason is not None:
            raise Stopped(world.stop_reason)
        if set(world.workers) <= world.done_workers:
            raise Stopped("completed")  # every worker is done: a server's loop ends here

    def wait(self, request: Request) -> Any:
        """The request's value once done; spins, then sleeps, between tests (see the module doc).

        Its CPU time, receiving and the collective's data phase included, counts as waiting —
        except receiving a message that was there already when asked for: the simulator has
        delivered it by then and charges nothing more, so that copy is the rank's host work.
        """
        world = self.world
        cpu, spin_until = time.thread_time(), (world.now() + SPIN_S if world.spin else 0.0)
        tests, sleep_s = 0, SLEEP_S
        try:
            while not request.test():
                tests += 1
                if tests % _CONTROL_EVERY == 0:
                    self._check_stop()
                if not world.spin or world.now() > spin_until:
                    time.sleep(sleep_s)
                    if world.sends_in_flight():  # the receiver may be waiting on this rank's next call
                        sleep_s = SLEEP_S
                    elif not world.spin:
                        sleep_s = min(2.0 * sleep_s, SLEEP_MAX_S)
        finally:
            if tests or not isinstance(request, RecvRequest):
                world.cpu.wait_s += time.thread_time() - cpu
        return request.value

    def drive(self, generator: Generator) -> str:
        world, rank = self.world, self.world.rank
        value: Any = None
        try:
            while True:
                self._check_stop()
                try:
                    request = generator.send(value)
                except StopIteration:
                    if world.epoch_end is not None:  # after the last epoch
                        world.epoch_end_work(world.epoch_end.schedule.at_finish(rank))
                    break
                if not isinstance(request, Request):
                    raise SimulationError(f"rank {rank} yielded {request!r}; algorithms may only yield runtime requests")
                waited_from = world.now()
                value = self.wait(request)
                if request.kind == "comm":
                    self._account(request, waited_from)
            if world.step_limit_hit:
                self._check_stop()
        except Stopped as stop:
            return str(stop)
        if rank in world.workers:
            world.done_workers.add(rank)
            world.notify_all(CTL_DONE, rank)
        return "completed"

    def _account(self, request: Request, waited_from: float) -> None:
        world = self.world
        now = world.now()
        if not request.blocking:
            world.span("comm", request.name, request.issued_s, now, blocking=False)
        started = request.started_s if request.started_s is not None else now
        moving_from = min(max(waited_from, started), now)
        world.span("wait", request.name, waited_from, moving_from)
        world.span("comm", request.name, moving_from, now, **request.span_args)

    def linger(self) -> str:
        """After this rank's own process: serve control until the run is over; the final status."""
        while True:
            try:
                self._check_stop()
            except Stopped as stop:
                return str(stop)
            time.sleep(SLEEP_S * 4)
