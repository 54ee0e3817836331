"""The noise-ablation benchmark's pure parts: effect table, configurations, saving arithmetic, report."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from simdist.errors import InputError
from simdist.scenario import load_scenario

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "noise_ablation.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("noise_ablation", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def _effects(bench):
    a = bench.Effect("a", "", "", on={"*": ("x=1",), "daso": ("d=on",)}, off={"*": ("x=0",)})
    b = bench.Effect("b", "", "", off={"sync": ("s=off",)})
    return a, b


def test_effect_overrides_join_every_family_and_the_own_one(bench):
    a, b = _effects(bench)
    assert a.overrides("daso", True) == ("x=1", "d=on")
    assert a.overrides("sync", True) == ("x=1",)
    assert a.overrides("daso", False) == ("x=0",)
    assert b.overrides("sync", False) == ("s=off",) and b.overrides("daso", False) == () == b.overrides("sync", True)


def test_states_are_all_on_each_off_alone_and_all_off(bench):
    states = bench.ablation_states(["a", "b"])
    assert states == [("all on", {"a": True, "b": True}), ("without a", {"a": False, "b": True}),
                      ("without b", {"a": True, "b": False}), ("only a", {"a": True, "b": False}),
                      ("only b", {"a": False, "b": True}), ("all off", {"a": False, "b": False})]


def test_point_overrides_apply_only_the_effects_in_the_state(bench):
    a, b = _effects(bench)
    variant = bench.Variant("v", "daso", ("algorithm.B=4",), "")
    got = bench.point_overrides(128, variant, {"a": True}, [a, b], epochs=3, seed=7)
    assert got == ["platform.nodes=32", "stop.epochs=3", "seed=7", "algorithm.B=4", "x=1", "d=on"]
    sync = bench.Variant("s", "sync", (), "")
    assert bench.point_overrides(8, sync, {"a": False, "b": False}, [a, b], 1, 0)[-2:] == ["x=0", "s=off"]
    with pytest.raises(ValueError):
        bench.point_overrides(30, variant, {}, [a], 1, 0)


def test_bs_grid_has_s_0_1_and_half_b_without_repeats(bench):
    assert bench.bs_grid([1, 2, 4, 16]) == [(1, 0), (1, 1), (2, 0), (2, 1), (4, 0), (4, 1), (4, 2),
                                           (16, 0), (16, 1), (16, 8)]


def test_saving_mix_and_contributions_arithmetic(bench):
    assert bench.saving_pct(20.0, 15.0) == pytest.approx(25.0)
    assert bench.saving_pct(10.0, 11.0) == pytest.approx(-10.0)
    assert bench.phase_mix_s(blocking_s=9.0, cycling_s=0.0) == pytest.approx(9.0 * 8 / 90)
    savings = {"all on": 20.0, "without a": 12.0, "without b": 15.0, "only a": 4.0, "only b": 2.5, "all off": 1.0}
    got = bench.contributions(savings, ["a", "b"])
    assert got == pytest.approx({"a": 8.0, "b": 5.0, "interaction": 20.0 - 1.0 - 13.0})
    assert bench.alone(savings, ["a", "b"]) == pytest.approx({"a": 3.0, "b": 1.5, "interaction": 19.0 - 4.5})


def test_monotone_check_and_verdict(bench):
    assert bench.non_increasing([3.0, 2.0, 2.0, 1.0]) and not bench.non_increasing([3.0, 2.0, 2.5])
    assert bench.verdict(10.0) == "below the published range by 5.0 points"
    assert bench.verdict(25.0) == "within the published range"
    assert bench.verdict(40.0) == "above the published range by 5.0 points"


def test_availability_reports_the_loader_refusal(bench):
    a, b = _effects(bench)

    def load(overrides):
        if "s=off" in overrides:
            raise InputError("no such option", field="s")
        return object()

    got = bench.availability([a, b], load)
    assert got["a"] is None and "no such option" in got["b"]


def test_every_effect_of_the_table_loads_in_this_version(bench):
    got = bench.availability(bench.EFFECTS, lambda o: load_scenario(bench.SCENARIO, o))
    assert got == {e.name: None for e in bench.EFFECTS}


def test_report_renders_tables_contributions_and_verdict(bench):
    a, b = _effects(bench)
    point = lambda s: {"epoch_s": s, "iteration_s": s / 100, "step_s": s / 100, "own_work_s": 0.95 * s / 100}  # noqa: E731
    table = {label: {"sync": point(20.0), "daso_cycling": point(20.0 - i), "daso_blocking": point(21.0)}
             for i, (label, _) in enumerate(bench.ablation_states(["a", "b"]))}
    rows = bench.ablation_rows(table)
    assert rows[0]["saving_cycling"] == pytest.approx(0.0) and rows[1]["saving_cycling"] == pytest.approx(5.0)
    assert [r["state"] for r in rows] == ["all on", "without a", "without b", "only a", "only b", "all off"]
    study = {(B, S): point(20.0 - B / 10) for B, S in bench.bs_grid(bench.BS_B)}
    text = bench.render_report(results={32: rows}, bs={32: study}, effects=[a, b],
                               unavailable={"a": None, "b": "x: unknown field"}, noise={"rank_sigma": 0.02},
                               epochs={32: 1}, seed=0, command="python benchmarks/noise_ablation.py", wall_s=1.0)
    assert "not available: x: unknown field" in text and "| rank_sigma | 0.02 |" in text
    assert "| a | -5.00 | -10.00 |" in text  # all on 0 % − without a 5 %; only a 15 % − all off 25 %
    assert "S = 0: epoch time non-increasing in B (larger B faster or equal)? **yes**" in text
    assert "below the published range by 15.0 points" in text
    assert rows[0]["ceiling"] == pytest.approx(5.0)  # 5 % of sync's step is not a rank's own work
    assert "Ceiling with every effect on: 5.0 % at 32 GPUs" in text and "below the published range's lower end" in text


def test_ceiling_is_the_share_of_the_step_outside_a_ranks_own_work(bench):
    assert bench.ceiling_pct(0.120, 0.090) == pytest.approx(25.0)
    assert bench.ceiling_pct(0.100, 0.100) == 0.0
    high = [{"state": "all on", "ceiling": 30.0}]
    assert "fits under the ceiling" in " ".join(bench.ceiling_markdown({32: high}))


def test_sensitivity_table_says_whether_any_noise_reaches_the_published_range(bench):
    point = lambda s, own=0.9: {"epoch_s": s, "step_s": s, "own_work_s": own * s}  # noqa: E731
    study = {0.1: {"sync": point(20.0), "daso_cycling": point(19.0)},
             0.3: {"sync": point(30.0), "daso_cycling": point(27.0)}}
    text = "\n".join(bench.sensitivity_markdown(32, study, 0.02))
    assert "| 0.3 | 30.000 | 27.000 | 10.00 | 10.00 |" in text
    assert "No value in the table reaches the published range" in text
    study[0.3]["daso_cycling"] = point(24.0)  # 20 % saved
    assert "reached from rank_sigma 0.3" in "\n".join(bench.sensitivity_markdown(32, study, 0.02))
