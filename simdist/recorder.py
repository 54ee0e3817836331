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

import math

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

__all__ = ["Span", "SpanBlock", "UpdateBlock", "Recorder", "UPDATE_COLUMNS", "EVAL_COLUMNS", "SPAN_FIELDS"]

UPDATE_COLUMNS = ("time_s", "worker", "step", "version", "staleness", "batch_size", "loss")
EVAL_COLUMNS = ("time_s", "step", "worker", "test_loss", "test_accuracy")


@dataclass(slots=True)
class Span:
    """One interval of a rank's activity (a plain slotted class: a run records one per
    compute and per wait, and a frozen dataclass costs three times as much to make)."""

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


@dataclass(frozen=True)
class SpanBlock:
    """The same span kind for many ranks at once (ranks that move in lockstep).

    ``ranks``, ``start_s`` and ``end_s`` are equal-length NumPy arrays; empty intervals
    (``end_s <= start_s``) are not spans and are dropped when the block is read, as
    :meth:`Recorder.span` drops them one at a time.
    """

    ranks: np.ndarray
    kind: str
    name: str
    start_s: np.ndarray
    end_s: np.ndarray
    blocking: bool = True
    args: dict[str, Any] = field(default_factory=dict)  # every span's args (shared, never written)
    # when each rank's span is known (a rank blocked on a collective records its spans when the
    # collective ends): a run that stops earlier has none of it; None: known from its start
    recorded_s: np.ndarray | None = None

    def spans(self) -> list[Span]:
        keep = self.end_s > self.start_s
        return [Span(int(r), self.kind, self.name, float(a), float(b), self.blocking, self.args)
                for r, a, b in zip(self.ranks[keep], self.start_s[keep], self.end_s[keep])]

    def clipped(self, end_s: float) -> "SpanBlock":
        latest = float(self.end_s.max()) if len(self.end_s) else -math.inf
        if self.recorded_s is not None and len(self.recorded_s):
            latest = max(latest, float(self.recorded_s.max()))
        if latest <= end_s:  # every span had ended (and was known) by then
            return self
        keep = self.start_s < end_s
        if self.recorded_s is not None:
            keep &= self.recorded_s <= end_s
        return replace(self, ranks=self.ranks[keep], start_s=self.start_s[keep],
                       end_s=np.minimum(self.end_s[keep], end_s),
                       recorded_s=None if self.recorded_s is None else self.recorded_s[keep])


@dataclass(frozen=True)
class UpdateBlock:
    """Updates applied by many workers of one step (one row each; scalars are shared).

    ``time_s``: one instant for all, or each worker's own (a lockstep group whose members
    apply the step at different times). ``extra``: more columns, each one value for all or
    an array with an entry per worker.
    """

    time_s: float | np.ndarray
    workers: np.ndarray
    step: int
    version: int
    staleness: int
    batch_size: np.ndarray
    loss: np.ndarray | None  # per worker, or None (timing-only)
    extra: dict[str, Any] = field(default_factory=dict)

    def rows(self) -> list[dict[str, Any]]:
        n = len(self.workers)
        losses = [None] * n if self.loss is None else [float(v) for v in self.loss]
        times = np.broadcast_to(np.asarray(self.time_s, dtype=float), (n,))
        rows = [dict(time_s=float(t), worker=int(w), step=self.step, version=self.version,
                     staleness=self.staleness, batch_size=int(b), loss=loss)
                for t, w, b, loss in zip(times, self.workers, self.batch_size, losses)]
        for key, value in self.extra.items():
            column = value if isinstance(value, np.ndarray) else [value] * n
            for row, entry in zip(rows, column):
                row[key] = entry.item() if isinstance(entry, np.generic) else entry
        return rows

    def until(self, end_s: float) -> "UpdateBlock":
        """The rows applied by ``end_s`` (a run that stopped there applied no later one)."""
        times = np.asarray(self.time_s, dtype=float)
        if times.ndim == 0 or not np.any(times > end_s):
            return self
        keep = times <= end_s
        extra = {k: (v[keep] if isinstance(v, np.ndarray) else v) for k, v in self.extra.items()}
        return replace(self, time_s=times[keep], workers=self.workers[keep], batch_size=self.batch_size[keep],
                       loss=None if self.loss is None else self.loss[keep], extra=extra)


SPAN_FIELDS = ("rank", "kind", "name", "start_s", "end_s", "blocking")


