"""Data loading: the ``data`` part of a step, serial or hidden behind loader workers (simdist.training.data_loading)."""

from __future__ import annotations

import math
import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import yaml

from simdist.cli import main
from simdist.ledger import PARTS, ledger_table
from simdist.metrics import spans_table
from simdist.real.runtime import CpuClock, MPIRuntime
from simdist.scenario import scenario_from_dict
from simdist.simulate import Simulation, simulate
from simdist.training.data_loading import PrefetchPipeline
from simdist.training.datasets import IMAGENET_DECODE_PER_IMAGE_S

from helpers import TINY_PROFILE
from test_lockstep_group import assert_same_results, replay_scenario, run_both


def scenario(data_loading=None, *, devices=2, node=None, timing_only=False, **changes) -> dict:
    """sync on ``devices`` CPU ranks (one core each), no noise, one epoch of 15 batches of 16."""
    data = {
        "platform": {"preset": "laptop-cpu", "node": {"devices": devices, **(node or {})}},
        "workload": {"model": {"name": "mlp", "hidden": [16]}, "timing_only": timing_only,
                     "dataset": {"name": "synthetic", "samples": 300 * devices, "features": 8, "classes": 3},
                     "batch_size": 16, "optimizer": {"name": "sgd", "lr": 0.05}},
        "algorithm": {"name": "sync"},
        "stop": {"epochs": 1},
        "compute": {"profiles": [TINY_PROFILE]},
        "outputs": {"plots": False, "trace": False},
        **changes,
    }
    if data_loading is not None:
        data["workload"]["data_loading"] = data_loading
    return data


def spans_of(result, rank: int = 0) -> pd.DataFrame:
    spans = spans_table(result)
    return spans[spans["rank"] == rank].sort_values("start_s", kind="stable").reset_index(drop=True)


