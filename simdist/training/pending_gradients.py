"""Lazy batching of gradient requests across simulated workers.

Every simulated worker asks for its own gradient, but evaluating them one at a time wastes
the batching :class:`~.gradients.GradientEvaluator` can do. :class:`PendingGradients` queues
the requests of independent callers and evaluates every queued request in one
:meth:`GradientEvaluator.gradients` call the first time any :class:`GradientHandle` result is
read. It lives apart from the evaluator because it is protocol (who waits for what), not math.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import torch

from ..errors import SimulationError

__all__ = ["GradientHandle", "PendingGradients"]

Request = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
Result = tuple[torch.Tensor, float]


class _Evaluator(Protocol):
    """What the queue needs of :class:`~.gradients.GradientEvaluator` (not imported: no cycle)."""

    def gradients(self, requests: list[Request]) -> list[Result]: ...


def _version_of(tensor: torch.Tensor) -> int | None:
    """The tensor's count of in-place writes (None for tensors that keep none)."""
    try:
        return tensor._version
    except RuntimeError:  # inference-mode tensors
        return None


class GradientHandle:
    """A queued gradient request; :meth:`result` evaluates every queued request at once."""

    def __init__(self, pending: "PendingGradients", params: torch.Tensor):
        self._pending = pending
        self._result: Result | None = None
        self._params_version = _version_of(params)  # in-place writes before evaluation are refused

    @property
    def ready(self) -> bool:
        return self._result is not None

    def result(self) -> Result:
        """(flat gradient, loss) of this request."""
        if self._result is None:
            self._pending.flush()
        assert self._result is not None
        return self._result


class PendingGradients:
    """Lazy batching across callers: requests queue until some caller reads a result.

    ``submit`` copies nothing: the caller guarantees that ``params``, ``x`` and ``y`` do
    not change until the result has been read (a worker does not touch its replica while
    its forward/backward is in flight, which is exactly this; a parameter-server worker
    that sends its gradient unread adopts new weights as a new tensor). Parameters written
    in place before their request is evaluated are refused (SimulationError). ``submit_batch`` queues a
    batch whose tensors ``gather`` fetches at evaluation, for every queued batch at once.
    """

    def __init__(self, evaluator: _Evaluator,
                 gather: Callable[[list[Any]], list[tuple[torch.Tensor, torch.Tensor]]] | None = None):
        self.evaluator = evaluator
        self.gather = gather
        self._queue: list[tuple[GradientHandle, Request]] = []
        self._batches: list[tuple[int, Any]] = []  # (queue position, batch) of requests without tensors yet
        self.evaluations = 0  # gradients() calls made, for tests and profiling

    def submit(self, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> GradientHandle:
        handle = GradientHandle(self, params)
        self._queue.append((handle, (params, x, y)))
        return handle

    def submit_batch(self, params: torch.Tensor, batch: Any) -> GradientHandle:
        """``submit`` for a batch whose features and labels are gathered when evaluated."""
        if self.gather is None:
            raise ValueError("submit_batch needs a gather function")
        handle = GradientHandle(self, params)
        self._batches.append((len(self._queue), batch))
        self._queue.append((handle, (params, None, None)))
        return handle

    def __len__(self) -> int:
        return len(self._queue)

    def flush(self) -> None:
        """Evaluate every queued request in one batched call."""
        queue, self._queue = self._queue, []
        batches, self._batches = self._batches, []
        if not queue:
            return
        if batches:
            for (position, _batch), (x, y) in zip(batches, self.gather([batch for _p, batch in batches])):
                handle, (params, _x, _y) = queue[position]
                queue[position] = (handle, (params, x, y))
        for handle, (params, _x, _y) in queue:
            if _version_of(params) != handle._params_version:
                raise SimulationError("the parameters of a queued gradient request were written in place before "
                                      "its gradient was read; keep a rank's parameters unchanged until then (adopt "
                                      "new weights as a new tensor, or read result.grad first)")
        self.evaluations += 1
        for (handle, _request), result in zip(queue, self.evaluator.gradients([r for _h, r in queue])):
            handle._result = result

