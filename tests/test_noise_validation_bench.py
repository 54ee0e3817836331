"""benchmarks/noise_validation.py without MPI: the stealer's schedule, shares, error arithmetic, the report section."""

from __future__ import annotations

import pandas as pd
import pytest

from helpers import load_benchmark


@pytest.fixture(scope="module")
def nv():
    return load_benchmark("noise_validation")


def test_steal_budget_is_duty_times_period(nv):
    assert nv.steal_budget_s(0.3, 0.02) == pytest.approx(0.006)
    assert nv.steal_budget_s(0.5, 0.1) == pytest.approx(0.05)


@pytest.mark.parametrize("duty, period_s", [(0.0, 0.02), (0.51, 0.02), (-0.1, 0.02), (float("nan"), 0.02),
                                            (0.3, 0.0), (0.3, float("inf"))])
def test_bad_duty_or_period_is_refused(nv, duty, period_s):
    with pytest.raises(ValueError):
        nv.steal_budget_s(duty, period_s)


def test_next_period_follows_the_grid_without_catching_up(nv):
    # a burst that ended inside its period: the next period
    assert nv.next_period(10.0, 10.006, 0.02, 0) == 1
    # a burst cut at its period's end (now just inside period 1): period 1 at once, not period 2
    assert nv.next_period(10.0, 10.0201, 0.02, 0) == 1
    # kept off the core for whole periods: the period now lies in, the missed ones are not made up
    assert nv.next_period(10.0, 10.0705, 0.02, 0) == 3
    assert nv.next_period(10.0, 10.0705, 0.02, 5) == 6


def test_scaled_share_is_linear_in_the_duty(nv):
    assert nv.scaled_share(0.7, 0.3, 0.3) == pytest.approx(0.7)
    assert nv.scaled_share(0.7, 0.3, 0.15) == pytest.approx(0.85)
    assert nv.scaled_share(0.7, 0.3, 0.0) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        nv.scaled_share(1.2, 0.3, 0.15)


def test_measured_share_compares_the_same_work_on_both_ranks(nv):
    spans = pd.DataFrame({"rank": [0] * 4 + [1] * 4, "step": [0, 1, 2, 3] * 2,
                          "wall_s": [9.0, 9.0, 0.06, 0.06, 9.0, 9.0, 0.10, 0.08],
                          "cpu_s": [1.0, 1.0, 0.06, 0.06, 1.0, 1.0, 0.06, 0.06]})
    # rank 1 ran 0.12 s of CPU in 0.18 s of wall time, rank 0 all the time it took
    got = nv.measured_share(spans, disturbed=1, skip=2)  # the warm-up steps (9 s) are left out
    assert got["share"] == pytest.approx((0.12 / 0.18) / (0.12 / 0.12))
    assert got["wall_share"] == pytest.approx(0.06 / 0.09)
    with pytest.raises(ValueError):
        nv.measured_share(spans[spans["rank"] == 1], disturbed=1)
    with pytest.raises(ValueError):
        nv.measured_share(spans.assign(cpu_s=None), disturbed=1)


def test_disturbed_compute_separates_the_stealers_take_from_a_slow_core(nv):
    # rank 1 runs on 70 % of its core (wall = cpu / 0.7); one of its 5 steady steps costs 1.5x the CPU
    cpu1 = [9.0, 9.0, 0.06, 0.06, 0.06, 0.06, 0.09]
    spans = pd.DataFrame({"rank": [0] * 7 + [1] * 7, "step": list(range(7)) * 2,
                          "wall_s": [9.0, 9.0] + [0.06] * 5 + [c / 0.7 for c in cpu1],
                          "cpu_s": [9.0, 9.0] + [0.06] * 5 + cpu1})
    got = nv.disturbed_compute(spans, disturbed=1, skip=2)
    assert got["fb_share"] == pytest.approx(0.7)
    assert got["fb_cpu_median_ms"] == pytest.approx(60.0)
    assert got["fb_cpu_ms"] == pytest.approx(66.0)
    assert (got["cpu_slow"], got["cpu_slow_other"]) == (pytest.approx(0.2), pytest.approx(0.0))
    assert got["fb_cpu_other_median_ms"] == pytest.approx(60.0)
    assert nv.disturbed_compute(spans.assign(cpu_s=None), disturbed=1) == {}


