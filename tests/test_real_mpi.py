"""Real MPI runs against their simulation (2 ranks, a few seconds each), and a real 3-ring of nnt.

These fail on a crash, a hang or a broken result directory, never on the size of the timing
error (a benchmark figure: benchmarks/validation_table.py). sync is calibrated ``isolated``,
asgd from a short pilot run, so both calibrations run end to end. For sync the real and the simulated
run must give the same loss at every step (same data, same math) to float tolerance.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from simdist.real.calibration import compute_cpu
from simdist.real.launch import mpi_available, run_real
from simdist.validation import validate
from simdist.results import load_result_dir
from simdist.tracefile import ASYNC_TID_OFFSET, span_events

pytestmark = pytest.mark.skipif(mpi_available() is not None, reason=f"no MPI here: {mpi_available()}")

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "quickstart.yaml"
COMMON = ["stop.steps=15", "stop.epochs=5", "evaluation.max_samples=100"]


def _check(out: Path, summary: dict) -> pd.DataFrame:
    for part in ("real", "sim"):
        loaded = load_result_dir(out / part)
        assert len(loaded.steps) > 0
        assert (out / part / "trace.json").is_file()
    table = pd.read_csv(out / "validation.csv")
    assert {"worker", "iteration", "measured_iteration_s", "predicted_iteration_s", "measured_compute_s",
            "predicted_compute_s", "measured_comm_s", "measured_wait_s", "iteration_error_pct"} <= set(table.columns)
    assert summary["median_abs_iteration_error_pct"] is not None
    assert summary["iterations_compared"] > 0
    assert (out / "real" / "calibration.json").is_file() and (out / "calibration" / "host-cpu.yaml").is_file()
    assert summary["calibration"]["forward_backward"]["t1_s"] > 0 and summary["replay"] is not None
    return table


def test_sync_two_ranks_real_matches_simulated_losses(tmp_path):
    stages = []
    summary = validate(SCENARIO, 2, tmp_path, overrides=COMMON, calibrate="isolated", repeat_real=True,
                       timeout_s=120, plots=False, progress=lambda done, total, stage: stages.append((done, total, stage)))
    table = _check(tmp_path, summary)
    # no pilot with isolated calibration: the run, its repeat, the simulation and its replay, then done
    assert stages == [(0, 4, "real run"), (1, 4, "real run again"), (2, 4, "simulation"), (3, 4, "replay simulation"),
                      (4, 4, "done")]
    assert summary["calibration"]["source"] == "isolated" and not (tmp_path / "pilot").exists()
    calibration = summary["calibration"]
    assert "host_cpu_per_step_s" in calibration["from_compared_run"]  # labelled as such
    charged = calibration["other_threads_cpu_per_step_s"] if calibration["other_threads_cpu_charged"] else 0.0
    assert calibration["profile_t0_s"] == pytest.approx(calibration["forward_backward"]["t0_s"]
                                                        + calibration["host_cpu_per_step_s"] + charged)
    assert summary["step_budget"] == 15
    same = table[table["measured_step"] == table["predicted_step"]]
    assert len(same) == len(table)
    assert (same["measured_loss"] - same["predicted_loss"]).abs().max() < 1e-4
    assert summary["measured_mean_staleness"] == 0
    # converting and posting each step's allreduce is the rank's CPU time in communication
    ledger = pd.read_csv(tmp_path / "real" / "ledger.csv").query("step < 15")  # a forward/backward begun at the
    assert len(ledger) == 2 * 15 and (ledger["comm_cpu"] > 0).all()  # stop can open a 16th step, without allreduce
    # the second real run: the same steps and losses (same math), its timing compared with the first's
    again = summary["real_again"]
    assert len(load_result_dir(tmp_path / "real-again").steps) == len(load_result_dir(tmp_path / "real").steps)
    twice = pd.read_csv(tmp_path / "validation_real_again.csv")
    assert (twice["measured_loss"] - twice["predicted_loss"]).abs().max() < 1e-6
    # the two comparisons pair iterations of different runs: on a busy host the simulated run's last
    # iteration or a real one timed at zero can be in one and not the other, never more than a couple
    assert abs(again["iterations_compared"] - summary["iterations_compared"]) <= 2
    assert again["level_ratio"] > 0
    assert 0 <= again["level_matched_median_abs_iteration_difference_pct"] \
        <= again["level_matched_p90_abs_iteration_difference_pct"]


def test_asgd_two_ranks_real_vs_simulated(tmp_path):
    summary = validate(SCENARIO, 2, tmp_path, overrides=COMMON + ["workers=1", "algorithm={name: asgd}"],
                       calibrate="pilot", pilot_iterations=6, timeout_s=120, plots=False)
    _check(tmp_path, summary)
    assert summary["algorithm"] == "asgd"
    calibration = summary["calibration"]
    assert calibration["source"] == "pilot" and "from_compared_run" not in calibration
    assert calibration["pilot"]["steps"] == 6 and len(load_result_dir(tmp_path / "pilot").steps) > 0
    assert calibration["pilot_after"]["steps"] == 6 and len(load_result_dir(tmp_path / "pilot-after").steps) > 0
    used = calibration["pilots_used"]  # a pilot the host changed speed in is left out; at least one is kept
    assert 1 <= len(used) <= 2 and set(used) <= {"pilot", "pilot-after"}
    assert len(calibration["pilot_speed_scale"]) == len(used) and all(s > 0 for s in calibration["pilot_speed_scale"])
    assert len(calibration["forward_backward"].get("per_pilot_level_cpu_s", [0])) == len(used)
    assert calibration["link"]["from"] == "pilot messages" and calibration["server_cpu_per_message_s"] > 0
    assert summary["measured_mean_staleness"] is not None and summary["predicted_mean_staleness"] is not None
    assert "real_again" not in summary and not (tmp_path / "real-again").exists()  # only when asked for
    # every send call is the sender's CPU time in communication (comm_cpu) as well as a transit span
    spans = span_events(tmp_path / "real")
    sends = [(e["tid"] - ASYNC_TID_OFFSET, e["ts"], e["dur"]) for e in spans if e["name"] == "send"]
    overheads = {(e["tid"], e["ts"], e["dur"]) for e in spans if e["name"] == "message overhead"}
    assert sends and set(sends) <= overheads
    worker = pd.read_csv(tmp_path / "real" / "ledger.csv").query("rank == 0")
    assert (worker[worker["step"] < worker["step"].max()]["comm_cpu"] > 0).all()  # its last step may stop unpushed


def test_nnt_three_ranks_times_its_epoch_sync_evaluations_as_compute(tmp_path):
    out = run_real(SCENARIO, 3, tmp_path, overrides=["platform.node.devices=3", "algorithm={name: nnt}",
                                                     "stop.epochs=2", "evaluation.max_samples=100"],
                   timeout_s=120, plots=False)
    evaluations = [e for e in span_events(out) if e["name"] == "nnt evaluation"]
    assert sorted(e["tid"] for e in evaluations) == [0, 0, 1, 1, 2, 2]  # every worker at both epoch ends
    assert all(e["cat"] == "compute" and e["args"]["samples"] == 100 and e["args"]["inference_cpu_s"] > 0
               for e in evaluations)
    syncs = pd.read_csv(out / "events.csv").query("kind == 'nnt_sync'")
    assert len(syncs) == 6 and syncs["validation_accuracy"].notna().all()
    assert len(compute_cpu(out)) == len(load_result_dir(out).steps.query("source == 'own'"))  # fits see fwd/bwd only
    # taking in a neighbour's gradient that has arrived (a poll) is CPU time in communication too
    spans = span_events(out)
    for rank in range(3):
        sends = sum(1 for e in spans if e["name"] == "send" and e["tid"] == ASYNC_TID_OFFSET + rank)
        overheads = sum(1 for e in spans if e["name"] == "message overhead" and e["tid"] == rank)
        applied = len(load_result_dir(out).steps.query(f"worker == {rank} and source != 'own'"))
        assert sends > 0 and applied > 0 and overheads >= sends + applied  # and one per collective call


def test_a_real_run_validates_and_checkpoints_at_epoch_ends_under_the_simulator_s_names(tmp_path):
    out = run_real(SCENARIO, 2, tmp_path, overrides=["platform.node.devices=2", "stop.epochs=2", "stop.steps=null",
                                                     "workload.validation={every_epochs: 1, samples: 100}",
                                                     "workload.checkpoint={every_epochs: 2}"],
                   timeout_s=120, plots=False)
    spans = [e for e in span_events(out) if e["name"] in ("eval: validation pass", "checkpoint write")]
    validations = sorted(e["tid"] for e in spans if e["name"] == "eval: validation pass")
    assert validations == [0, 0, 1, 1]  # every worker, after each of its 2 epochs (the last one at its end)
    (checkpoint,) = [e for e in spans if e["name"] == "checkpoint write"]  # worker 0, after epoch 2 only
    assert checkpoint["tid"] == 0 and checkpoint["cat"] == "compute" and checkpoint["dur"] > 0
    ledger = pd.read_csv(out / "ledger.csv")
    assert (ledger.groupby("rank")["eval"].apply(lambda col: int((col > 0).sum())) == 2).all()
    assert (ledger["checkpoint"] > 0).sum() == 1 and ledger.loc[ledger["checkpoint"] > 0, "rank"].item() == 0
