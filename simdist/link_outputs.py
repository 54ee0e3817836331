"""Each link's traffic over time as outputs: ``link_usage.csv`` and the trace's counter tracks.

A simulated run keeps, per link and time bin, the bytes that crossed the link and the
flow-seconds spent on it (:mod:`simdist.platform.link_usage`). Here they become:

* :func:`link_usage_table`: one row per (link, bin) that carried anything, with the link's
  mean ``utilisation`` in the bin (bytes / (nominal bandwidth x bin width): a degraded link's
  full speed reads below 1) and the mean number of ``flows`` sharing it. Bins without a row
  were idle. Bytes are the flow model's exact amounts; ``links.csv`` counts whole bytes per
  transfer, so the two totals agree to within a byte per transfer.
* :func:`link_trace_events`: Perfetto / Chrome counter events (``"ph": "C"``) in a process
  of their own named ``links``: per link kind, the mean utilisation and flows over that kind's
  links; per link, for the :data:`TRACE_LINKS` busiest links only (a 1,024-GPU fabric has
  thousands), its utilisation and flows. A counter holds its value until the next event, so
  each series closes with a zero where its link falls idle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # pragma: no cover - typing only
    from .run_result import RunResult

__all__ = ["LINK_USAGE_COLUMNS", "TRACE_LINKS", "LINKS_PID", "link_usage_table", "link_trace_events",
           "kind_means", "busiest_links"]

LINK_USAGE_COLUMNS: tuple[str, ...] = ("link", "kind", "start_s", "end_s", "bytes", "utilisation", "flows")
TRACE_LINKS = 16  # links drawn as their own counter tracks, busiest first
LINKS_PID = 1_000_000  # the trace process holding the link counters (nodes are 0 ... nodes - 1)
_US = 1e6


def link_usage_table(result: RunResult) -> pd.DataFrame:
    """One row per (link, time bin) with traffic, in link then time order (module doc)."""
    usage = result.link_usage
    if usage is None or not len(usage["link"]):
        return pd.DataFrame({c: pd.Series([], dtype=object if c in ("link", "kind") else float)
                             for c in LINK_USAGE_COLUMNS})
    width = np.maximum(usage["end_s"] - usage["start_s"], 1e-300)
    return pd.DataFrame({
        "link": pd.Series(usage["link"], dtype=object),
        "kind": pd.Series(usage["kind"], dtype=object),
        "start_s": usage["start_s"], "end_s": usage["end_s"], "bytes": usage["bytes"],
        "utilisation": usage["bytes"] / (usage["bandwidth_Bps"] * width),
        "flows": usage["flow_s"] / width,
    }, columns=list(LINK_USAGE_COLUMNS))


def kind_means(table: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per link kind, each bin's mean ``utilisation`` and ``flows`` over that kind's links with
    traffic (a link idle in a bin counts 0), indexed by ``start_s``, with the bin's ``end_s``;
    and the number of links the mean is over (``links``, the frame's attribute)."""
    means = {}
    for kind, rows in table.groupby("kind", sort=True):
        links = rows["link"].nunique()
        per_bin = rows.groupby("start_s", sort=True).agg(end_s=("end_s", "max"), utilisation=("utilisation", "sum"),
                                                         flows=("flows", "sum"))
        per_bin[["utilisation", "flows"]] /= links
        per_bin.attrs["links"] = links
        means[str(kind)] = per_bin
    return means


def busiest_links(table: pd.DataFrame, count: int) -> list[str]:
    """The ``count`` links that moved the most bytes, busiest first (ties in table order)."""
    totals = table.groupby("link", sort=False)["bytes"].sum().sort_values(ascending=False, kind="stable")
    return [str(name) for name in totals.index[:count]]


def link_trace_events(result: RunResult) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(metadata, counter events) of the trace's ``links`` process (module doc); none without link usage."""
    table = link_usage_table(result)
    if table.empty:
        return [], []
    metadata = [
        {"ph": "M", "name": "process_name", "pid": LINKS_PID, "tid": 0, "ts": 0, "args": {"name": "links"}},
        {"ph": "M", "name": "process_sort_index", "pid": LINKS_PID, "tid": 0, "ts": 0, "args": {"sort_index": -1}},
    ]
    counters: list[dict[str, Any]] = []
    for kind, per_bin in kind_means(table).items():
        counters += _counter(f"{kind} links (mean of {per_bin.attrs['links']})", per_bin.index.to_numpy(),
                             per_bin["end_s"].to_numpy(), per_bin["utilisation"].to_numpy(),
                             per_bin["flows"].to_numpy())
    for name in sorted(busiest_links(table, TRACE_LINKS)):
        rows = table[table["link"] == name]
        counters += _counter(f"link {name}", rows["start_s"].to_numpy(), rows["end_s"].to_numpy(),
                             rows["utilisation"].to_numpy(), rows["flows"].to_numpy())
    return metadata, counters


def _counter(name: str, start_s: np.ndarray, end_s: np.ndarray, utilisation: np.ndarray,
             flows: np.ndarray) -> list[dict[str, Any]]:
    """Counter events of one series: a value at each bin's start, and zero where the next bin
    with traffic does not follow at once (the link was idle in between)."""
    events = []
    for k, start in enumerate(start_s):
        events.append(_event(name, start, float(utilisation[k]), float(flows[k])))
        if k + 1 == len(start_s) or start_s[k + 1] > end_s[k] * (1 + 1e-12):
            events.append(_event(name, end_s[k], 0.0, 0.0))
    return events


def _event(name: str, time_s: float, utilisation: float, flows: float) -> dict[str, Any]:
    return {"ph": "C", "name": name, "pid": LINKS_PID, "tid": 0, "ts": round(float(time_s) * _US, 3),
            "args": {"utilisation": round(utilisation, 6), "flows": round(flows, 4)}}
