"""What a simulated rank waits on: a SimPy event, and what the time spent waiting was.

:class:`~simdist.runtime.sim.SimWorld` hands these out for every runtime call; its driver
yields their events to SimPy and reads back values (a gradient, a message, a sum).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import simpy

from .base import GradResult

__all__ = ["Request", "SendRequest", "ReadyReceive", "ComputeRequest"]


@dataclass(eq=False)
class Request:
    """Something an algorithm waits on: a SimPy event plus what the time spent waiting was."""

    kind: str  # "compute", "comm", "busy" or "progress"
    name: str
    event: simpy.Event
    started_s: float | None = None  # when data started moving (comm); None while peers are missing
    # True when waiting on it would return at once, with ``ready_value``, and no event is
    # needed for that (:class:`SendRequest`, :class:`ReadyReceive` decide it as they go)
    finished: ClassVar[bool] = False
    ready_value: ClassVar[Any] = None
    # what its comm span records besides the times, as the MPI runtime does (bytes, src/dst or
    # group_size); a request that has some gets its own dict, this shared empty one is never written
    span_args: ClassVar[dict[str, Any]] = {}


class SendRequest(Request):
    """A send; its completion event is made only when someone waits on it.

    Most sends are never waited on (a parameter server's replies, a worker's pushes), and an
    event succeeded for nobody still costs a turn of the event loop.
    """

    def __init__(self, env: simpy.Environment, sent_s: float):  # the event is a property here, not a field
        self.kind, self.name, self.started_s = "comm", "send", sent_s
        self._env, self._event, self._delivered = env, None, False

    @property
    def event(self) -> simpy.Event:
        if self._event is None:
            self._event = self._env.event()
            if self._delivered:
                self._event.succeed()
        return self._event

    @property
    def finished(self) -> bool:
        """Delivered before anyone asked for its event: waiting on it needs no event at all."""
        return self._delivered and self._event is None

    def delivered(self) -> None:
        self._delivered = True
        if self._event is not None:
            self._event.succeed()


class ReadyReceive(Request):
    """A receive whose message had already arrived: waiting on it returns the message at once.

    The event is made only if someone asks for it (a server that finds its next message
    queued, the common case when it is the bottleneck, costs no turn of the event loop).
    """

    def __init__(self, env: simpy.Environment, message: Any):  # the event is a property here, not a field
        self.kind, self.name, self.started_s = "comm", "recv", message.sent_s
        self._env, self._event, self._message = env, None, message

    @property
    def event(self) -> simpy.Event:
        if self._event is None:
            self._event = self._env.event()
            self._event.succeed(self._message)
        return self._event

    @property
    def finished(self) -> bool:
        return self._event is None

    @property
    def ready_value(self) -> Any:
        return self._message


@dataclass(eq=False)
class ComputeRequest(Request):
    """A forward/backward in progress; ``at_fraction`` gives a request for a point inside it."""

    duration_s: float = 0.0
    env: simpy.Environment | None = None
    resolve: Callable[[], tuple[Any, float | None]] | None = None
    batch_size: int = 0
    grad_like: Any = None  # a tensor of the gradient's size and dtype (the replica's parameters)
    _result: GradResult | None = None

    def partial_result(self) -> GradResult:
        """The result before compute has finished — for gradient buckets that backward has
        already produced (``at_fraction``); reading parts not yet produced would be cheating.
        The gradient itself is evaluated when first read (see :class:`GradResult`)."""
        if self._result is None:
            self._result = GradResult(batch_size=self.batch_size, start_s=self.started_s,
                                      end_s=self.started_s + self.duration_s, resolve=self.resolve,
                                      like=self.grad_like)
        return self._result

    def at_fraction(self, fraction: float) -> Request:
        """A request completing when ``fraction`` (0..1) of the compute time has passed."""
        fraction = min(max(float(fraction), 0.0), 1.0)
        due = self.started_s + fraction * self.duration_s
        return Request("progress", self.name, self.env.timeout(max(0.0, due - self.env.now)), self.started_s)
