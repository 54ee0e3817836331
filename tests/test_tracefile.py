"""The Chrome/Perfetto trace: valid JSON, process per node, thread per rank, async thread apart."""

from __future__ import annotations

import json

from simdist.link_outputs import LINKS_PID
from simdist.tracefile import ASYNC_TID_OFFSET, chrome_trace, read_trace_spans, spans_from_trace, write_chrome_trace

try:
    from test_metrics import make_result
except ImportError:  # tests/ collected as a package
    from .test_metrics import make_result


def _events(trace, ph):
    """The events of phase ``ph`` outside the link counters' process (tested on their own below)."""
    return [e for e in trace["traceEvents"] if e["ph"] == ph and e["pid"] != LINKS_PID]


def test_link_counters_live_in_a_process_of_their_own():
    trace = chrome_trace(make_result())
    links = [e for e in trace["traceEvents"] if e["pid"] == LINKS_PID]
    assert [e["args"]["name"] for e in links if e["name"] == "process_name"] == ["links"]
    series = {}
    for e in links:
        if e["ph"] == "C":
            series.setdefault(e["name"], []).append((e["ts"], e["args"]["utilisation"], e["args"]["flows"]))
    # n0->n1: 250 B in 1 s bins of a 500 B/s link, busy in bins 2-3 and 5-6, idle between and after
    assert series["link n0->n1"] == [(2e6, 0.5, 0.5), (3e6, 0.5, 0.5), (4e6, 0.0, 0.0), (5e6, 0.5, 0.5),
                                     (6e6, 0.5, 0.5), (7e6, 0.0, 0.0)]
    assert series["link n1->n0"] == [(7e6, 0.5, 1.0), (8e6, 0.0, 0.0)]
    kind = series["ib-hdr links (mean of 2)"]
    assert kind[0] == (2e6, 0.25, 0.25) and (7e6, 0.25, 0.5) in kind and kind[-1] == (8e6, 0.0, 0.0)
    assert all(e["pid"] != LINKS_PID for e in chrome_trace(make_result(link_usage=False))["traceEvents"])


def test_trace_is_valid_json_with_the_expected_top_level():
    trace = json.loads(json.dumps(chrome_trace(make_result()), allow_nan=False))
    assert set(trace) == {"traceEvents", "displayTimeUnit", "otherData"}
    assert trace["displayTimeUnit"] == "ms"
    assert trace["otherData"]["algorithm"] == "asgd"


def test_process_per_node_and_thread_per_rank():
    trace = chrome_trace(make_result())
    meta = _events(trace, "M")
    processes = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert processes == {0: "node 0", 1: "node 1"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert threads == {
        (0, 0): "rank 0 (worker, cpu)",
        (1, 1): "rank 1 (worker, cpu)",
        (1, 2): "rank 2 (server, cpu)",
        (0, ASYNC_TID_OFFSET + 0): "rank 0 async comm",
    }


def test_spans_are_complete_events_in_microseconds():
    result = make_result()
    spans = _events(chrome_trace(result), "X")
    assert len(spans) == len(result.recorder.spans) == 11
    node_of = {0: 0, 1: 1, 2: 1}
    for e in spans:
        assert e["dur"] >= 0 and e["cat"] in {"compute", "comm", "wait"}
        rank = e["tid"] % ASYNC_TID_OFFSET
        assert e["pid"] == node_of[rank]
    first = next(e for e in spans if e["tid"] == 1 and e["ts"] == 4e6)
    assert first == {"name": "forward/backward", "cat": "compute", "ph": "X", "ts": 4e6, "dur": 3e6,
                     "pid": 1, "tid": 1, "args": {"bytes": 0}}
    async_spans = [e for e in spans if e["tid"] >= ASYNC_TID_OFFSET]
    assert [(e["name"], e["tid"], e["ts"], e["dur"]) for e in async_spans] == [("iallreduce", ASYNC_TID_OFFSET, 3e6, 1e6)]


def test_blocking_spans_of_a_thread_do_not_overlap():
    spans = _events(chrome_trace(make_result()), "X")
    by_thread = {}
    for e in spans:
        by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for intervals in by_thread.values():
        intervals.sort()
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(intervals, intervals[1:]))


def test_updates_are_instants_and_evals_are_counters():
    trace = chrome_trace(make_result())
    instants = _events(trace, "i")
    assert len(instants) == 6 and all(e["name"] == "update" and e["s"] == "t" for e in instants)
    assert {(e["tid"], e["pid"]) for e in instants} == {(0, 0), (1, 1)}
    assert instants[0]["args"]["staleness"] == 0 and instants[0]["args"]["step"] == 1
    counters = _events(trace, "C")
    assert [(e["ts"], e["args"]) for e in counters] == [
        (5e6, {"worker 0": 0.5}), (5e6, {"worker 1": 0.6}), (10e6, {"worker 0": 0.8}), (10e6, {"worker 1": 0.9})]
    assert all(e["name"] == "test_accuracy" for e in counters)


def test_events_are_sorted_and_deterministic():
    a, b = chrome_trace(make_result()), chrome_trace(make_result())
    assert json.dumps(a) == json.dumps(b)
    timed = [e for e in a["traceEvents"] if e["ph"] != "M"]
    keys = [(e["ts"], e["pid"], e["tid"], e["name"]) for e in timed]
    assert keys == sorted(keys)
    first_timed = a["traceEvents"].index(timed[0])
    assert all(e["ph"] == "M" for e in a["traceEvents"][:first_timed])


def test_timing_only_trace_has_loss_null_and_no_counters():
    trace = json.loads(json.dumps(chrome_trace(make_result(timing_only=True)), allow_nan=False))
    assert all(e["args"]["loss"] is None for e in _events(trace, "i"))
    assert _events(trace, "C") == []


def test_spans_read_back_from_the_file(tmp_path):
    result = make_result()
    path = write_chrome_trace(result, tmp_path / "trace.json")
    spans, labels = read_trace_spans(path)
    assert len(spans) == 11 and labels[2] == "rank 2 (server, cpu)"
    assert spans["blocking"].sum() == 10
    back = sorted(zip(spans["rank"], spans["kind"], spans["start_s"], spans["end_s"], spans["blocking"]))
    original = sorted((s.rank, s.kind, s.start_s, s.end_s, s.blocking) for s in result.recorder.spans)
    assert back == original
    empty, no_labels = spans_from_trace({"traceEvents": []})
    assert empty.empty and no_labels == {} and list(empty.columns)[:2] == ["rank", "kind"]
