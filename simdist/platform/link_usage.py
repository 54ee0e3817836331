"""How busy each link was over time: bytes and flow-seconds per link in time bins.

:class:`LinkUsage` is the recorder behind ``link_usage.csv`` and the trace's link counter
tracks. The flow network reports every interval during which a link carried bytes at a
constant rate (a lone flow's whole transfer through ``add``; shared flows' rates at every
re-solve through :meth:`RateSegments.rates_at`, which closes an interval only where a link's
rate changed); the recorder spreads each
interval's bytes and flow-seconds over the bins it overlaps in proportion to the overlap, so
a bin holds exactly what crossed the link in it. From a bin's bytes comes the link's mean
utilisation (bytes / (nominal bandwidth x bin width)); from its flow-seconds the mean number
of flows sharing the link.

The run's length is not known in advance, so the bins start 1 us wide and double whenever the
run outgrows ``max_bins`` of them: adjacent bins are summed in pairs, which is exact because
both quantities add. A run of length T ends with between ``max_bins / 2`` and ``max_bins``
bins of width ``1 us x 2^k``. Only links that carried traffic get a row of bins, so memory is
links used x ``max_bins``, whatever the platform's size.

Intervals are buffered and binned in vectorized batches (:meth:`LinkUsage.flush`), so the
network pays an append per interval. A collective phase replayed from its first run alone
(:mod:`simdist.runtime.sim_collectives`) adds the per-link totals an :class:`UsageLog`
recorded on the scratch network, spread evenly over the phase's span where the replay puts
it (:meth:`LinkUsage.add_profile`): exact in every link's bytes per phase; inside a phase
(shorter than a bin, or a few) the bytes' timing is the phase's, not the link's own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .routes import Link

__all__ = ["LinkUsage", "RateSegments", "UsageLog", "UsageProfile", "link_series", "DEFAULT_MAX_BINS", "FIRST_BIN_S"]

DEFAULT_MAX_BINS = 200  # bins per link at most (the run ends with 100-200 of them)
FIRST_BIN_S = 1e-6  # the narrowest bin; widths are this times a power of two
_FLUSH_EVERY = 4096  # buffered intervals that trigger a binning pass
_COLUMNS = 5  # link, start_s, end_s, bytes, flow_s
_LINK_BY_LINK = 24  # links told at once up to which RateSegments.rates_at goes link by link


@dataclass(frozen=True)
class UsageProfile:
    """What an :class:`UsageLog` recorded: each link's bytes and flow-seconds, and the span
    they fall in (times relative to the log's start)."""

    link: np.ndarray
    nbytes: np.ndarray
    flow_s: np.ndarray
    span_s: tuple[float, float]  # (first start, last end) over every interval

    @property
    def empty(self) -> bool:
        return not len(self.link)


class RateSegments:
    """Turns the links' summed rates, told at every re-solve, into constant-rate intervals.

    The flow network calls :meth:`rates_at` with the summed flow rate and flow count of every
    link whose flows it re-solved (:meth:`rates_now`: of every link); only links whose
    figures changed close an interval (from their last change to now, at the old figures),
    handed to ``add_many`` in one vectorized call.
    A link carrying the same flows at the same rates across many events costs nothing until
    its rate changes. :meth:`close` ends every open interval (the end of a run).
    """

    def _init_segments(self, n_links: int) -> None:
        self._rate = np.zeros(n_links)
        self._flows = np.zeros(n_links)
        self._since = np.zeros(n_links)

    def rates_now(self, rate: np.ndarray, flows: np.ndarray, now_s: float) -> None:
        """Every link's summed rate (B/s) and flow count from ``now_s`` on."""
        self.rates_at(np.arange(len(self._rate)), rate, flows, now_s)

    def rates_at(self, links: Sequence[int], rate: Sequence[float], flows: Sequence[float], now_s: float) -> None:
        """The summed rate (B/s) and flow count of ``links`` (distinct link indices) from ``now_s``
        on; other links keep theirs. A few links (a re-solve of a small component) go link by
        link, which costs less than array operations at that size."""
        if len(links) <= _LINK_BY_LINK:
            self._rates_link_by_link(links, rate, flows, now_s)
            return
        links, rate, flows = np.asarray(links, dtype=np.int64), np.asarray(rate, float), np.asarray(flows, float)
        old_rate, old_flows = self._rate[links], self._flows[links]
        moved = (rate != old_rate) | (flows != old_flows)
        if not moved.any():
            return
        changed = links[moved]
        was_rate, was_flows, since = old_rate[moved], old_flows[moved], self._since[changed]
        ending = (was_flows > 0) & (since < now_s)
        if ending.any():
            length = now_s - since[ending]
            self.add_many(changed[ending], since[ending], np.full(int(ending.sum()), now_s),
                          was_rate[ending] * length, was_flows[ending] * length)
        self._since[changed] = now_s
        self._rate[changed] = rate[moved]
        self._flows[changed] = flows[moved]

    def _rates_link_by_link(self, links: Sequence[int], rate: Sequence[float], flows: Sequence[float],
                            now_s: float) -> None:
        """:meth:`rates_at` one link at a time (each closed interval through ``add``)."""
        rates, counts, since = self._rate, self._flows, self._since
        for link, new_rate, new_flows in zip(links, rate, flows):
            was_rate, was_flows = float(rates[link]), float(counts[link])
            if new_rate == was_rate and new_flows == was_flows:
                continue
            start = float(since[link])
            if was_flows > 0 and start < now_s:
                length = now_s - start
                self.add(int(link), start, now_s, was_rate * length, was_flows * length)
            since[link], rates[link], counts[link] = now_s, new_rate, new_flows

    def add(self, link: int, start_s: float, end_s: float, nbytes: float,
            flow_s: float) -> None:  # pragma: no cover - every recorder defines it
        raise NotImplementedError

    def add_along_many(self, links: np.ndarray, start_s: np.ndarray, end_s: np.ndarray, counts: np.ndarray,
                       service_at: Callable[[np.ndarray], np.ndarray]) -> None:
        """``counts[i]`` flows on ``links[i]`` over ``[start_s[i], end_s[i]]``, each having moved
        ``service_at(t)`` bytes by ``t`` (a pool's service, :mod:`.flow_pools`; it reads arrays of
        instants). Here the totals; :class:`LinkUsage` bins them exactly."""
        moved = service_at(end_s) - service_at(start_s)
        self.add_many(links, start_s, end_s, counts * moved, counts * (end_s - start_s))

    def close(self, now_s: float) -> None:
        """End every open interval at ``now_s``."""
        self.rates_now(np.zeros_like(self._rate), np.zeros_like(self._flows), now_s)

    def add_many(self, links: np.ndarray, start_s: np.ndarray, end_s: np.ndarray, nbytes: np.ndarray,
                 flow_s: np.ndarray) -> None:  # pragma: no cover - every recorder defines it
        raise NotImplementedError


class UsageLog(RateSegments):
    """The totals of a scratch network measuring one collective phase alone.

    A replayed phase is shorter than a bin of the run it is replayed into, or spans a few:
    what is kept of it is each link's totals and the phase's span, over which a replay
    spreads them (:meth:`LinkUsage.add_profile`); its shape inside the phase is not kept.
    """

    def __init__(self, n_links: int) -> None:
        self._init_segments(n_links)
        self._bytes = np.zeros(n_links)
        self._flow_s = np.zeros(n_links)
        self._span = [math.inf, -math.inf]

    def add(self, link: int, start_s: float, end_s: float, nbytes: float, flow_s: float) -> None:
        self._bytes[link] += nbytes
        self._flow_s[link] += flow_s
        self._span = [min(self._span[0], start_s), max(self._span[1], end_s)]

    def add_many(self, links, start_s, end_s, nbytes, flow_s) -> None:
        np.add.at(self._bytes, links, nbytes)
        np.add.at(self._flow_s, links, flow_s)
        self._span = [min(self._span[0], float(np.min(start_s))), max(self._span[1], float(np.max(end_s)))]

    def profile(self) -> UsageProfile:
        links = np.flatnonzero((self._bytes > 0) | (self._flow_s > 0))
        span = (self._span[0], self._span[1]) if len(links) else (0.0, 0.0)
        return UsageProfile(links.astype(np.int64), self._bytes[links].copy(), self._flow_s[links].copy(), span)


class LinkUsage(RateSegments):
    """Per-link bytes and flow-seconds in time bins that widen as the run grows (module doc)."""

    def __init__(self, n_links: int, *, max_bins: int = DEFAULT_MAX_BINS, first_bin_s: float = FIRST_BIN_S):
        if max_bins < 2 or max_bins % 2:
            raise ValueError(f"max_bins must be an even number >= 2, not {max_bins}")
        self.max_bins = max_bins
        self.bin_s = first_bin_s
        self._row_of = np.full(n_links, -1, dtype=np.int64)
        self._links: list[int] = []  # row -> link index
        self._bytes = np.zeros((0, max_bins))
        self._flow_s = np.zeros((0, max_bins))
        self._init_segments(n_links)
        self._scalars: list[float] = []  # buffered add() calls, _COLUMNS values each
        self._chunks: list[tuple[np.ndarray, ...]] = []  # buffered add_many() calls
        self._buffered = 0
        self._profile_rows: dict[int, tuple[UsageProfile, np.ndarray]] = {}  # id -> (profile, its bin rows)
        self._shares: dict[tuple[int, int], list] = {}  # (profile id, bin) -> [profile, summed share of it]

    # -- recording ------------------------------------------------------------------------

    def add(self, link: int, start_s: float, end_s: float, nbytes: float, flow_s: float) -> None:
        """``nbytes`` and ``flow_s`` flow-seconds on ``link`` spread evenly over ``[start_s, end_s]``."""
        self._scalars += (link, start_s, end_s, nbytes, flow_s)
        self._buffered += 1
        if self._buffered >= _FLUSH_EVERY:
            self.flush()

    def add_along_many(self, links: np.ndarray, start_s: np.ndarray, end_s: np.ndarray, counts: np.ndarray,
                       service_at: Callable[[np.ndarray], np.ndarray]) -> None:
        """As :meth:`RateSegments.add_along_many`, each interval cut at the bins' edges: a piece's
        bytes are what ``service_at`` says moved in it, so a bin holds exactly what crossed the
        link in it. ``service_at`` is called twice, for every piece's start and for its end."""
        if not len(links):
            return
        self._widen_to(float(end_s.max()))
        width = self.bin_s
        first = (start_s / width).astype(np.int64)
        last = np.maximum(np.ceil(end_s / width).astype(np.int64) - 1, first)
        index, offset = _pieces(last - first + 1)
        bins = first[index] + offset
        lo = np.where(offset == 0, start_s[index], bins * width)
        hi = np.where(bins == last[index], end_s[index], (bins + 1) * width)
        count = counts[index]
        self.add_many(links[index], lo, hi, count * (service_at(hi) - service_at(lo)), count * (hi - lo))

    def add_many(self, links: np.ndarray, start_s: np.ndarray, end_s: np.ndarray, nbytes: np.ndarray,
                 flow_s: np.ndarray) -> None:
        """:meth:`add` for arrays of intervals (the rate segments of :class:`RateSegments`)."""
        self._chunks.append((links, start_s, end_s, nbytes, flow_s))
        self._buffered += len(links)
        if self._buffered >= _FLUSH_EVERY:
            self.flush()

    def add_profile(self, profile: UsageProfile, offset_s: float) -> None:
        """``profile``'s totals, spread evenly over its span shifted to start at ``offset_s``.

        Replays are counted per (profile, bin) with the share of the span each bin holds, and
        added to the bins, one vectorized add per (profile, bin), when the bins are read or
        widened: a replay costs a few dictionary updates, whatever the number of links."""
        if profile.empty:
            return
        first_s, last_s = offset_s + profile.span_s[0], offset_s + profile.span_s[1]
        self._widen_to(last_s)
        width, last_bin = self.bin_s, self.max_bins - 1
        k0 = min(int(first_s / width), last_bin)
        k1 = max(k0, min(math.ceil(last_s / width) - 1, last_bin))
        length = last_s - first_s
        for k in range(k0, k1 + 1):
            share = 1.0 if length <= 0 else (min(last_s, (k + 1) * width) - max(first_s, k * width)) / length
            pending = self._shares.get((id(profile), k))
            if pending is None:
                self._shares[(id(profile), k)] = [profile, share]
            else:
                pending[1] += share

    def flush(self) -> None:
        """Bin every buffered interval (widening the bins first if one ends past the last)."""
        if not self._buffered:
            return
        scalars = np.array(self._scalars, dtype=float).reshape(-1, _COLUMNS)
        parts = [(scalars[:, 0].astype(np.int64), scalars[:, 1], scalars[:, 2], scalars[:, 3], scalars[:, 4]),
                 *self._chunks]
        link, start, end, nbytes, flow_s = (np.concatenate(column) for column in zip(*parts))
        self._scalars, self._chunks, self._buffered = [], [], 0
        keep = (nbytes > 0) | (flow_s > 0)
        link, start, end, nbytes, flow_s = link[keep], start[keep], end[keep], nbytes[keep], flow_s[keep]
        if not len(link):
            return
        self._widen_to(float(end.max()))
        self._spread(self._rows_for(link), start, np.maximum(end, start), nbytes, flow_s)

    # -- reading --------------------------------------------------------------------------

    def series(self, end_s: float) -> dict[str, np.ndarray]:
        """Every (link, bin) that carried anything, up to ``end_s`` (the run's end, which clips
        the last bin): arrays ``link`` (index), ``start_s``, ``end_s``, ``bytes``, ``flow_s``,
        in link then time order."""
        self.flush()
        self._widen_to(end_s)
        self._add_shares()
        order = np.argsort(np.array(self._links, dtype=np.int64), kind="stable")
        rows, bins = np.nonzero((self._bytes[order] > 0) | (self._flow_s[order] > 0))
        rows = order[rows]
        start = bins * self.bin_s
        return {"link": np.array(self._links, dtype=np.int64)[rows] if len(rows) else np.zeros(0, dtype=np.int64),
                "start_s": start, "end_s": np.minimum(start + self.bin_s, max(end_s, 0.0)),
                "bytes": self._bytes[rows, bins], "flow_s": self._flow_s[rows, bins]}

    # -- bins -----------------------------------------------------------------------------

    def _add_shares(self) -> None:
        """Add the profiles' counted shares (:meth:`add_profile`) to their bins."""
        for (_, k), (profile, share) in self._shares.items():
            rows = self._rows_of_profile(profile)
            self._bytes[rows, k] += share * profile.nbytes
            self._flow_s[rows, k] += share * profile.flow_s
        self._shares.clear()

    def _rows_of_profile(self, profile: UsageProfile) -> np.ndarray:
        cached = self._profile_rows.get(id(profile))
        if cached is None or cached[0] is not profile:
            cached = self._profile_rows[id(profile)] = (profile, self._rows_for(profile.link))
        return cached[1]

    def _widen_to(self, end_s: float) -> None:
        """Double the bin width (summing bins in pairs) until ``end_s`` falls inside the bins."""
        if end_s > self.max_bins * self.bin_s:
            self._add_shares()
        while end_s > self.max_bins * self.bin_s:
            half = self.max_bins // 2
            for table in (self._bytes, self._flow_s):
                table[:, :half] = table.reshape(len(table), half, 2).sum(axis=2)
                table[:, half:] = 0.0
            self.bin_s *= 2

    def _rows_for(self, link: np.ndarray) -> np.ndarray:
        """The bin rows of ``link``'s entries, giving a new row to each link seen first now."""
        new = np.unique(link[self._row_of[link] < 0])
        if len(new):
            self._row_of[new] = np.arange(len(self._links), len(self._links) + len(new))
            self._links.extend(int(i) for i in new)
            grow = np.zeros((len(new), self.max_bins))
            self._bytes = np.vstack([self._bytes, grow])
            self._flow_s = np.vstack([self._flow_s, grow.copy()])
        return self._row_of[link]

    def _spread(self, rows: np.ndarray, start: np.ndarray, end: np.ndarray, nbytes: np.ndarray,
                flow_s: np.ndarray) -> None:
        """Add each interval's bytes and flow-seconds to the bins it overlaps, by overlap."""
        last = self.max_bins - 1
        first_bin = np.minimum((start / self.bin_s).astype(np.int64), last)
        last_bin = np.clip(np.ceil(end / self.bin_s).astype(np.int64) - 1, first_bin, last)
        index, offset = _pieces(last_bin - first_bin + 1)
        bins = first_bin[index] + offset
        lo = np.maximum(start[index], bins * self.bin_s)
        hi = np.minimum(end[index], (bins + 1) * self.bin_s)
        length = end - start
        share = np.where(length[index] > 0, np.clip(hi - lo, 0.0, None) / np.where(length > 0, length, 1.0)[index],
                         1.0)  # an instantaneous interval lands whole in its bin
        np.add.at(self._bytes, (rows[index], bins), nbytes[index] * share)
        np.add.at(self._flow_s, (rows[index], bins), flow_s[index] * share)


def _pieces(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Interval ``i`` cut into ``counts[i]`` consecutive bins: for every piece, its interval's
    index and its place among that interval's pieces (0 for the first)."""
    index = np.repeat(np.arange(len(counts)), counts)
    return index, np.arange(len(index)) - np.repeat(np.cumsum(counts) - counts, counts)


def link_series(series: dict[str, np.ndarray], links: Sequence[Link]) -> dict[str, Any]:
    """:meth:`LinkUsage.series` with each link's name, kind and nominal bandwidth beside it
    (what a run result keeps: ``link_usage.csv`` and the trace's counters are read from it)."""
    by_index = {link.index: link for link in links}
    used = [by_index[int(i)] for i in series["link"]]
    return {"link": [link.name for link in used], "kind": [link.kind for link in used],
            "bandwidth_Bps": np.array([link.bandwidth_Bps for link in used], dtype=float),
            **{key: series[key] for key in ("start_s", "end_s", "bytes", "flow_s")}}