def fb_and_data(result, rank: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    spans = spans_of(result, rank)
    return spans[spans["name"] == "forward/backward"].reset_index(drop=True), \
        spans[spans["name"] == "data"].reset_index(drop=True)


# -- the loader pipeline, by hand -------------------------------------------------------------------


def run_pipeline(workers: int, load_s: float, compute_s: float, batches: int) -> list[float]:
    """Waits of a rank that computes ``compute_s`` after each batch (batch of 1 sample costing ``load_s``)."""
    pipeline, now, waits = PrefetchPipeline(workers, 2, load_s), 0.0, []
    for _ in range(batches):
        waits.append(pipeline.wait_s(now, 1, 0))
        now += waits[-1] + compute_s
    return waits


def test_loading_is_hidden_when_a_batch_per_worker_fits_in_a_step():
    # 2 workers, 3 s a batch, 2 s a step: batches 0, 1 ready at 3, 2 and 3 at 6, 4 at 9 (asked when 0 was handed
    # over at 3; its worker free at 6), ... the rank asks at 0, 5, 7, 9, 11: only the first batch waits
    assert run_pipeline(2, 3.0, 2.0, 8) == [3.0] + [0.0] * 7


def test_loading_is_exposed_when_it_does_not():
    # 6 s a batch on 2 workers is 3 s a step against 2 s of compute: every other batch waits 2 s
    assert run_pipeline(2, 6.0, 2.0, 8) == [6.0, 0.0, 2.0, 0.0, 2.0, 0.0, 2.0, 0.0]


def test_prefetch_depth_limits_how_far_workers_run_ahead():
    # one worker, prefetch 1: batch k+1 is asked for only when batch k is handed over, so nothing overlaps
    pipeline, now, waits = PrefetchPipeline(1, 1, 1.0), 0.0, []
    for _ in range(4):
        waits.append(pipeline.wait_s(now, 3, 0))
        now += waits[-1] + 1.0
    assert waits == [3.0, 2.0, 2.0, 2.0]


def test_each_epoch_starts_a_new_iterator():
    pipeline = PrefetchPipeline(4, 2, 1.0)
    assert pipeline.wait_s(0.0, 2, 0) == 2.0
    assert pipeline.wait_s(10.0, 2, 0) == 0.0  # prefetched meanwhile
    assert pipeline.wait_s(20.0, 2, 1) == 2.0  # a new epoch: its first batch is loaded from scratch


# -- in the simulator ------------------------------------------------------------------------------


@pytest.mark.parametrize("lockstep", [False, True], ids=["per-rank", "cohort"])
def test_serial_loading_adds_batch_times_per_sample_before_each_forward_backward(lockstep):
    sim = Simulation(scenario_from_dict(scenario({"per_sample": "1ms"})), None, lockstep=lockstep)
    result = sim.execute()
    assert sim.in_lockstep == lockstep
    for rank in (0, 1):
        fb, data = fb_and_data(result, rank)
        assert len(fb) == len(data) == 15
        assert (data["end_s"] == fb["start_s"]).all()  # right before its forward/backward
        assert (data["end_s"] - data["start_s"]).tolist() == pytest.approx([16e-3] * 15, rel=1e-12)
        assert (spans_of(result, rank).query("name == 'data'")["kind"] == "compute").all()
    ledger = ledger_table(spans_table(result))
    assert ledger["data"].tolist() == pytest.approx([16e-3] * len(ledger), rel=1e-9)  # each step pays its own batch


def test_loader_workers_hide_loading_that_fits_in_a_step():
    # 2 workers, 16 x 25 us = 0.4 ms a batch, 0.2 ms per worker per batch: below a step (0.26 ms of compute alone)
    result = simulate(scenario_from_dict(scenario({"per_sample": "25us", "loader_workers": 2}, devices=1)))
    fb, data = fb_and_data(result)
    assert len(data) == 1 and data["start_s"][0] == 0.0 and data["end_s"][0] == pytest.approx(0.4e-3, rel=1e-12)
    assert spans_of(result).query("name == 'data'")["kind"].tolist() == ["wait"]  # the rank itself is idle
    assert fb["start_s"][0] == data["end_s"][0]


def test_loader_workers_expose_loading_that_does_not():
    # 16 x 125 us = 2 ms a batch, each worker loads every other batch: batches 2k and 2k+1 are ready at
    # (k + 1) x 2 ms, far behind the rank, so the even batches start exactly then and the odd ones do not wait
    result = simulate(scenario_from_dict(scenario({"per_sample": "125us", "loader_workers": 2}, devices=1)))
    fb, data = fb_and_data(result)
    assert fb["start_s"][0::2].tolist() == pytest.approx([2e-3 * (k + 1) for k in range(8)], rel=1e-12)
    assert len(data) == 8 and data["end_s"].tolist() == fb["start_s"][0::2].tolist()


def test_serial_loading_contends_for_shared_cores():
    # 2 ranks on 1 core load their batches at the same time: each at half a core
    result = simulate(scenario_from_dict(scenario({"per_sample": "1ms"}, node={"cores": 1})))
    for rank in (0, 1):
        _, data = fb_and_data(result, rank)
        assert data["end_s"][0] - data["start_s"][0] == pytest.approx(2 * 16e-3, rel=1e-9)


def test_cohort_records_what_per_rank_processes_record():
    for loading in ({"per_sample": "3us"}, {"per_sample": "40us", "loader_workers": 2, "prefetch_factor": 1}):
        data = replay_scenario(**{"workload.data_loading": loading})
        (_, per_rank), (cohort_sim, cohort) = run_both(data)
        assert cohort_sim.in_lockstep and any(s.name == "data" for s in cohort.recorder.spans)
        assert_same_results(per_rank, cohort)


def test_cohort_of_ranks_loading_at_different_speeds_equals_per_rank_processes():
    data = replay_scenario(**{"workload.data_loading": {"per_sample": "5us"}})
    data["platform"]["device_overrides"] = [{"ranks": [1, 2], "cpus": 2.0}]  # they load twice as fast
    (_, per_rank), (cohort_sim, cohort) = run_both(data)
    assert cohort_sim.in_lockstep
    assert_same_results(per_rank, cohort)


@pytest.mark.parametrize("loading", [None, {"per_sample": "20us", "loader_workers": 1}], ids=["default", "workers"])
def test_timing_only_charges_what_replay_charges(loading):
    parts = []
    for timing_only in (False, True):
        result = simulate(scenario_from_dict(scenario(loading, timing_only=timing_only)))
        parts.append(ledger_table(spans_table(result))[list(PARTS)].sum())
    assert parts[0]["data"] > 0
    assert parts[1].to_dict() == pytest.approx(parts[0].to_dict(), rel=1e-9, abs=1e-15)


# -- the default figures -----------------------------------------------------------------------------


def test_in_memory_data_costs_its_gather_estimated_from_memory_bandwidth():
    result = simulate(scenario_from_dict(scenario(stop={"steps": 2})))
    (figure,) = result.extra["data_loading"]["figures"]
    per_sample = (8 + 2) * 8 / 19e9  # 8 float32 features and an int64 label, read and written, at the cpu kind's rate
    assert figure["basis"] == "estimate" and figure["per_sample_core_s"] == pytest.approx(per_sample, rel=1e-12)
    _, data = fb_and_data(result)
    assert data["end_s"][0] - data["start_s"][0] == pytest.approx(16 * per_sample, rel=1e-9)


def test_measured_gather_is_preferred(tmp_path):
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump({"device": "host-cpu", "models": {"mlp": {"t0_s": 1e-4, "t1_s": 1e-5}},
                                       "ops": {"gather": 2e-9}}))
    result = simulate(scenario_from_dict(scenario(stop={"steps": 2}, compute={"profiles": [str(profile)]})))
    (figure,) = result.extra["data_loading"]["figures"]
    assert figure["basis"] == "measured" and figure["per_sample_core_s"] == pytest.approx(10 * 2e-9)


