"""benchmarks/resimulate_points.py: a model change scored against real runs already made.

A simulated run stands in for the real one here (the comparison reads result directories):
re-simulating the saved scenario as it is reproduces the saved figures exactly, and a change
given with --set moves only the changed column."""

from __future__ import annotations

import pytest

from simdist.results import write_result_dir
from simdist.scenario import scenario_from_dict
from simdist.simulate import simulate

from helpers import load_benchmark, tiny_scenario


@pytest.fixture(scope="module")
def rs():
    return load_benchmark("resimulate_points")


def _saved_point(root, name="sync-2-8", slower=1.0):
    """A point directory as predictive_validation leaves it: validate/real and validate/sim."""
    data = tiny_scenario(stop={"steps": 8})
    data["outputs"] = {**data.get("outputs", {}), "trace": True}  # the comparison reads the spans from trace.json
    write_result_dir(simulate(scenario_from_dict(data)), root / name / "validate" / "sim")
    data["platform"] = {**data.get("platform", {}), "device_overrides": [{"ranks": [0, 1], "speed": 1 / slower}]}
    write_result_dir(simulate(scenario_from_dict(data)), root / name / "validate" / "real")
    return root / name


def test_as_is_reproduces_the_saved_figures_and_a_change_moves_its_own_column(rs, tmp_path, capsys):
    _saved_point(tmp_path, slower=1.25)  # the "real" run computes 25 % slower than the saved simulation
    (tmp_path / "not-a-point").mkdir()
    assert rs.main([str(tmp_path), "--set", "platform.device_overrides=[{ranks: [0, 1], speed: 0.8}]"]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = next(line for line in lines if line.startswith("sync-2-8"))
    saved, as_is, changed = (cell.split() for cell in row[len("sync-2-8"):].split("|"))
    assert saved == as_is  # deterministic: the unchanged re-simulation is the saved one
    assert float(saved[0]) > 10 and float(changed[0]) < 1  # the change makes the simulation the "real" run
    assert "# changed: iteration target at 1 of 1 points" in "\n".join(lines)
    assert "# saved: iteration target at 0 of 1 points" in "\n".join(lines)


def test_points_can_be_picked_and_bad_input_is_refused(rs, tmp_path, capsys):
    _saved_point(tmp_path, "sync-2-8")
    assert [p.name for p in rs.saved_points(tmp_path, ["asgd"])] == []
    with pytest.raises(SystemExit) as exc:
        rs.main([str(tmp_path), "--points", "asgd"])
    assert exc.value.code == 2 and "no saved point" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        rs.main([str(tmp_path / "missing")])
    assert rs.main([str(tmp_path), "--set", "no-equals-sign"]) == 2
    assert "--set" in capsys.readouterr().err


def test_parts_prints_each_large_part_real_then_each_simulation(rs, tmp_path, capsys):
    _saved_point(tmp_path, slower=1.25)
    assert rs.main([str(tmp_path), "--parts", "--set", "platform.device_overrides=[{ranks: [0, 1], speed: 0.8}]"]) == 0
    lines = capsys.readouterr().out.splitlines()
    parts = {line.split()[0]: line.split("|") for line in lines if line.startswith("    ")}
    assert "forward_backward" in parts and "step" in parts
    real = float(parts["forward_backward"][0].split()[1])
    saved, as_is, changed = (float(x) for x in parts["forward_backward"][1].split())
    # ms with two decimals: the change computes as the "real" run, the saved one 1.25x as fast
    assert saved == as_is and changed == pytest.approx(real, abs=0.006)
    assert saved == pytest.approx(real / 1.25, abs=0.006) and saved < real
