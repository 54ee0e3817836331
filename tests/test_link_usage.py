"""Link usage over time: the recorder's bins, the flow network's intervals, and a run's outputs.

* :class:`LinkUsage`: a bin holds exactly the part of each interval that overlaps it (checked
  against the overlap integral on random intervals), widening keeps every total, the last bin
  is clipped at the run's end;
* :class:`FlowNetwork` with a recorder: a link's binned bytes add up to its byte counter, with
  and without the lone-flow shortcut, and two flows sharing a link show it full with 2 flows;
* a run: ``link_usage.csv`` agrees with ``links.csv`` on every link, per rank and as a lockstep
  cohort (whose collectives replay a phase measured alone); utilisation never exceeds 1;
  the trace has the ``links`` counter tracks; ``outputs`` switches it all off; bad
  ``outputs`` fields exit 2 naming the field.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import simpy
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

import simdist
from simdist.api_result import Result
from simdist.cli import main
from simdist.link_outputs import LINKS_PID
from simdist.platform.link_usage import LinkUsage, UsageLog
from simdist.platform.network import FlowNetwork
from simdist.platform.topology import Link
from simdist.result_files import load_result_dir
from simdist.results import result_tables
from simdist.run_figures import figure
from simdist.scenario import scenario_from_dict
from simdist.simulate import Simulation
from helpers import tiny_scenario

PROPERTY = settings(max_examples=60, deadline=None)

interval = st.tuples(st.integers(0, 2), st.floats(0.0, 0.01), st.floats(0.0, 0.01), st.floats(0.0, 1e6),
                     st.floats(0.0, 3.0))


def _overlap(a: float, b: float, lo: float, hi: float) -> float:
    return max(0.0, min(b, hi) - max(a, lo))


@PROPERTY
@given(intervals=st.lists(interval, min_size=1, max_size=40), max_bins=st.sampled_from([2, 4, 16, 200]))
def test_each_bin_holds_exactly_the_overlap_of_every_interval(intervals, max_bins):
    usage = LinkUsage(3, max_bins=max_bins)
    for link, a, length, nbytes, flows in intervals:
        usage.add(link, a, a + length, nbytes, flows * length)
    end = max(a + length for _, a, length, _, _ in intervals)
    series = usage.series(end)
    got: dict[tuple[int, float], float] = {(int(k), s): b for k, s, b in zip(series["link"], series["start_s"],
                                                                            series["bytes"])}
    width = usage.bin_s
    for link in range(3):
        for k in range(max_bins):
            lo, hi = k * width, (k + 1) * width
            expected = 0.0
            for i, a, length, nbytes, _ in intervals:
                if i != link:
                    continue
                length = (a + length) - a  # as a float end point has it: a tiny length may vanish
                if length > 0:
                    expected += nbytes * (_overlap(a, a + length, lo, hi) / length)  # the share first: no underflow
                elif lo <= a < hi or (k == max_bins - 1 and a >= hi):
                    expected += nbytes
            assert got.get((link, lo), 0.0) == pytest.approx(expected, rel=1e-9, abs=1e-6 * (1 + expected))
    assert end <= max_bins * width and (end == 0 or width == 1e-6 or end > max_bins * width / 2)


@PROPERTY
@given(rates=st.lists(st.floats(0.0, 1e9), min_size=1, max_size=8),
       intervals=st.lists(st.tuples(st.integers(0, 2), st.floats(0.0, 1.0), st.floats(0.0, 1.0),
                                    st.integers(1, 5)), min_size=1, max_size=20),
       max_bins=st.sampled_from([2, 8, 200]))
def test_intervals_along_a_service_bin_as_their_constant_rate_pieces(rates, intervals, max_bins):
    """A pool's intervals (count flows, each moving as a piecewise-linear service says) land in the
    bins as the same bytes told piece by piece at each piece's constant rate."""
    end = 1e-4
    times = np.linspace(0.0, end, len(rates) + 1)
    service = np.concatenate(([0.0], np.cumsum(np.diff(times) * np.array(rates))))

    def service_at(t):
        return np.interp(t, times, service)

    links = np.array([link for link, *_ in intervals], dtype=np.int64)
    lo = np.array([min(a, b) * end for _, a, b, _ in intervals])
    hi = np.array([max(a, b) * end for _, a, b, _ in intervals])
    counts = np.array([n for *_, n in intervals], dtype=float)
    along = LinkUsage(3, max_bins=max_bins)
    along.add_along_many(links, lo, hi, counts, service_at)
    pieces = LinkUsage(3, max_bins=max_bins)
    for link, a, b, n in zip(links, lo, hi, counts):
        cuts = [a, *[t for t in times if a < t < b], b]  # the service's rate is constant between cuts
        for t0, t1 in zip(cuts, cuts[1:]):
            pieces.add(int(link), t0, t1, n * (service_at(t1) - service_at(t0)), n * (t1 - t0))
    got, want = along.series(end), pieces.series(end)
    assert along.bin_s == pieces.bin_s
    totals = {(int(k), s): b for k, s, b in zip(want["link"], want["start_s"], want["bytes"])}
    for k, s, b in zip(got["link"], got["start_s"], got["bytes"]):
        assert b == pytest.approx(totals.pop((int(k), s), 0.0), rel=1e-9, abs=1e-3)
    assert all(b == pytest.approx(0.0, abs=1e-3) for b in totals.values())


