"""Summary figures and tables of a hand-built two-worker run, checked against hand arithmetic.

``make_result`` is also the fixture of test_results_dir, test_tracefile and test_plots.

The run (virtual time 10 s; ranks 0 and 1 are workers on nodes 0 and 1, rank 2 a server):

* rank 0: compute 0–2, comm 2–3, compute 3–5, comm 5–6, wait 6–7, async comm 3–4
  → compute 4 s, comm 2 s, idle 10 − 4 − 2 = 4 s
* rank 1: compute 0–3, comm 3–4, compute 4–7, comm 7–8 → compute 6 s, comm 2 s, idle 2 s
* rank 2 (server): compute 1–2 (not a worker: not in compute_fraction)
* updates (time, worker, step, staleness, batch): (3,0,1,0,32) (4,1,2,1,32) (6,0,3,1,32)
  (8,1,4,2,16) (9,0,5,0,32) (10,1,5,0,16) → 5 distinct steps, 160 samples
* evals: t=5 accuracies 0.5 (w0) and 0.6 (w1); t=10 0.8 and 0.9; target 0.55
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from simdist.metrics import (
    SUMMARY_KEYS,
    evals_table,
    links_table,
    round_sig,
    steps_table,
    summarize,
    workers_table,
)
from simdist.recorder import Recorder
from simdist.results import LinkStats, RankInfo, RunResult


def make_result(*, timing_only: bool = False, evals: bool = True, updates: bool = True,
                wall_time_s: float = 1.25, link_usage: bool = True) -> RunResult:
    rec = Recorder()
    for rank, kind, start, end in [
        (0, "compute", 0, 2), (0, "comm", 2, 3), (0, "compute", 3, 5), (0, "comm", 5, 6), (0, "wait", 6, 7),
        (1, "compute", 0, 3), (1, "comm", 3, 4), (1, "compute", 4, 7), (1, "comm", 7, 8),
        (2, "compute", 1, 2),
    ]:
        name = {"compute": "forward/backward", "comm": "allreduce", "wait": "recv"}[kind]
        rec.span(rank, kind, name, float(start), float(end), bytes=1024 if kind == "comm" else 0)
    rec.span(0, "comm", "iallreduce", 3.0, 4.0, blocking=False)
    if updates:
        rows = [(3, 0, 1, 0, 0, 32, 2.0), (4, 1, 2, 0, 1, 32, 1.8), (6, 0, 3, 2, 1, 32, 1.5),
                (8, 1, 4, 2, 2, 16, 1.2), (9, 0, 5, 4, 0, 32, 1.0), (10, 1, 5, 4, 0, 16, 1.1)]
        for i, (t, w, step, version, staleness, batch, loss) in enumerate(rows):
            extra = {"age_s": float(staleness)} if i % 2 == 0 else {}
            rec.update(time_s=float(t), worker=w, step=step, version=version, staleness=staleness,
                       batch_size=batch, loss=None if timing_only else loss, **extra)
    if evals and not timing_only:
        for t, step, w, loss, acc in [(5, 3, 0, 1.6, 0.5), (5, 3, 1, 1.5, 0.6),
                                      (10, 5, 0, 1.0, 0.8), (10, 5, 1, 0.9, 0.9)]:
            rec.evaluation(time_s=float(t), step=step, worker=w, test_loss=loss, test_accuracy=acc)
    rec.event("phase", time_s=0.0, rank=None, phase="warmup")
    return RunResult(
        scenario={"name": "tiny", "algorithm": {"name": "asgd"}, "workers": 2},
        platform={"nodes": 2, "link": "ib-hdr"},
        seed=7,
        algorithm="asgd",
        ranks=[RankInfo(0, 0, "cpu"), RankInfo(1, 1, "cpu"), RankInfo(2, 1, "cpu", role="server")],
        recorder=rec,
        links=[LinkStats("n0->n1", "ib-hdr", 1000.0, 0.5), LinkStats("n1->n0", "ib-hdr", 2000.0, 0.25)],
        virtual_time_s=10.0,
        wall_time_s=wall_time_s,
        status="completed",
        target_accuracy=0.55,
        epochs=1.5,
        timing_only=timing_only,
        link_usage=_link_usage() if link_usage else None,
    )


def _link_usage() -> dict:
    """Both links over ten 1 s bins: n0->n1 busy in bins 2-3 and 5-6, n1->n0 in bin 7 at half rate."""
    rows = [("n0->n1", 2, 250.0), ("n0->n1", 3, 250.0), ("n0->n1", 5, 250.0), ("n0->n1", 6, 250.0),
            ("n1->n0", 7, 2000.0)]
    return {"link": [r[0] for r in rows], "kind": ["ib-hdr"] * len(rows),
            "bandwidth_Bps": np.array([500.0, 500.0, 500.0, 500.0, 4000.0]),
            "start_s": np.array([float(r[1]) for r in rows]), "end_s": np.array([r[1] + 1.0 for r in rows]),
            "bytes": np.array([r[2] for r in rows]), "flow_s": np.array([0.5, 0.5, 0.5, 0.5, 1.0])}


def test_summary_keys_in_order():
    assert list(summarize(make_result())) == list(SUMMARY_KEYS)
    assert SUMMARY_KEYS[0] == "algorithm" and SUMMARY_KEYS[-1] == "status"


def test_summary_values_match_hand_computation():
    s = summarize(make_result())
    assert s["algorithm"] == "asgd"
    assert s["workers"] == 2
    assert s["virtual_time_s"] == 10.0
    assert s["steps"] == 5 and isinstance(s["steps"], int)
    assert s["samples"] == 160 and isinstance(s["samples"], int)
    assert s["epochs"] == 1.5
    assert s["throughput_samples_per_s"] == 16.0
    # worker 0: updates at 3, 6, 9 → 9/3 = 3; worker 1: 4, 8, 10 → 10/3
    assert s["mean_iteration_s"] == pytest.approx((3.0 + 10.0 / 3.0) / 2.0, rel=1e-11)
    assert s["final_test_accuracy"] == pytest.approx(0.85)
    assert s["best_test_accuracy"] == 0.9
    assert s["target_accuracy"] == 0.55
    assert s["time_to_accuracy_s"] == 5.0
    assert s["mean_staleness"] == pytest.approx(4.0 / 6.0, rel=1e-11)
    assert s["p95_staleness"] == pytest.approx(1.75)  # sorted 0,0,0,1,1,2 at index 4.75
    assert s["max_staleness"] == 2 and isinstance(s["max_staleness"], int)
    assert s["compute_fraction"] == pytest.approx((4.0 + 6.0) / (2 * 10.0))
    assert s["comm_bytes"] == 3000.0
    assert s["wall_time_s"] == 1.25
    assert s["status"] == "completed"


def test_summary_floats_are_rounded_to_12_significant_digits():
    s = summarize(make_result())
    assert s["mean_iteration_s"] == float(f"{19.0 / 6.0:.12g}")
    assert s["mean_staleness"] == float(f"{4.0 / 6.0:.12g}")
    assert round_sig(float("nan")) is None and round_sig(np.int64(3)) == 3 and round_sig(True) is True


def test_target_never_met_or_absent_gives_none():
    result = make_result()
    result.target_accuracy = 0.95
    assert summarize(result)["time_to_accuracy_s"] is None
    result.target_accuracy = None
    s = summarize(result)
    assert s["time_to_accuracy_s"] is None and s["target_accuracy"] is None


def test_timing_only_and_empty_runs_give_nulls_not_errors():
    s = summarize(make_result(timing_only=True))
    for key in ("final_test_accuracy", "best_test_accuracy", "time_to_accuracy_s"):
        assert s[key] is None
    assert s["steps"] == 5 and s["max_staleness"] == 2
    assert steps_table(make_result(timing_only=True))["loss"].isna().all()

    empty = summarize(make_result(updates=False, evals=False))
    assert empty["steps"] == 0 and empty["samples"] == 0
    for key in ("mean_iteration_s", "mean_staleness", "p95_staleness", "max_staleness", "final_test_accuracy"):
        assert empty[key] is None
    assert empty["throughput_samples_per_s"] == 0.0


def test_zero_time_run_has_no_rates():
    result = make_result(updates=False, evals=False)
    result.virtual_time_s = 0.0
    s = summarize(result)
    assert s["throughput_samples_per_s"] is None and s["compute_fraction"] is None


def test_steps_table_columns_and_extras():
    table = steps_table(make_result())
    assert list(table.columns) == ["time_s", "worker", "step", "version", "staleness", "batch_size", "loss", "age_s"]
    assert len(table) == 6
    assert table["age_s"].isna().sum() == 3
    assert table["batch_size"].sum() == 160


def test_workers_table_idle_is_total_minus_compute_minus_comm():
    table = workers_table(make_result()).set_index("worker")
    assert list(table.index) == [0, 1]  # the server rank is not a worker
    assert table.loc[0, "compute_s"] == 4.0 and table.loc[0, "comm_s"] == 2.0  # async comm not counted
    assert table.loc[1, "compute_s"] == 6.0 and table.loc[1, "comm_s"] == 2.0
    assert table.loc[0, "idle_s"] == 10.0 - 4.0 - 2.0  # the wait span counts as idle
    assert table.loc[1, "idle_s"] == 10.0 - 6.0 - 2.0
    assert table.loc[0, "samples"] == 96 and table.loc[1, "samples"] == 64
    assert table.loc[0, "steps"] == 3 and table.loc[1, "steps"] == 3


def test_evals_and_links_tables():
    evals = evals_table(make_result())
    assert list(evals.columns) == ["time_s", "step", "worker", "test_loss", "test_accuracy"]
    assert len(evals) == 4
    links = links_table(make_result())
    assert list(links.columns) == ["link", "kind", "bytes", "busy_s"]
    assert links["bytes"].sum() == 3000.0


def test_empty_inputs_give_empty_tables_with_columns():
    result = make_result(updates=False, evals=False)
    result.links = []
    result.recorder.spans.clear()
    assert list(steps_table(result).columns)[:7] == ["time_s", "worker", "step", "version", "staleness",
                                                     "batch_size", "loss"]
    assert steps_table(result).empty and evals_table(result).empty and links_table(result).empty
    workers = workers_table(result)
    assert list(workers.columns) == ["worker", "compute_s", "comm_s", "idle_s", "samples", "steps"]
    assert list(workers["idle_s"]) == [10.0, 10.0]
    result.ranks = []
    assert workers_table(result).empty


def test_summary_is_json_clean():
    s = summarize(make_result())
    for value in s.values():
        assert value is None or isinstance(value, (str, int, float))
        if isinstance(value, float):
            assert math.isfinite(value)
    assert isinstance(steps_table(make_result()), pd.DataFrame)