class Recorder:
    """Collects spans, updates, evaluations and free-form events of one run.

    Spans and updates arrive one at a time (:meth:`span`, :meth:`update`) or as blocks for
    ranks moving in lockstep (:meth:`span_block`, :meth:`update_block`). Reading ``spans``
    or ``updates`` gives plain rows in recording order; :meth:`span_columns` and
    :meth:`update_columns` give the same as columns without building a row per entry, which
    is what tables of thousand-rank runs read.
    """

    def __init__(self) -> None:
        self._span_chunks: list[list[Span] | SpanBlock] = []
        self._update_chunks: list[list[dict[str, Any]] | UpdateBlock] = []
        self.evals: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []

    # -- spans -----------------------------------------------------------------------

    def span(self, rank: int, kind: str, name: str, start_s: float, end_s: float, *, blocking: bool = True, **args: Any) -> None:
        if end_s > start_s:
            chunks = self._span_chunks
            if not chunks or type(chunks[-1]) is not _SpanRows:
                chunks.append(_SpanRows())
            chunks[-1].append((rank, kind, name, start_s, end_s, blocking, tuple(args.items()) if args else None))

    def span_block(self, block: SpanBlock) -> None:
        if len(block.ranks):
            self._span_chunks.append(block)

    @property
    def spans(self) -> list[Span]:
        """Every span as a row, in recording order (blocks are expanded once, here)."""
        return _flatten(self._span_chunks, _spans_of)

    @spans.setter
    def spans(self, value: list[Span]) -> None:
        self._span_chunks = [list(value)]

    def span_columns(self) -> dict[str, np.ndarray]:
        """Columns ``rank, kind, name, start_s, end_s, blocking`` of every span, in recording order."""
        parts: list[dict[str, np.ndarray]] = []
        for chunk in self._span_chunks:
            if isinstance(chunk, SpanBlock):
                keep = chunk.end_s > chunk.start_s
                n = int(keep.sum())
                parts.append({"rank": chunk.ranks[keep].astype(np.int64), "kind": np.full(n, chunk.kind, dtype=object),
                              "name": np.full(n, chunk.name, dtype=object), "start_s": chunk.start_s[keep].astype(float),
                              "end_s": chunk.end_s[keep].astype(float), "blocking": np.full(n, chunk.blocking)})
            elif type(chunk) is _SpanRows and chunk:
                ranks, kinds, names, starts, ends, blocking, _args = zip(*chunk)
                parts.append({"rank": np.array(ranks, dtype=np.int64), "kind": np.array(kinds, dtype=object),
                              "name": np.array(names, dtype=object), "start_s": np.array(starts, dtype=float),
                              "end_s": np.array(ends, dtype=float), "blocking": np.array(blocking, dtype=bool)})
            elif chunk:
                parts.append({"rank": np.array([s.rank for s in chunk], dtype=np.int64),
                              "kind": np.array([s.kind for s in chunk], dtype=object),
                              "name": np.array([s.name for s in chunk], dtype=object),
                              "start_s": np.array([s.start_s for s in chunk], dtype=float),
                              "end_s": np.array([s.end_s for s in chunk], dtype=float),
                              "blocking": np.array([s.blocking for s in chunk], dtype=bool)})
        return _concatenate(parts, {"rank": np.int64, "kind": object, "name": object, "start_s": float,
                                    "end_s": float, "blocking": bool})

    def clip_spans(self, end_s: float) -> None:
        """Cut every span at ``end_s`` (the run stopped there); spans starting later are dropped."""
        self._span_chunks = [_clipped(chunk, end_s) for chunk in self._span_chunks]

    # -- updates ---------------------------------------------------------------------

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
    ) -> dict[str, Any]:
        """One applied gradient; returns the row kept (read it, do not change it). ``extra``
        columns (e.g. ``age_s``) are kept in ``steps.csv``."""
        row = dict(time_s=time_s, worker=worker, step=step, version=version, staleness=staleness,
                   batch_size=batch_size, loss=loss)
        row.update(extra)
        _tail_list(self._update_chunks).append(row)
        return row

    def update_block(self, block: UpdateBlock) -> None:
        if len(block.workers):
            self._update_chunks.append(block)

    def clip_records(self, end_s: float) -> None:
        """Drop update rows and events later than ``end_s`` (the run stopped there): a lockstep
        group records its members' rows of a step together, some ahead of the run's clock."""
        chunks = [c if isinstance(c, list) else c.until(end_s) for c in self._update_chunks]
        self._update_chunks = [c for c in chunks if isinstance(c, list) or len(c.workers)]
        if any((e.get("time_s") or 0.0) > end_s for e in self.events):
            self.events = [e for e in self.events if (e.get("time_s") or 0.0) <= end_s]

    @property
    def updates(self) -> list[dict[str, Any]]:
        """Every update as a row, in the order of time (one rank's rows are recorded when made, so
        in that order; lockstep groups record a step's rows at once, ahead of some of them), rows
        made at one instant in worker order."""
        blocks = any(not isinstance(chunk, list) for chunk in self._update_chunks)
        rows = _flatten(self._update_chunks, UpdateBlock.rows)
        if blocks:
            rows.sort(key=lambda row: (row["time_s"], row["worker"]))
        return rows

    @updates.setter
    def updates(self, value: list[dict[str, Any]]) -> None:
        self._update_chunks = [list(value)]

    def update_columns(self) -> dict[str, np.ndarray] | None:
        """The update rows as columns when every update was recorded in blocks, else None
        (then read :attr:`updates`, whose rows may carry extra columns)."""
        if not self._update_chunks or any(isinstance(chunk, list) or chunk.extra for chunk in self._update_chunks):
            return None
        parts = []
        for block in self._update_chunks:
            n = len(block.workers)
            parts.append({"time_s": np.full(n, block.time_s, dtype=float), "worker": block.workers,
                          "step": np.full(n, block.step), "version": np.full(n, block.version),
                          "staleness": np.full(n, block.staleness), "batch_size": block.batch_size,
                          "loss": np.full(n, np.nan) if block.loss is None else np.asarray(block.loss, dtype=float)})
        columns = _concatenate(parts, {c: float if c in ("time_s", "loss") else np.int64 for c in UPDATE_COLUMNS})
        order = np.lexsort((columns["worker"], columns["time_s"]))  # as :attr:`updates` orders them
        return {name: values[order] for name, values in columns.items()}

    # -- evaluations and events --------------------------------------------------------

    def evaluation(self, *, time_s: float, step: int, worker: int, test_loss: float, test_accuracy: float) -> None:
        self.evals.append(dict(time_s=time_s, step=step, worker=worker, test_loss=test_loss, test_accuracy=test_accuracy))

    def event(self, kind: str, *, time_s: float, rank: int | None, **fields: Any) -> None:
        self.events.append(dict(kind=kind, time_s=time_s, rank=rank, **fields))


