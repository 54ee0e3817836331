"""What one run produced, as data: its ranks, its recorder and its figures (:class:`RunResult`).

Both runtimes return a :class:`RunResult`; :mod:`simdist.results` writes it as a result
directory, and :mod:`simdist.metrics` and :mod:`simdist.tracefile` derive tables and the
timeline from it. It holds no behaviour beyond a convenience property.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .recorder import Recorder

__all__ = ["RankInfo", "LinkStats", "RunResult"]


@dataclass(frozen=True)
class RankInfo:
    """Where a rank lives and what it is."""

    rank: int
    node: int
    device: str  # device kind, e.g. "cpu", "a100"
    role: str = "worker"  # "worker" or "server"


@dataclass(frozen=True)
class LinkStats:
    """Traffic counters of one directional link over the whole run."""

    link: str
    kind: str
    bytes: float
    busy_s: float


@dataclass
class RunResult:
    """Everything one run produced; result files and plots are derived from this alone."""

    scenario: dict[str, Any]  # the resolved, validated scenario (JSON-able)
    platform: dict[str, Any]  # the resolved platform (JSON-able)
    seed: int
    algorithm: str
    ranks: list[RankInfo]
    recorder: Recorder
    links: list[LinkStats]
    virtual_time_s: float
    wall_time_s: float
    status: str  # "completed" | "target_reached" | "step_limit" | "time_limit" | "stalled"
    target_accuracy: float | None = None
    epochs: float | None = None  # epochs completed (fractional for asynchronous algorithms)
    timing_only: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    # each link's traffic over time (link_series); None where not kept (real runs, outputs.link_usage false)
    link_usage: dict[str, Any] | None = None

    @property
    def workers(self) -> list[int]:
        return [r.rank for r in self.ranks if r.role == "worker"]
