"""The trace recorder: everything a run observes, as plain rows.

Runtimes write here; metrics, result files, plots and the Perfetto timeline read from
here. Nothing in a run prints: observability goes through this recorder.

Rows (all times in virtual seconds for the simulator, wall seconds for real runs):

* ``spans``   — what each rank was doing: ``compute`` (forward/backward), ``comm`` (data
  moving while the rank is blocked on it) and ``wait`` (blocked on peers that have not
  arrived yet). Spans of one rank never overlap, except non-blocking communication, which
  is recorded with ``blocking=False`` and does not count toward the rank's busy time.
* ``updates`` — one row per applied gradient: who produced it, the global step (model
  version after applying it), staleness, batch size and training loss.
* ``evals``   — test loss/accuracy of one replica (``worker``) at a time.
* ``events``  — free-form ``rt.record(kind, **fields)`` rows (phase changes, λ values ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["Span", "Recorder", "UPDATE_COLUMNS", "EVAL_COLUMNS"]

UPDATE_COLUMNS = ("time_s", "worker", "step", "version", "staleness", "batch_size", "loss")
EVAL_COLUMNS = ("time_s", "step", "worker", "test_loss", "test_accuracy")


@dataclass(frozen=True)
class Span:
    """One interval of a rank's activity."""

    rank: int
    kind: str  # "compute" | "comm" | "wait"
    name: str  # e.g. "forward/backward", "allreduce", "recv"
    start_s: float
    end_s: float
    blocking: bool = True
    args: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


class Recorder:
    """Collects spans, updates, evaluations and free-form events of one run."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.updates: list[dict[str, Any]] = []
        self.evals: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []

    def span(self, rank: int, kind: str, name: str, start_s: float, end_s: float, *, blocking: bool = True, **args: Any) -> None:
        if end_s > start_s:
            self.spans.append(Span(rank, kind, name, start_s, end_s, blocking, args))

    def clip_spans(self, end_s: float) -> None:
        """Cut every span at ``end_s`` (the run stopped there); spans starting later are dropped."""
        self.spans = [s if s.end_s <= end_s else replace(s, end_s=end_s) for s in self.spans if s.start_s < end_s]

    def update(
        self,
        *,
        time_s: float,
        worker: int,
        step: int,
        version: int,
        staleness: int,
        batch_size: int,
        loss: float | None,
        **extra: Any,
    ) -> None:
        """One applied gradient. ``extra`` columns (e.g. ``age_s``) are kept in ``steps.csv``."""
        row = dict(time_s=time_s, worker=worker, step=step, version=version, staleness=staleness,
                   batch_size=batch_size, loss=loss)
        row.update(extra)
        self.updates.append(row)

    def evaluation(self, *, time_s: float, step: int, worker: int, test_loss: float, test_accuracy: float) -> None:
        self.evals.append(dict(time_s=time_s, step=step, worker=worker, test_loss=test_loss, test_accuracy=test_accuracy))

    def event(self, kind: str, *, time_s: float, rank: int | None, **fields: Any) -> None:
        self.events.append(dict(kind=kind, time_s=time_s, rank=rank, **fields))
