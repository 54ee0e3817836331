"""What a rank waits on in a real run: requests that ``test()`` True once done, with their value.

:class:`~simdist.real.driver.MPIDriver` waits on them; :class:`~simdist.real.runtime.MPIRuntime`
makes them. A forward/backward, a busy piece of work or an evaluation is done at the call
(:class:`Done`, :class:`ComputeRequest`); a send completes once buffered; a receive once a
matching message is there (a matched probe); a collective once every member has arrived and
its data phase is over.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..runtime.base import GradResult

__all__ = ["Request", "Done", "ComputeRequest", "SendRequest", "RecvRequest", "CollectiveRequest"]


class Request:
    """A runtime request: ``test()`` True once done; ``value`` then holds its result."""

    kind = "comm"

    def __init__(self, name: str, started_s: float | None = None, value: Any = None, done: bool = False):
        self.name = name
        self.started_s = started_s
        self.value = value
        self.done = done
        self.blocking = True
        self.issued_s = 0.0
        self.span_args: dict[str, Any] = {}  # what its comm span records besides the times (bytes, ...)

    def test(self) -> bool:
        return self.done


class Done(Request):
    def __init__(self, kind: str, name: str, started_s: float, value: Any = None):
        super().__init__(name, started_s, value, True)
        self.kind = kind


class ComputeRequest(Request):
    """A finished forward/backward: its value is the :class:`GradResult`."""

    kind = "compute"

    def __init__(self, result: GradResult):
        super().__init__("forward/backward", result.start_s, result, True)

    def partial_result(self) -> GradResult:
        return self.value

    def at_fraction(self, fraction: float) -> Request:
        return Done("progress", self.name, self.started_s)


class SendRequest(Request):
    """A buffered send on the ``pkl5`` communicator (its ``test()`` returns ``(done, value)``)."""

    def __init__(self, mpi_request, started_s: float):
        super().__init__("send", started_s)
        self._req = mpi_request

    def test(self) -> bool:
        if not self.done:
            self.done = bool(self._req.test()[0])
        return self.done


class RecvRequest(Request):
    def __init__(self, world: Any, rank: int, src: int, tag: int):
        super().__init__("recv")
        self._world, self._rank, self._src, self._tag = world, rank, src, tag

    def test(self) -> bool:
        if not self.done:
            message = self._world.poll(self._rank, self._src, self._tag)
            if message is not None:
                self.done, self.value, self.started_s = True, message, message.sent_s
                self.span_args = {"bytes": int(message.nbytes), "src": int(message.src), "sent_s": message.sent_s}
        return self.done


class CollectiveRequest(Request):
    """A non-blocking collective plus the MAX of the members' arrival times."""

    def __init__(self, name: str, requests: list, arrival: np.ndarray, finish, keep: tuple):
        super().__init__(name)
        self._requests, self._arrival, self._finish, self._keep = requests, arrival, finish, keep

    def mpi_requests(self) -> list:
        """The MPI requests (arrival times, data) behind it."""
        return self._requests

    def test(self) -> bool:
        """Done once every member has arrived and the data phase (waited for at once) is over."""
        if not self.done and self._requests[0].Test():
            from mpi4py import MPI

            MPI.Request.Waitall(self._requests[1:])
            self.done, self.started_s, self.value = True, float(self._arrival[0]), self._finish()
        return self.done