def _table(measured, predicted):
    n = len(measured)
    zeros = [0.0] * n
    return pd.DataFrame({"worker": [0] * n, "iteration": list(range(1, n + 1)),
                         "measured_iteration_s": measured, "predicted_iteration_s": predicted,
                         **{f"{side}_{part}_s": zeros for side in ("measured", "predicted")
                            for part in ("compute", "comm", "wait")}})


def test_way_figures_errors_and_distribution(nv):
    # iteration 1 is warm-up and left out; then real 0.1 .. 0.5 s, predicted 10 % high everywhere
    real = [9.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    table = _table(real, [1.0] + [1.1 * x for x in real[1:]])
    got = nv.way_figures(table, [0.11, 0.22, 0.33, 0.44, 0.55])
    assert got["iterations"] == 5
    assert got["median_pct"] == pytest.approx(10.0)
    assert got["mean_iteration_pct"] == pytest.approx(10.0)
    assert (got["real_p50_ms"], got["sim_p50_ms"]) == (pytest.approx(300.0), pytest.approx(330.0))
    assert got["real_p90_ms"] == pytest.approx(460.0)  # linear interpolation between 0.4 and 0.5
    assert got["p50_pct"] == pytest.approx(10.0) and got["p90_step_pct"] == pytest.approx(10.0)


def test_error_floors(nv):
    # 1, 1, 2: the median is 1; |r - 1| / r = 0, 0, 0.5 -> median 0
    constant, independent = nv.error_floors([1.0, 1.0, 2.0])
    assert constant == pytest.approx(0.0)
    # ordered pairs (i != j): |1-1|/1 twice, |2-1|/1 twice, |1-2|/2 twice -> 0, 0, 50, 50, 100, 100 -> median 50
    assert independent == pytest.approx(50.0)
    assert nv.error_floors([3.0, 3.0, 3.0]) == (0.0, 0.0)
    with pytest.raises(ValueError):
        nv.error_floors([1.0])


def test_relative_pct_and_verdict(nv):
    assert nv.relative_pct(0.9, 1.0) == pytest.approx(-10.0)
    assert nv.relative_pct(1.0, 0.0) is None
    assert nv.verdict(9.99) == "within 10 %"
    assert nv.verdict(12.5) == "missed by 2.5 points"
    with pytest.raises(ValueError):
        nv.step_quantiles([])


DOC = ("# Title\n\nintro\n\n## First\n\nkeep me\n\n### Sub of first\n\nalso kept\n\n"
       "## Noise: calibrated on one real run, predicting another\n\nold body\n\n### Old sub\n\nold detail\n\n"
       "## Last\n\nkept too\n")


def test_replace_section_keeps_everything_else(nv):
    new = nv.replace_section(DOC, nv.SECTION, "new body\n\n### New sub\n\nnew detail")
    assert "old body" not in new and "old detail" not in new and "### Old sub" not in new
    assert new.startswith("# Title\n\nintro\n\n## First\n\nkeep me\n\n### Sub of first\n\nalso kept\n\n")
    assert new.endswith("## Noise: calibrated on one real run, predicting another\n\nnew body\n\n### New sub\n\n"
                        "new detail\n\n## Last\n\nkept too\n")
    assert nv.replace_section(new, nv.SECTION, "new body\n\n### New sub\n\nnew detail") == new  # idempotent


def test_replace_section_appends_when_absent_and_writes_a_file(nv, tmp_path):
    text = "# Title\n\n## Other\n\nbody"
    new = nv.replace_section(text, "Added", "fresh")
    assert new == "# Title\n\n## Other\n\nbody\n\n## Added\n\nfresh\n"
    path = tmp_path / "report.md"
    path.write_text(DOC, encoding="utf-8")
    nv.write_section(path, nv.SECTION, "written")
    written = path.read_text(encoding="utf-8")
    assert "written" in written and "old body" not in written and written.endswith("## Last\n\nkept too\n")
    assert not (tmp_path / "report.md.tmp").exists()


def test_configs_and_simulation_overrides(nv, tmp_path):
    a, b1, b2, b3, c = nv.configs(0.3, 0.15, 200)
    assert c.duty == 0.0 and nv.ways(c) == ("none",) and nv.ways(a) == nv.WAYS
    assert (a.algorithm, a.affinity, a.stealer_rank, a.workers) == ("sync", "0;1", 1, 2)
    assert (b1.algorithm, b1.affinity, b1.stealer_rank, b1.workers) == ("asgd", "1;0", 0, 1)
    assert (b2.steps, b3.duty) == (400, 0.15)
    profile, overlay = tmp_path / "p.yaml", tmp_path / "net.yaml"
    overlay.write_text("node: {}\n", encoding="utf-8")
    items = nv.sim_overrides(b1, profile, overlay, share=0.7, noise={"rank_sigma": 0.1, "source": "x"}, seed=3)
    assert items[0] == "platform.node.devices=2" and "workers=1" in items and "stop.steps=200" in items
    assert "platform.device_overrides=[{ranks: [0], cpus: 0.7}]" in items
    assert "compute.noise={rank_sigma: 0.1, source: x}" in items and items[-1] == "seed=3"
    assert "workload.timing_only=true" in items
    plain = nv.sim_overrides(a, profile, overlay)
    assert not any(i.startswith(("compute.noise", "platform.device_overrides", "seed=")) for i in plain)


def test_options(nv, capsys):
    args = nv.parse_args([])
    assert (args.duty, args.other_duty, args.period_ms, args.steps) == (0.3, 0.15, 20.0, 200)
    for argv in (["--duty", "0.7"], ["--other-duty", "0"], ["--steps", "5"], ["--period-ms", "0"]):
        with pytest.raises(SystemExit):
            nv.parse_args(argv)
    assert "error" in capsys.readouterr().err


def test_history_replaces_the_entry_of_the_same_run(nv, tmp_path):
    rows = [{"config": "B1", "way": way, "median_pct": m, "p90_step_pct": q}
            for way, m, q in (("none", 30.0, -40.0), ("share", 12.0, -10.0), ("share+noise", 11.0, 5.0))]
    path = tmp_path / "history.jsonl"
    nv.update_history(path, nv.history_entry("2026-01-02T10:00:00", rows))
    nv.update_history(path, nv.history_entry("2026-01-01T10:00:00", rows))
    rows[2]["median_pct"] = 9.0
    entries = nv.update_history(path, nv.history_entry("2026-01-02T10:00:00", rows))  # a rescore of that run
    assert [e["started"] for e in entries] == ["2026-01-01T10:00:00", "2026-01-02T10:00:00"]
    assert entries[1]["figures"]["B1/share+noise"] == [9.0, 5.0]
    table = nv._repeats(entries)
    assert "| 2026-01-02T10:00:00 | B1 | 30.0 / 12.0 / 9.0 | -10.0 / +5.0 |" in table
    assert nv._repeats(entries[:1]) == []


def test_forward_backwards_keep_whole_steps_at_the_workloads_batch(nv, tmp_path):
    def span(rank, ts, dur, batch):
        return {"ph": "X", "name": "forward/backward", "cat": "compute", "tid": rank, "pid": 0, "ts": ts, "dur": dur,
                "args": {"batch_size": batch, "cpu_s": dur * 1e-6}}

    events = [span(1, 0, 60_000, 2048), span(1, 70_000, 61_000, 2048),
              span(1, 140_000, 50_000, 1664),  # an epoch's last, partial batch: other work
              span(0, 0, 59_000, 2048),
              span(1, 200_000, 500, 2048)]  # cut off where the run stopped: ends with the trace
    (tmp_path / "trace.json").write_text(__import__("json").dumps({"traceEvents": events}), encoding="utf-8")
    got = nv.forward_backwards(tmp_path)
    assert got[got["rank"] == 1]["wall_s"].tolist() == pytest.approx([0.060, 0.061])
    assert got[got["rank"] == 1]["step"].tolist() == [0, 1]
    assert got[got["rank"] == 0]["wall_s"].tolist() == pytest.approx([0.059])
