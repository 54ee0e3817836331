"""Sharing rules: how flows on one bottleneck link divide its capacity.

Each rule is registered by name with its source, as the platform's ``fabric.sharing`` names
it; the flow network (:mod:`.network`) and the analytic step costs both read this table, so
the rule lives apart from either. ``max-min`` gives every flow the same share;
``rtt-weighted`` gives flows shares proportional to 1/RTT, RTT = 2 x the route's summed
latency, as TCP does to flows of different round-trip times (weighted max-min).
"""

from __future__ import annotations

from typing import Callable

from ..registry import Registry

__all__ = ["MIN_RTT_S", "SHARING_RULES", "rtt_weight"]

MIN_RTT_S = 1e-9  # rtt-weighted: a route of zero latency counts as 1 ns round trip (its weight stays finite)


def rtt_weight(route_latency_s: float) -> float:
    """A flow's weight under ``rtt-weighted`` sharing: 1 / RTT, RTT = 2 x its route's summed
    one-way latency (at least :data:`MIN_RTT_S`)."""
    return 1.0 / max(2.0 * route_latency_s, MIN_RTT_S)


SHARING_RULES: Registry[Callable[[float], float] | None] = Registry("sharing rule")
"""How flows share a bottleneck: each entry maps a route's summed latency to the flow's weight
(None: every flow the same, the plain max-min solver)."""
SHARING_RULES.add(
    "max-min", None, "every flow on a bottleneck gets the same share (max-min fairness)",
    citation="Bertsekas & Gallager, Data Networks §6.5.2; Velho et al., ACM TOMACS 23(4), 2013")
SHARING_RULES.add(
    "rtt-weighted", rtt_weight,
    "flows on a bottleneck get shares proportional to 1/RTT, RTT = 2 x the route's summed latency, as TCP "
    "favours short round trips (weighted max-min)",
    citation="SimGrid documentation, 'Models' > 'The TCP models' (https://simgrid.org/doc/latest/Models.html): "
    "each flow's priority is the sum over its links of Lat(l) + weight-S / Bandwidth(l), and flows get bandwidth "
    "inversely proportional to it (network/weight-S: 0 in CM02, 20537 in LV08, 8775 in SMPI); in the source, "
    "NetworkCm02Model::communicate sets sharing_penalty_ = the route's latency sum (plus weight-S / bandwidth "
    "per link when weight-S > 0), src/kernel/resource/models/network_cm02.cpp. This rule is that priority "
    "with weight-S = 0 (CM02), doubled into an RTT, which leaves the shares unchanged. A. Legrand and P. Velho, "
    "'Accuracy study and improvement of network simulation in the SimGrid framework', SIMUTools 2009")