def test_widening_keeps_every_total_and_the_last_bin_is_clipped_at_the_end():
    usage = LinkUsage(2, max_bins=4)
    usage.add(0, 0.0, 2e-6, 100.0, 2e-6)
    usage.add(1, 1e-6, 3.5e-6, 50.0, 5e-6)
    usage.flush()
    assert usage.bin_s == 1e-6
    usage.add(0, 10e-6, 11e-6, 7.0, 1e-6)  # past 4 bins of 1 us: widened twice, to 4 bins of 4 us
    series = usage.series(11e-6)
    assert usage.bin_s == 4e-6
    totals = pd.DataFrame(series).groupby("link")["bytes"].sum()
    assert totals[0] == pytest.approx(107.0) and totals[1] == pytest.approx(50.0)
    assert series["end_s"].max() == pytest.approx(11e-6)  # the last bin ends with the run


def test_bins_must_come_in_pairs():
    with pytest.raises(ValueError, match="even"):
        LinkUsage(1, max_bins=3)


def test_a_replayed_profile_is_spread_over_its_span_wherever_it_lands():
    log = UsageLog(2)
    log.add(0, 0.0, 1e-6, 10.0, 1e-6)
    log.add(0, 2e-6, 3e-6, 10.0, 1e-6)
    log.add(1, 1e-6, 4e-6, 30.0, 3e-6)
    profile = log.profile()
    assert profile.span_s == (0.0, 4e-6) and list(profile.nbytes) == [20.0, 30.0]
    usage = LinkUsage(2, max_bins=8)
    for offset in (0.0, 2e-6, 30e-6):  # within a bin, across two, after a widening
        usage.add_profile(profile, offset)
    series = pd.DataFrame(usage.series(40e-6))
    assert series.groupby("link")["bytes"].sum().tolist() == [pytest.approx(60.0), pytest.approx(90.0)]


def test_rate_changes_close_only_the_links_whose_rate_changed():
    log = UsageLog(3)
    log.rates_now(np.array([10.0, 20.0, 0.0]), np.array([1.0, 2.0, 0.0]), 0.0)
    log.rates_now(np.array([10.0, 5.0, 0.0]), np.array([1.0, 1.0, 0.0]), 2.0)  # link 1 changes at 2 s
    log.close(3.0)
    profile = log.profile()
    assert profile.link.tolist() == [0, 1] and profile.span_s == (0.0, 3.0)
    assert profile.nbytes.tolist() == [30.0, 2 * 20.0 + 5.0]  # link 0 one interval of 3 s
    assert profile.flow_s.tolist() == [3.0, 2 * 2.0 + 1.0]


# -- the flow network ------------------------------------------------------------------------


def _links(capacities):
    return [Link(i, f"l{i}", "test", 0.0, c) for i, c in enumerate(capacities)]


@PROPERTY
@given(flows=st.lists(st.tuples(st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True),
                                st.floats(1.0, 1e5), st.floats(0.0, 0.05)), min_size=1, max_size=8),
       lone=st.booleans())
@example(flows=[([0], 1.0000000000000002, 0.015625)], lone=False)  # rounds up by almost a byte
def test_a_links_binned_bytes_add_up_to_its_byte_counter(flows, lone):
    env = simpy.Environment()
    links = _links([1e5, 3e5, 1e6])
    net = FlowNetwork(env, links, lone_shortcut=lone)
    net.usage = LinkUsage(len(links), max_bins=16)

    def one(route, nbytes, start):
        yield env.timeout(start)
        yield net.transfer([links[k] for k in route], nbytes)

    for flow in flows:
        env.process(one(*flow))
    env.run()
    net.finalize(env.now)
    series = pd.DataFrame(net.usage.series(env.now))
    for link in links:
        binned = series.loc[series["link"] == link.index, "bytes"].sum()
        carried = [nbytes for route, nbytes, _ in flows if link.index in route]
        assert binned == pytest.approx(sum(carried), rel=1e-9, abs=1e-9)
        # the byte counter counts whole bytes: each flow rounded up, by less than one byte
        assert net.link_bytes[link.index] == sum(math.ceil(nbytes) for nbytes in carried)
        utilisation = series.loc[series["link"] == link.index, "bytes"] / (
            link.bandwidth_Bps * (series.loc[series["link"] == link.index, "end_s"]
                                  - series.loc[series["link"] == link.index, "start_s"]))
        assert (utilisation <= 1 + 1e-9).all()


