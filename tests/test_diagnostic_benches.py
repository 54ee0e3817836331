"""benchmarks/message_anatomy.py, work_after_idle.py and allreduce_after_step.py: what they compute, and their bad
arguments."""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest

from helpers import load_benchmark


@pytest.fixture(scope="module")
def anatomy():
    return load_benchmark("message_anatomy")


@pytest.fixture(scope="module")
def after_idle():
    return load_benchmark("work_after_idle")


def _span(tid, name, ts, dur, cat="comm", **args):
    return {"ph": "X", "tid": tid, "name": name, "ts": ts, "dur": dur, "cat": cat, "args": args}


EVENTS = [
    # the server (rank 2) sends 400 kB to worker 0, which was waiting: its call 100 µs, the receive's comm 300 µs
    _span(2, "message overhead", 1000.0, 100.0),
    _span(0, "recv", 1000.0, 300.0, bytes=400_000, src=2),
    # worker 1 pushes to the server, which was waiting: call 50 µs, comm 250 µs
    _span(1, "message overhead", 2000.0, 50.0),
    _span(2, "recv", 2000.0, 250.0, bytes=400_000, src=1),
    # a receive whose message lay unread (its comm starts later than the send): not counted
    _span(1, "message overhead", 3000.0, 50.0),
    _span(2, "recv", 3500.0, 100.0, bytes=400_000, src=1),
    # a small message: below --min-bytes
    _span(2, "message overhead", 4000.0, 10.0),
    _span(1, "recv", 4000.0, 20.0, bytes=8, src=2),
]


def test_a_receive_splits_into_its_sender_s_call_and_the_rest(anatomy):
    rows = anatomy.message_rows(EVENTS, min_bytes=65536)
    assert rows[["src", "dst", "comm_us", "call_us"]].values.tolist() == [[2, 0, 300.0, 100.0], [1, 2, 250.0, 50.0]]
    table = anatomy.anatomy(rows, workers={0, 1}).set_index("direction")
    assert table.loc["server -> worker", "rest_median"] == 200.0 and table.loc["worker -> server", "call_median"] == 50.0
    assert anatomy.direction(0, 1, {0, 1}) == "worker -> worker"


def test_the_script_prints_real_and_simulated_rows(anatomy, tmp_path, capsys):
    for run in ("real", "sim"):
        d = tmp_path / "point" / "validate" / run
        d.mkdir(parents=True)
        (d / "trace.json").write_text(json.dumps({"traceEvents": EVENTS}))
        (d / "workers.csv").write_text("worker\n0\n1\n")
    assert anatomy.main([str(tmp_path / "point")]) == 0
    out = capsys.readouterr().out
    assert out.count("server -> worker") == 2 and out.count("worker -> server") == 2


@pytest.mark.parametrize("argv", [["/nonexistent"], ["a", "b", "c"], [".", "--min-bytes", "-1"]])
def test_message_anatomy_bad_arguments_exit_2(anatomy, argv, capsys):
    with pytest.raises(SystemExit) as exc:
        anatomy.main(argv)
    assert exc.value.code == 2 and "error" in capsys.readouterr().err


def test_work_is_timed_after_idling_and_compared_with_back_to_back(after_idle):
    calls = []
    median = after_idle.timed_after_idle(lambda: calls.append(1), idle_s=0.002, sleep_s=0.0005, repeats=3)
    assert len(calls) == 6 and median >= 0  # each timed run follows an untimed one
    assert after_idle.ratios({0.0: 2e-6, 10.0: 6e-6}) == pytest.approx({0.0: 1.0, 10.0: 3.0})


def test_the_extra_after_an_idle_is_summed_over_the_runs_that_follow(after_idle):
    calls = []
    first, total = after_idle.extra_after_idle(lambda: calls.append(1), idle_s=0.0, sleep_s=0.001, repeats=2, runs=3,
                                               warm_s=1.0)  # a warm time far above these runs' own
    assert len(calls) == 2 * (1 + 3)  # each repeat: one untimed run, then the timed ones in a row
    assert -1.0 < first < 0 and -3.0 < total < 0 and total < first


@pytest.mark.parametrize("argv", [["--idle-ms", "x"], ["--idle-ms", "-1"], ["--repeats", "0"], ["--sleep-us", "0"],
                                  ["--runs", "0"], ["--scenario", "/nonexistent.yaml"]])
def test_work_after_idle_bad_arguments_exit_2(after_idle, argv, capsys):
    with pytest.raises(SystemExit) as exc:
        after_idle.main(argv)
    assert exc.value.code == 2 and "error" in capsys.readouterr().err


@pytest.fixture(scope="module")
def allreduce_after_step():
    return load_benchmark("allreduce_after_step")


def test_the_allreduce_summary_keeps_what_follows_the_warmup(allreduce_after_step):
    ranks = [{"back_to_back": [9.0, 0.001, 0.002, 0.003], "after_step": [9.0, 0.004, 0.004, 0.006]}]
    row = allreduce_after_step.summary(ranks, warmup=1)[0]
    assert row["back_to_back_median_ms"] == pytest.approx(2.0) and row["after_step_median_ms"] == pytest.approx(4.0)
    assert row["ratio"] == pytest.approx(2.0) and row["back_to_back_p90_ms"] == pytest.approx(2.8)


def test_the_slowest_rank_per_call_is_taken_call_by_call(allreduce_after_step):
    ranks = [{"after_step": [9.0, 0.001, 0.005, 0.002]}, {"after_step": [9.0, 0.004, 0.001, 0.003]}]
    # calls after the warm-up: slowest 4, 5 and 3 ms, median 4 (the ranks' own medians are 2 and 3)
    assert allreduce_after_step.slowest_median_ms(ranks, "after_step", warmup=1) == pytest.approx(4.0)


@pytest.mark.parametrize("argv, says", [
    (["--ranks", "1"], "--ranks"),
    (["--repeats", "5", "--warmup", "5"], "--repeats"),
    (["--scenario", "nowhere.yaml"], "nowhere.yaml"),
])
def test_the_allreduce_benchmark_refuses_bad_arguments(allreduce_after_step, capsys, argv, says):
    with pytest.raises(SystemExit) as exit_info:
        allreduce_after_step.main(argv)
    assert exit_info.value.code == 2 and says in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("mpiexec") is None or importlib.util.find_spec("mpi4py") is None,
                    reason="needs mpiexec on PATH and mpi4py (pip install 'simdist[mpi]')")
def test_the_allreduce_benchmark_times_both_series_on_every_rank(allreduce_after_step, capsys):
    assert allreduce_after_step.main(["--ranks", "2", "--repeats", "4", "--warmup", "1"]) == 0
    out = capsys.readouterr().out
    assert "rank 0: back to back" in out and "rank 1: back to back" in out and "after a step" in out
    assert "slowest rank per call after a step, median:" in out and "waiting for the others" in out
