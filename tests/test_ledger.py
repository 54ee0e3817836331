"""The time ledger: steps cut into named parts that add up, for every algorithm."""

from __future__ import annotations

import pandas as pd
import pytest

from simdist.algorithms import ALGORITHMS
from simdist.errors import InputError
from simdist.ledger import LEDGER_COLUMNS, PARTS, ledger_table, part_of, work_span_name
from simdist.metrics import spans_table
from simdist.simulate import simulate

from test_conformance import tiny_scenario

# the parts each algorithm's workers must be charged for (servers: ``update``) in a simulation
CHARGED = {
    "sync": {"data", "forward_backward", "comm_wire", "pack", "unpack", "update"},
    "asgd": {"data", "forward_backward", "comm_wire", "pack", "unpack"},
    "nsoftsync": {"data", "forward_backward", "comm_wire", "pack", "unpack"},
    "dbs": {"data", "forward_backward", "comm_wire", "pack", "unpack"},
    "daso": {"data", "forward_backward", "comm_wire", "pack", "unpack", "update"},
    "dcs3gd": {"data", "forward_backward", "comm_wire", "update"},
    "nnt": {"data", "forward_backward", "comm_wire", "pack", "update", "eval"},
}
SERVER_ALGORITHMS = {"asgd", "nsoftsync", "dbs"}


def _spans(rows):
    return pd.DataFrame(rows, columns=["rank", "kind", "name", "start_s", "end_s", "blocking"])


def test_parts_follow_kinds_and_names():
    assert part_of("compute", "forward/backward") == "forward_backward"
    assert part_of("comm", "message overhead") == "comm_cpu"
    assert part_of("comm", "allreduce") == "comm_wire"
    assert part_of("wait", "recv") == "wait"
    assert part_of("compute", "apply") == "update"
    assert part_of("compute", "nnt evaluation") == "eval"
    assert part_of("compute", "pack gradient") == "pack"
    assert part_of("compute", "unpack: weights") == "unpack"
    assert part_of("compute", "checkpoint write") == "checkpoint"


def test_an_algorithm_s_work_names_its_part_or_is_refused():
    assert work_span_name("flatten", "pack") == "pack: flatten"
    assert work_span_name("pack gradient", "pack") == "pack gradient"
    assert work_span_name("apply", None) == "apply"
    with pytest.raises(InputError, match="ledger part 'packing'.*one of: data, pack, unpack"):
        work_span_name("flatten", "packing")


def test_a_step_runs_from_one_forward_backward_to_the_next_and_uncovered_time_is_wait():
    ledger = ledger_table(_spans([
        (0, "comm", "broadcast", 0.0, 0.5, True),           # start-up: step 0
        (0, "compute", "forward/backward", 1.0, 3.0, True),
        (0, "wait", "allreduce", 3.0, 3.5, True),
        (0, "comm", "allreduce", 3.5, 4.0, True),
        (0, "comm", "allreduce", 3.2, 4.5, False),          # non-blocking: overlaps, not a part
        (0, "compute", "apply", 4.0, 4.25, True),
        (0, "comm", "message overhead", 4.75, 5.0, True),
        (0, "compute", "forward/backward", 5.0, 7.0, True),
        (0, "comm", "allreduce", 7.0, 8.0, True),
    ]))
    assert list(ledger.columns) == list(LEDGER_COLUMNS)
    first, second = ledger.to_dict("records")
    assert (first["start_s"], first["step_s"], second["start_s"], second["step_s"]) == (0.0, 5.0, 5.0, 3.0)
    assert first["forward_backward"] == 2.0 and first["comm_wire"] == 0.5 + 0.5 and first["update"] == 0.25
    assert first["comm_cpu"] == 0.25 and first["wait"] == 0.5 + 0.5 + 0.5  # 0.5-1.0 and 4.25-4.75 uncovered
    assert second["forward_backward"] == 2.0 and second["comm_wire"] == 1.0 and second["wait"] == 0.0


def test_a_server_s_steps_are_its_updates():
    ledger = ledger_table(_spans([
        (3, "wait", "recv", 0.0, 1.0, True),
        (3, "compute", "apply", 1.0, 1.5, True),
        (3, "wait", "recv", 1.5, 2.0, True),
        (3, "compute", "apply", 2.0, 2.5, True),
    ]))
    assert ledger["step_s"].tolist() == [2.0, 0.5] and ledger["update"].tolist() == [0.5, 0.5]


def test_a_simulated_server_s_turns_between_requests_do_not_open_steps():
    # a real run has no span for the runtime's turn (it is uncovered time there): a server's step is one update
    # in both runtimes, so the two ledgers compare step for step
    ledger = ledger_table(_spans([
        (3, "compute", "runtime call", 0.0, 0.01, True),
        (3, "compute", "apply", 0.01, 0.5, True),
        (3, "compute", "runtime call", 0.5, 0.51, True),
        (3, "wait", "recv", 0.51, 1.0, True),
        (3, "compute", "runtime call", 1.0, 1.01, True),
        (3, "compute", "apply", 1.01, 1.5, True),
        (3, "compute", "runtime call", 1.5, 1.51, True),
    ]))
    assert ledger["step_s"].tolist() == pytest.approx([1.01, 0.5])
    assert ledger["update"].tolist() == pytest.approx([0.52, 0.5])  # the turns around the first apply included


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS.names()))
def test_every_algorithm_s_steps_add_up_and_charge_their_parts(algorithm):
    result = simulate(tiny_scenario(algorithm))
    ledger = ledger_table(spans_table(result))
    parts = ledger[list(PARTS)].sum(axis=1)
    assert (parts - ledger["step_s"]).abs().max() < 1e-12 * max(1.0, ledger["step_s"].max())
    workers = ledger[ledger["rank"].isin(result.workers)]
    charged = {part for part in PARTS if workers[part].sum() > 0}
    assert CHARGED[algorithm] <= charged, f"{algorithm} charges nothing for {CHARGED[algorithm] - charged}"
    assert workers.groupby("rank").size().min() >= 2
    if algorithm in SERVER_ALGORITHMS:
        servers = ledger[~ledger["rank"].isin(result.workers)]
        assert servers["update"].sum() > 0


