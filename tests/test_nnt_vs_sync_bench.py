"""The NNT-vs-sync benchmark's pure functions: who is faster, the ordering, the verdict against
the paper, the ledger means and the report, on tiny hand-made inputs (no simulation)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from simdist.ledger import LEDGER_COLUMNS

from helpers import load_benchmark

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "nnt_vs_sync.py"


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("nnt_vs_sync")


def test_faster_is_level_within_the_tolerance_of_the_slower_epoch(bench):
    assert bench.faster(10.0, 10.9, tolerance=0.1) == "level"  # 0.9 <= 0.1 * 10.9
    assert bench.faster(9.0, 10.0, tolerance=0.1) == "level"  # exactly 10% of the slower
    assert bench.faster(8.9, 10.0, tolerance=0.1) == "nnt"
    assert bench.faster(10.0, 8.9, tolerance=0.1) == "sync"
    assert bench.faster(10.0, 8.9, tolerance=0.2) == "level"


def test_ordering_fastest_first_ties_by_name(bench):
    assert bench.ordering({"nnt": 3.0, "sync": 1.0, "asgd": 2.0}) == ["sync", "asgd", "nnt"]
    assert bench.ordering({"sync": 1.0, "nnt": 1.0}) == ["nnt", "sync"]


def test_verdict_rows_compare_with_the_paper_per_batch(bench):
    epochs = {32: {"nnt": 10.0, "sync": 10.5}, 128: {"nnt": 6.0, "sync": 8.0}, 1024: {"nnt": 9.0, "sync": 5.0},
              64: {"nnt": 1.0, "sync": 2.0}}
    rows = {r["batch"]: r for r in bench.verdict_rows(epochs, {32: "level", 128: "sync", 1024: "sync"}, 0.1)}
    assert [b for b in rows] == [32, 64, 128, 1024]
    assert rows[32]["simulated"] == "level" and rows[32]["agrees"] is True
    assert rows[128]["simulated"] == "nnt" and rows[128]["agrees"] is False
    assert rows[1024]["simulated"] == "sync" and rows[1024]["agrees"] is True
    assert rows[1024]["ratio"] == pytest.approx(1.8)
    assert rows[64]["paper"] is None and rows[64]["agrees"] is None


def test_the_papers_ordering_is_as_quoted(bench):
    assert bench.PAPER_FASTER == {32: "level", 128: "sync", 1024: "sync"}
    assert "1024" in bench.PAPER_QUOTE and "128" in bench.PAPER_QUOTE


def _ledger(rows):
    """A ledger table as simdist.ledger writes it, zeros where a row says nothing."""
    return pd.DataFrame([{**{c: 0.0 for c in LEDGER_COLUMNS}, **row} for row in rows], columns=list(LEDGER_COLUMNS))


def test_mean_parts_sum_each_ranks_steps_then_average_over_ranks(bench):
    ledger = _ledger([{"rank": 0, "step": 0, "forward_backward": 1.0, "eval": 0.5},
                      {"rank": 0, "step": 1, "forward_backward": 1.0},
                      {"rank": 1, "step": 0, "forward_backward": 3.0, "comm_wire": 2.0},
                      {"rank": 2, "step": 0, "update": 7.0}])  # rank 2: not asked for
    parts = bench.mean_parts(ledger, [0, 1])
    assert parts["forward_backward"] == pytest.approx(2.5)  # (2 + 3) / 2
    assert parts["eval"] == pytest.approx(0.25) and parts["comm_wire"] == pytest.approx(1.0)
    assert parts["update"] == 0.0
    assert set(parts) == set(bench.LEDGER_PARTS)
    assert bench.mean_parts(ledger, [0, 5])["forward_backward"] == pytest.approx(1.0)  # a rank with no rows: zeros


def test_part_differences_largest_first_and_only_what_differs(bench):
    nnt = {"eval": 5.0, "comm_wire": 0.3, "update": 0.2, "forward_backward": 4.0}
    sync = {"eval": 0.0, "comm_wire": 1.8, "update": 0.1, "forward_backward": 4.0}
    assert bench.part_differences(nnt, sync, top=2) == [("eval", 5.0), ("comm_wire", pytest.approx(-1.5))]
    assert all(part != "forward_backward" for part, _ in bench.part_differences(nnt, sync, top=9))


def test_the_parameter_server_gets_a_node_of_its_own(bench):
    assert bench.point_overrides("nnt", 32) == ["algorithm=nnt", "workload.batch_size=32"]
    assert bench.point_overrides("asgd", 128, ["x=1"]) == ["algorithm=asgd", "workload.batch_size=128", "x=1",
                                                          "platform.nodes=17"]


def _point(bench, algorithm, batch, epoch_s, eval_s=0.0, server=None):
    workers = {part: 0.0 for part in bench.LEDGER_PARTS}
    workers.update(forward_backward=epoch_s - eval_s, eval=eval_s)
    return {"algorithm": algorithm, "batch": batch, "epoch_s": epoch_s, "status": "completed", "workers": workers,
            "server": server, "param_count": 11_173_962, "wall_s": 0.0,
            "compute": {"t0_s": 0.0149, "t1_s": 0.0016, "source": "/x/xc-skylake-resnet18.yaml"}}


def test_report_states_ordering_verdict_and_ledger(bench, tmp_path):
    server = {part: 0.0 for part in bench.LEDGER_PARTS}
    results = [_point(bench, "nnt", 128, 11.0, eval_s=5.0), _point(bench, "sync", 128, 7.5),
               _point(bench, "asgd", 128, 26.0, server=server)]
    report = bench.render_report(results, tmp_path / "s.yaml", tolerance=0.1)
    assert "| 128 | 11.000 | 7.500 | 26.000 | sync < nnt < asgd |" in report
    assert "| 128 | 1.467 | sync | sync | yes |" in report
    assert "comes out at every batch it reports" in report
    assert "NNT's epoch less it is 6.000 s, against sync's 7.500 s" in report
    assert "| 128 | asgd | server |" in report and "11,173,962 parameters" in report
    flipped = [_point(bench, "nnt", 128, 5.0), _point(bench, "sync", 128, 7.5), _point(bench, "asgd", 128, 26.0)]
    assert "differs from the paper's at batch 128" in bench.render_report(flipped, tmp_path / "s.yaml")


def test_the_scenarios_model_is_the_cifar_resnet18_its_profile_is_for():
    """ResNet-18 with the CIFAR stem (pytorch-cifar's ResNet18: 11,173,962 parameters with 10 classes)
    on CIFAR-10's sizes, the model the xc-skylake ResNet-18 profile is written for."""
    import yaml

    from simdist.training.resnet import ResNetConfig, resnet18

    root = SCRIPT.parents[1]
    workload = yaml.safe_load((root / "scenarios" / "nnt_paper_cpu_cluster.yaml").read_text())["workload"]
    options, dataset = dict(workload["model"]), workload["dataset"]
    assert options.pop("name") == "resnet18" and options == {"stem": "cifar"}
    assert (dataset["samples"], dataset["test_samples"], dataset["input_shape"]) == (50_000, 10_000, [3, 32, 32])
    model = resnet18(tuple(dataset["input_shape"]), dataset["classes"], ResNetConfig(**options))
    assert sum(p.numel() for p in model.parameters()) == 11_173_962
    profile = yaml.safe_load((root / "calibration" / "profiles" / "xc-skylake-resnet18.yaml").read_text())
    assert profile["device"] == "xc-skylake" and "resnet18" in profile["models"]