class _SpanRows(list):
    """Spans recorded one at a time, as tuples in :class:`Span`'s field order: made for
    every compute and wait of a run, a tuple costs a fifth of a Span; rows become Spans
    when read (:attr:`Recorder.spans`).

    The args are kept as a tuple of (key, value) pairs, None when there are none, not as a
    dict: a tuple of plain numbers and strings leaves the garbage collector's lists at its
    first pass, while one holding a dict stays and is traversed again by every full
    collection, a cost that grew with the spans a run had recorded so far."""


def _spans_of(chunk: "_SpanRows | SpanBlock") -> list[Span]:
    if type(chunk) is _SpanRows:
        return [Span(*row[:6]) if row[6] is None else Span(*row[:6], dict(row[6])) for row in chunk]
    return chunk.spans()


def _clipped(chunk: "list[Span] | _SpanRows | SpanBlock", end_s: float) -> "list[Span] | _SpanRows | SpanBlock":
    """``chunk`` with its spans cut at ``end_s`` and those starting later dropped."""
    if isinstance(chunk, SpanBlock):
        return chunk.clipped(end_s)
    if type(chunk) is _SpanRows:
        return _SpanRows(row if row[4] <= end_s else (*row[:4], end_s, *row[5:]) for row in chunk if row[3] < end_s)
    return [s if s.end_s <= end_s else replace(s, end_s=end_s) for s in chunk if s.start_s < end_s]


def _tail_list(chunks: list) -> list:
    """The last chunk if it holds single rows, else a new one appended for them."""
    if not chunks or not isinstance(chunks[-1], list):
        chunks.append([])
    return chunks[-1]


def _flatten(chunks: list, expand) -> list:
    """All rows of ``chunks`` as one list; the chunks become that list (expanded once)."""
    if len(chunks) == 1 and type(chunks[0]) is list:
        return chunks[0]
    rows: list = []
    for chunk in chunks:
        rows.extend(chunk if type(chunk) is list else expand(chunk))
    chunks[:] = [rows]
    return rows


def _concatenate(parts: list[dict[str, np.ndarray]], dtypes: dict[str, Any]) -> dict[str, np.ndarray]:
    if not parts:
        return {name: np.array([], dtype=dtype) for name, dtype in dtypes.items()}
    return {name: np.concatenate([p[name] for p in parts]).astype(dtype, copy=False) for name, dtype in dtypes.items()}