def test_a_run_writes_its_ledger(tmp_path):
    from simdist.results import write_result_dir

    result = simulate(tiny_scenario("sync"))
    write_result_dir(result, tmp_path / "out", plots=False)
    ledger = pd.read_csv(tmp_path / "out" / "ledger.csv")
    assert list(ledger.columns) == list(LEDGER_COLUMNS)
    assert sorted(ledger["rank"].unique()) == sorted(result.workers)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS.names()))
def test_timing_only_charges_what_replay_charges(algorithm):
    ledgers = []
    for timing_only in (False, True):
        scenario = tiny_scenario(algorithm)
        scenario = scenario.model_copy(update={"workload": scenario.workload.model_copy(
            update={"timing_only": timing_only})})
        ledgers.append(ledger_table(spans_table(simulate(scenario)))[list(PARTS)].sum())
    replay, timing = ledgers
    assert timing.to_dict() == pytest.approx(replay.to_dict(), rel=1e-9, abs=1e-15)


def shape_only_scenario(algorithm: dict, **workload):
    from simdist.scenario import scenario_from_dict

    return scenario_from_dict({
        "platform": {"preset": "laptop-cpu", "node": {"devices": 3}},
        "workload": {"model": {"name": "mlp", "hidden": [16]}, "timing_only": True,
                     "dataset": {"name": "imagenet-shape", "samples": 96, "input_shape": [8], "test_samples": 500},
                     **workload},
        "algorithm": algorithm, "stop": {"epochs": 1},
        "compute": {"profiles": [str(__import__("pathlib").Path(__file__).parent / "data" / "tiny_profile.yaml")]}})


def test_a_shape_only_dataset_declares_its_held_out_sets_and_pays_for_them():
    """nnt chooses its best worker on the validation split (10 % of 96 training samples by default:
    10); a job's validation pass without a split reads the declared test set (500 samples, each worker
    ceil(500 / 3) of them, loaded and forwarded)."""
    nnt = simulate(shape_only_scenario({"name": "nnt", "topology": "ring"}))
    evaluations = [s for s in nnt.recorder.spans if s.name == "nnt evaluation"]
    assert len(evaluations) == 3 and all(s.duration_s > 0 for s in evaluations)
    assert evaluations[0].duration_s == pytest.approx(simulate_forward_s(nnt, 10), rel=1e-9)
    def validation_s(samples):
        sync = simulate(shape_only_scenario({"name": "sync"}, validation={"samples": samples}))
        passes = [s.duration_s for s in sync.recorder.spans if s.name == "eval: validation pass"]
        assert len(passes) == 3  # every worker, once
        return passes[0]

    assert validation_s(None) == validation_s(500) > validation_s(250)


def simulate_forward_s(result, samples: int) -> float:
    """A forward pass over ``samples`` under the run's profile: a third of a forward/backward's per-sample
    part plus its share of the fixed part (simdist.platform.compute, PRODUCTS_PER_LAYER)."""
    profile = result.extra["compute_profiles"]["host-cpu"]
    return (profile["t0_s"] + profile["t1_s"] * samples) / 3


def test_ledgers_compare_part_by_part_leaving_out_the_first_step():
    from simdist.ledger import compare_ledgers

    def ledger(rows):
        frame = pd.DataFrame(0.0, index=range(len(rows)), columns=list(LEDGER_COLUMNS))
        for i, (rank, step, fb, comm) in enumerate(rows):
            frame.loc[i, ["rank", "step", "forward_backward", "comm_wire", "step_s"]] = [rank, step, fb, comm, fb + comm]
        return frame

    real = ledger([(0, 0, 9.0, 9.0), (0, 1, 2.0, 1.0), (0, 2, 4.0, 1.0), (5, 1, 7.0, 7.0)])
    sim = ledger([(0, 0, 1.0, 1.0), (0, 1, 3.0, 0.5), (0, 2, 3.0, 0.5)])
    table = compare_ledgers(real, sim, [0]).set_index("part")
    assert table.loc["forward_backward", "measured_s"] == 3.0 and table.loc["forward_backward", "predicted_s"] == 3.0
    assert table.loc["comm_wire", "error_pct"] == pytest.approx(-50.0)
    assert table.loc["step", "measured_s"] == 4.0 and table.loc["comm_wire", "share_pct"] == pytest.approx(25.0)
    assert table.loc["update", "error_pct"] is None or pd.isna(table.loc["update", "error_pct"])


def test_validate_writes_the_ledger_comparison(tmp_path):
    from simdist.validation.run import _compared
    from simdist.results import write_result_dir

    dirs = []
    for name in ("real", "sim"):
        dirs.append(write_result_dir(simulate(tiny_scenario("sync")), tmp_path / name, plots=False))
    summary = _compared(dirs[0], dirs[1], tmp_path / "validation.csv")
    table = pd.read_csv(tmp_path / "validation_ledger.csv")
    assert list(table.columns) == ["part", "measured_s", "predicted_s", "error_pct", "share_pct"]
    step = table[table["part"] == "step"].iloc[0]
    assert step["measured_s"] == pytest.approx(step["predicted_s"]) and step["error_pct"] == pytest.approx(0.0)
    assert {row["part"] for row in summary["ledger"]} >= {"data", "forward_backward", "comm_wire", "step"}