def test_two_flows_sharing_a_link_fill_it_with_two_flows():
    env = simpy.Environment()
    links = _links([100.0])
    net = FlowNetwork(env, links)
    net.usage = LinkUsage(1, max_bins=2)
    net.transfer(links, 500.0)
    net.transfer(links, 500.0)
    env.run()
    net.finalize(env.now)
    series = net.usage.series(env.now)  # 10 s at 100 B/s: two bins, each full with 2 flows
    assert env.now == pytest.approx(10.0)
    width = series["end_s"] - series["start_s"]
    assert np.allclose(series["bytes"] / (100.0 * width), 1.0)
    assert np.allclose(series["flow_s"] / width, 2.0)


# -- a run's outputs -------------------------------------------------------------------------


def _timing_only_sync(**outputs) -> dict:
    return {
        "name": "links-over-time",
        "platform": {"preset": "cluster-a100-hdr", "nodes": 4},
        "workload": {"model": {"name": "mlp", "hidden": [256, 256]},
                     "dataset": {"name": "synthetic", "samples": 512, "features": 64, "classes": 10},
                     "batch_size": 16, "timing_only": True},
        "algorithm": {"name": "sync", "collective": "ring"},
        "stop": {"steps": 12},
        "outputs": {"plots": False, "trace": False, **outputs},
    }


@pytest.mark.parametrize("lockstep", [True, False])
def test_link_usage_agrees_with_the_link_counters_per_rank_and_as_a_cohort(lockstep):
    result = Result.from_run(Simulation(scenario_from_dict(_timing_only_sync()), None, lockstep=lockstep).execute())
    usage, links = result.link_usage, result.links
    assert not usage.empty and set(usage["link"]) == set(links.loc[links["bytes"] > 0, "link"])
    binned = usage.groupby("link")["bytes"].sum()
    for name, nbytes in zip(links["link"], links["bytes"]):
        assert binned.get(name, 0.0) == pytest.approx(nbytes, rel=1e-9, abs=64)
    assert usage["utilisation"].max() <= 1 + 1e-9 and (usage["flows"] >= 0).all()
    assert usage["end_s"].max() <= result.summary["virtual_time_s"]  # the last bin is clipped at the run's end


def test_per_rank_and_cohort_runs_keep_the_same_usage():
    tables = [Result.from_run(Simulation(scenario_from_dict(_timing_only_sync()), None, lockstep=lockstep).execute()).link_usage
        for lockstep in (False, True)]
    per_rank, cohort = (t.groupby("link")["bytes"].sum() for t in tables)
    pd.testing.assert_series_equal(per_rank, cohort, rtol=1e-9)


def test_the_run_directory_has_the_table_the_counters_and_the_figure(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_timing_only_sync(trace=True, plots=True, parquet=True)))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    out = tmp_path / "out"
    table = pd.read_csv(out / "link_usage.csv")
    assert list(table.columns) == ["link", "kind", "start_s", "end_s", "bytes", "utilisation", "flows"]
    assert (out / "link_usage.parquet").is_file() and (out / "steps.parquet").is_file()
    trace = json.loads((out / "trace.json").read_text())["traceEvents"]
    counters = [e for e in trace if e.get("pid") == LINKS_PID and e["ph"] == "C"]
    names = {e["name"] for e in counters}
    assert any(name.startswith("link ") for name in names) and any(" links (mean of " in n for n in names)
    assert all(0.0 <= e["args"]["utilisation"] <= 1.0 + 1e-6 for e in counters)
    assert (out / "plots" / "link_utilisation.png").is_file()
    assert simdist.load(out).link_usage.shape == table.shape


def test_outputs_turn_link_usage_and_the_trace_off(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_timing_only_sync(link_usage=False)))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    out = tmp_path / "out"
    assert pd.read_csv(out / "link_usage.csv").empty and not (out / "trace.json").exists()
    assert figure(load_result_dir(out), "link_utilisation") is None  # no data: the figure is skipped


@pytest.mark.parametrize("field, value", [("link_usage_bins", 3), ("link_usage_bins", 0), ("link_usage", "often")])
def test_bad_outputs_fields_exit_2_naming_the_field(tmp_path, capsys, field, value):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(tiny_scenario(outputs={field: value})))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"outputs.{field}" in err and "bad.yaml" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_real_runs_result_has_the_header_only():
    run = Simulation(scenario_from_dict(tiny_scenario()), None).execute()
    run.link_usage = None  # what the MPI runtime returns: no flow model, no link counters
    table = result_tables(run)["link_usage.csv"]
    assert table.empty and list(table.columns)[:2] == ["link", "kind"]
