"""The lone-flow shortcut of :class:`~.network.FlowNetwork`: one timer for a flow alone on its links.

Most transfers are one message between two ranks over links that carry nothing else. Such a
*lone* flow moves at its narrowest link's capacity — what max-min filling would give it — so
it needs one timer from its send to its last byte, no latency timer and no re-solve. Should
another flow claim one of its links first, it rejoins the shared flows with the bytes it has
moved so far (:meth:`LoneFlows._join`), so the allocation is the max-min one at every instant
either way.

:class:`LoneFlows` is a mixin of :class:`~.network.FlowNetwork`, kept apart because the
shortcut is an optimisation on top of the flow life cycle, not part of it: it reads the
network's state (``env``, ``lone_shortcut``, ``active``, ``_lone``, ``_capacity``,
``_link_flows``, ``_link_busy_since``, ``link_busy_s``) and calls its life cycle
(``_start_after``, ``_add_active``, ``_resolve_soon``, ``_account_end``).
"""

from __future__ import annotations

import math

from .flow import Flow

__all__ = ["LoneFlows"]


class LoneFlows:
    """Lone flows of a :class:`~.network.FlowNetwork` (see the module docstring)."""


    def _can_go_alone(self, flow: Flow) -> bool:
        """A flow with bytes to move, on links that no flow uses or is about to use (its
        route names each link once)."""
        if not self.lone_shortcut or flow.nbytes <= 0 or not flow.route:
            return False
        carried, lone = self._link_flows.carries, self._lone
        for i in flow.link_indices:
            if carried(i) or i in lone:
                return False
        return True

    def _go_alone(self, flow: Flow, delay_s: float) -> None:
        """Send ``flow`` as a lone flow: one timer from now to its last byte.

        Its rate is its narrowest link's capacity, as max-min filling would give it, for as
        long as no other flow claims one of its links; then it becomes an ordinary flow
        (:meth:`_join`). ``started_s`` is when its latency has been paid and bytes move.
        """
        capacity = self._capacity
        rate = math.inf
        for i in flow.link_indices:
            if capacity[i] < rate:
                rate = capacity[i]
        flow.started_s = flow.busy_from_s = start_s = self.env.now + delay_s
        flow.rate_Bps = rate
        for i in flow.link_indices:
            self._lone[i] = flow
        timer = self.env.timeout(max(start_s + flow.nbytes / rate - self.env.now, 0.0), flow)
        timer.callbacks.append(self._lone_done)

    def _lone_done(self, timer) -> None:
        flow = timer.value
        lone, indices = self._lone, flow.link_indices
        if lone.get(indices[0]) is not flow:
            return  # joined the shared flows (_join): their timers finish it
        now, busy = self.env.now, self.link_busy_s
        if self.usage is not None:
            self._record_lone(flow, now)
        for i in indices:
            del lone[i]
            busy[i] += now - flow.busy_from_s
        self._account_end(flow)
        flow.done()

    def _record_lone(self, flow: Flow, now: float) -> None:
        """Tell the usage recorder what ``flow`` moved alone since ``busy_from_s``."""
        since = flow.busy_from_s
        if now > since:
            for i in flow.counted_indices:
                self.usage.add(i, since, now, flow.rate_Bps * (now - since), now - since)

    def _lone_flows(self) -> list[Flow]:
        return list({id(lone): lone for lone in self._lone.values()}.values())

    def _join(self, flow: Flow) -> None:
        """Make a lone flow an ordinary one: another flow is about to share one of its links."""
        now = self.env.now
        for i in flow.link_indices:
            del self._lone[i]
        if now < flow.started_s:  # still paying latency: it starts when it would have
            self._start_after(flow, flow.started_s - now)
            return
        if self.usage is not None:
            self._record_lone(flow, now)
        flow.remaining = flow.nbytes - flow.rate_Bps * (now - flow.started_s)
        self._add_active(flow, now)
        for i in flow.link_indices:  # its links were its alone: busy since its bytes began to move
            self._link_busy_since[i] = flow.busy_from_s
        self._resolve_soon()

    def _claim(self, flow: Flow) -> None:
        """Before ``flow`` starts on its links, return any lone flow on them to the shared set."""
        lone_links = self._lone
        for i in flow.link_indices:
            lone = lone_links.get(i)
            if lone is not None:
                self._join(lone)
