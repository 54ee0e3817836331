"""Faults as scenario input: node crashes and link degradation windows, applied in virtual time.

A scenario's ``faults:`` section lists

* ``node_crash: [{node, at}]`` — at virtual time ``at`` every rank of ``node`` stops: the
  runtime never resumes its processes again (a forward/backward in progress is lost and
  counted as a dropped gradient), messages addressed to it are dropped and counted, and a
  collective that needs it never completes;
* ``link_degradation: [{links, factor, start, duration}]`` — the capacity of every link whose
  name matches one of the ``links`` patterns (shell-style, e.g. ``n1.nic*``; names as in
  ``links.csv``) is multiplied by ``factor`` during ``[start, start + duration)`` (forever
  without ``duration``); the flow network re-solves its max-min rates at both edges.

Straggler windows (a rank's compute slowed for a while) are ``compute.stragglers``
(:mod:`simdist.platform.stragglers`). What each algorithm does when a node crashes is in
``docs/faults.md``. Fault timers are *background* events: they never keep a run alive, so a
run whose algorithm can no longer make progress ends as ``stalled``.
"""

from __future__ import annotations

import fnmatch
from typing import Any, Callable

from pydantic import BaseModel, Field, model_validator

from .config import USER_CONFIG
from .errors import InputError
from .platform.spec import Seconds

__all__ = ["NodeCrash", "LinkDegradation", "FaultsConfig", "FaultInjector", "check_faults"]


class _Config(BaseModel):
    model_config = USER_CONFIG


class NodeCrash(_Config):
    """Every rank of ``node`` stops at virtual time ``at`` and never comes back."""

    node: int = Field(ge=0, description="node index (0 .. nodes-1)")
    at: Seconds = Field(description="virtual time of the crash, e.g. '2s' (>= 0)")

    @model_validator(mode="after")
    def _non_negative(self):
        if self.at < 0:
            raise ValueError("at must be >= 0")
        return self


class LinkDegradation(_Config):
    """Links whose capacity is multiplied by ``factor`` for a window."""

    links: list[str] = Field(min_length=1, description="link name patterns (fnmatch), e.g. ['n1.nic0.*']")
    factor: float = Field(ge=1e-6, le=1, description="capacity multiplier inside the window (0.1 = a tenth), 1e-6 .. 1; "
                          "a link slower than that is down: model it with node_crash")
    start: Seconds = Field(0.0, description="start of the window (virtual time)")
    duration: Seconds | None = Field(None, description="length of the window (default: until the end of the run)")

    @model_validator(mode="after")
    def _window(self):
        if self.start < 0:
            raise ValueError("start must be >= 0")
        if self.duration is not None and self.duration <= 0:
            raise ValueError("duration must be greater than zero")
        return self


class FaultsConfig(_Config):
    """The faults of a run (all optional)."""

    node_crash: list[NodeCrash] = Field(default_factory=list, description="nodes that stop at a time")
    link_degradation: list[LinkDegradation] = Field(default_factory=list,
                                                    description="link capacity reduced during windows")

    @property
    def any(self) -> bool:
        return bool(self.node_crash or self.link_degradation)


def check_faults(faults: FaultsConfig, platform: Any, source: str | None) -> None:
    """Cross-checks against the platform: crashed nodes exist, link patterns match some link."""
    nodes = platform.nodes
    for i, crash in enumerate(faults.node_crash):
        if crash.node >= nodes:
            raise InputError(f"node {crash.node} does not exist (the platform has nodes 0..{nodes - 1})",
                             source=source, field=f"faults.node_crash[{i}].node")
    if not faults.link_degradation:
        return
    from .platform.topology import Platform

    names = [link.name for link in Platform(platform).links]
    for i, entry in enumerate(faults.link_degradation):
        for pattern in entry.links:
            if not fnmatch.filter(names, pattern):
                shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
                raise InputError(f"pattern {pattern!r} matches no link; links are named like {shown}",
                                 source=source, field=f"faults.link_degradation[{i}].links")


class FaultInjector:
    """Schedules a run's faults on a SimWorld as background timers (``background`` collects them)."""

    def __init__(self, faults: FaultsConfig, world: Any, background: Callable[[Any], Any]):
        self.faults = faults
        self.world = world
        self._background = background

    def crash_events(self) -> dict[int, Any]:
        """rank → an event that succeeds when the rank's node crashes (only ranks that crash)."""
        env, platform = self.world.env, self.world.platform
        events: dict[int, Any] = {}
        for crash in sorted(self.faults.node_crash, key=lambda c: (c.at, c.node)):
            ranks = [r for r in platform.ranks_on_node(crash.node) if r not in events]
            if not ranks:
                continue
            timer = self._background(env.timeout(crash.at))
            timer.callbacks.append(lambda _e, node=crash.node, ranks=tuple(ranks): self.world.crash(node, ranks))
            for rank in ranks:
                events[rank] = timer
        return events

    def schedule_degradations(self) -> None:
        env, links = self.world.env, self.world.platform.links
        for entry in self.faults.link_degradation:
            chosen = [link.index for link in links if any(fnmatch.fnmatchcase(link.name, p) for p in entry.links)]
            start = self._background(env.timeout(entry.start))
            start.callbacks.append(lambda _e, c=chosen, f=entry.factor: self._window(c, f, True))
            if entry.duration is not None:
                end = self._background(env.timeout(entry.start + entry.duration))
                end.callbacks.append(lambda _e, c=chosen, f=entry.factor: self._window(c, f, False))

    def _window(self, indices: list[int], factor: float, active: bool) -> None:
        self.world.network.degrade(indices, factor, active=active)
        edge = "start" if active else "end"
        names = [self.world.platform.links[i].name for i in indices]
        self.world.recorder.event("link_degradation", time_s=self.world.env.now, rank=-1, edge=edge,
                                  factor=factor, links=",".join(names))