def test_a_shape_only_dataset_loads_at_its_published_rate():
    data = scenario(timing_only=True, stop={"steps": 2})
    data["workload"]["dataset"] = {"name": "imagenet-shape", "samples": 64, "input_shape": [8]}
    result = simulate(scenario_from_dict(data))
    (figure,) = result.extra["data_loading"]["figures"]
    assert figure["basis"] == "published" and "pytorch-image-models" in figure["source"]
    assert figure["per_sample_core_s"] == IMAGENET_DECODE_PER_IMAGE_S == pytest.approx(5.2e-3, rel=1e-3)
    _, data_spans = fb_and_data(result)
    assert data_spans["end_s"][0] - data_spans["start_s"][0] == pytest.approx(16 * 10 / 1923, rel=1e-12)


def test_a_declared_figure_and_its_source_reach_the_manifest(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario({"per_sample": "2ms", "loader_workers": 3, "source": "measured, run 7"},
                                            stop={"steps": 1})))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    manifest = yaml.safe_load((tmp_path / "out" / "manifest.json").read_text())
    loading = manifest["data_loading"]
    assert loading["loader_workers"] == 3 and loading["prefetch_factor"] == 2
    assert loading["figures"] == [{"per_sample_core_s": 2e-3, "basis": "declared", "source": "measured, run 7",
                                   "ranks": "0-1"}]


@pytest.mark.parametrize("field, value, phrase", [
    ("per_sample", "-2ms", "non-negative"),
    ("per_sample", math.inf, "finite"),
    ("per_sample", "2 parsecs", "expected a time"),
    ("per_sample", "2min", "at most 60 s"),
    ("loader_workers", -1, "greater than or equal to 0"),
    ("prefetch_factor", 0, "greater than or equal to 1"),
    ("workers", 2, "unknown"),
])
def test_bad_values_fail_in_one_line_naming_the_field(field, value, phrase, tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario({field: value}, stop={"steps": 1})))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "workload.data_loading" in lines[0] and phrase in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_an_absent_section_leaves_the_resolved_scenario_as_it_was():
    assert "data_loading" not in scenario_from_dict(scenario()).resolved()["workload"]


# -- the real runtime ------------------------------------------------------------------------------


def test_a_real_run_times_its_batch_fetch_as_data_right_before_forward_backward():
    spans = []
    world = SimpleNamespace(
        rank=0, size=1, now=time.perf_counter, progress=None, cpu=CpuClock(), epoch_end=None,
        fetch=lambda batch: (time.sleep(0.002), np.arange(batch.size))[1],
        gradient=lambda replica, tensors: (tensors * 2, float(tensors.sum())),
        span=lambda kind, name, start, end, **args: spans.append((kind, name, start, end)))
    result = MPIRuntime(world, 0).compute(None, SimpleNamespace(size=4)).value
    (data_kind, data, data_start, data_end), (fb_kind, fb, fb_start, _) = spans
    assert (data_kind, data, fb_kind, fb) == ("compute", "data", "compute", "forward/backward")
    assert data_end - data_start >= 0.002 and fb_start == data_end
    assert result.loss == 6.0
