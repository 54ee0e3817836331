"""The Python API (simdist.run / load / sweep / compare, Result): the command line's numbers and
directories, from a path, a mapping or a Scenario; bad input is an InputError raised at the call."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import traceback
from pathlib import Path

import pandas as pd
import pytest
import yaml
from matplotlib.figure import Figure

import simdist
from simdist.cli import main
from simdist.metrics import EVALS_COLUMNS, LINKS_COLUMNS, STEPS_COLUMNS, SUMMARY_KEYS, WORKERS_COLUMNS
from simdist.ledger import LEDGER_COLUMNS
from simdist.scenario import load_scenario, scenario_from_dict
from simdist.sweeps import SWEEP_SUMMARY_KEYS

from helpers import tiny_scenario

TABLES = ("steps", "evals", "workers", "links", "events", "ledger")


def scenario(**changes) -> dict:
    """Four steps of sync on 2 ranks, evaluated every 2 steps (a fraction of a second), with its trace."""
    return tiny_scenario(**{"stop": {"steps": 4}, "evaluation": {"every_steps": 2},
                            "outputs": {"plots": False, "trace": True}, **changes})


def without_wall_time(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k != "wall_time_s"}


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory) -> tuple[Path, Path]:
    """(scenario file, result directory the command line wrote for it)."""
    folder = tmp_path_factory.mktemp("cli")
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(scenario()))
    assert main(["run", str(path), "--out", str(folder / "out"), "--quiet"]) == 0
    return path, folder / "out"


@pytest.fixture(scope="module")
def result(cli_run) -> simdist.Result:
    return simdist.run(cli_run[0])


def test_path_mapping_and_scenario_give_the_cli_summary(cli_run, result):
    path, out = cli_run
    expected = without_wall_time(json.loads((out / "summary.json").read_text()))
    assert list(result.summary) == list(SUMMARY_KEYS)
    assert without_wall_time(result.summary) == expected
    assert without_wall_time(simdist.run(scenario()).summary) == expected
    assert without_wall_time(simdist.run(load_scenario(path)).summary) == expected
    assert result.manifest["content_hash"] == json.loads((out / "manifest.json").read_text())["content_hash"]


def test_out_writes_the_cli_directory(cli_run, tmp_path):
    path, out = cli_run
    mine = simdist.run(path, out=tmp_path / "api")
    assert mine.path == tmp_path / "api"
    assert sorted(p.name for p in (tmp_path / "api").iterdir()) == sorted(p.name for p in out.iterdir())
    for name in ("steps.csv", "evals.csv", "workers.csv", "links.csv", "events.csv", "ledger.csv", "trace.json"):
        assert (tmp_path / "api" / name).read_bytes() == (out / name).read_bytes(), name
    assert mine.manifest == json.loads((tmp_path / "api" / "manifest.json").read_text())


def test_set_overrides_as_the_cli_does(cli_run):
    path, _ = cli_run
    assert simdist.run(path, set={"stop.steps": 3}).summary["steps"] == 3
    assert simdist.run(path, set={"stop.steps": "3"}).summary["steps"] == 3  # read as YAML, like --set
    seeded = simdist.run(scenario(), seed=7, set={"workload.optimizer": {"name": "sgd", "lr": 0.2}})
    assert seeded.manifest["seed"] == 7 and seeded.scenario["workload"]["optimizer"]["lr"] == 0.2
    asgd = simdist.run(scenario_from_dict(scenario()), set={"algorithm.name": "asgd", "workers": 1})
    assert asgd.summary["algorithm"] == "asgd"
    timing = simdist.run(path, timing_only=True)
    assert timing.manifest["timing_only"] is True and timing.steps["loss"].isna().all()


@pytest.mark.parametrize("call, names", [
    (lambda: simdist.run(scenario(), set={"workload.batchsize": 3}), "workload.batchsize"),
    (lambda: simdist.run(scenario(), set={"stop.steps": "many"}), "stop.steps"),
    (lambda: simdist.run(scenario(), set={"bad..key": 1}), "bad..key"),
    (lambda: simdist.run(scenario(workers=9)), "workers"),
    (lambda: simdist.run("no/such/scenario.yaml"), "no/such/scenario.yaml"),
    (lambda: simdist.run(42), "scenario"),
    (lambda: simdist.load("no/such/dir"), "no/such/dir"),
    (lambda: simdist.sweep(scenario(), {"workers": []}), "sweep.grid"),
    (lambda: simdist.sweep(scenario(), {"workers": [1]}, workers=0), "workers"),
    (lambda: simdist.compare(scenario(), {"bad label!": {}}), "compare"),
])
def test_bad_input_is_an_input_error_raised_at_the_call(call, names):
    with pytest.raises(simdist.InputError) as caught:
        call()
    assert names in str(caught.value) and "\n" not in str(caught.value)
    assert Path(traceback.extract_tb(caught.tb)[-1].filename).name == "api.py"  # not the library's depths


def test_the_cli_message_for_the_same_mistake(cli_run, capsys):
    path, _ = cli_run
    assert main(["run", str(path), "--set", "workload.batchsize=3", "--quiet"]) == 2
    printed = capsys.readouterr().err.strip().removeprefix("simdist: error: ")
    with pytest.raises(simdist.InputError) as caught:
        simdist.run(path, set={"workload.batchsize": 3})
    assert str(caught.value) == printed


def test_tables_have_the_documented_columns(result):
    assert list(result.steps.columns[:len(STEPS_COLUMNS)]) == list(STEPS_COLUMNS)
    assert list(result.evals.columns) == list(EVALS_COLUMNS)
    assert list(result.workers.columns) == list(WORKERS_COLUMNS)
    assert list(result.links.columns) == list(LINKS_COLUMNS)
    assert list(result.ledger.columns) == list(LEDGER_COLUMNS)
    assert list(result.events.columns[:3]) == ["time_s", "rank", "kind"]
    assert len(result.steps) == 8 and set(result.workers["worker"]) == {0, 1} and len(result.evals) >= 2
    assert "sync" in repr(result) and "2 workers" in repr(result) and "final accuracy" in repr(result)


def test_plot_methods_return_figures(result, cli_run):
    for figure in (result.plot_loss(), result.plot_accuracy(), result.plot_staleness(), result.plot_timeline(),
                   result.plot("time_per_step"), simdist.load(cli_run[1]).plot_timeline()):
        assert isinstance(figure, Figure) and figure.axes and figure.axes[0].has_data()
    blank = simdist.run(scenario(), timing_only=True).plot_accuracy()  # no accuracy: a figure that says so
    assert isinstance(blank, Figure) and "no data" in blank.axes[0].texts[0].get_text()
    with pytest.raises(simdist.InputError, match="known: loss_vs_time"):
        result.plot("nonsense")


def test_save_then_load_round_trips(result, tmp_path):
    saved = result.save(tmp_path / "saved", plots=False)
    loaded = simdist.load(saved)
    assert loaded.summary == result.summary and loaded.path == saved
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(loaded, name), getattr(result, name), check_dtype=False, rtol=1e-10)
    again = simdist.load(loaded.save(tmp_path / "copy"))  # a loaded result saves a copy of its directory
    assert again.summary == result.summary and again.manifest["content_hash"] == result.manifest["content_hash"]
    assert again.manifest["files"] == loaded.manifest["files"]
    assert sorted(p.name for p in (tmp_path / "copy").iterdir()) == sorted(p.name for p in saved.iterdir())


def test_out_refuses_an_existing_directory_and_leaves_it_untouched(result, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    with pytest.raises(simdist.InputError, match="mine"):
        simdist.run(scenario(), out=folder)
    with pytest.raises(simdist.InputError, match="mine"):
        result.save(folder)
    assert [p.name for p in tmp_path.iterdir()] == ["mine"]
    assert [p.name for p in folder.iterdir()] == ["notes.txt"] and (folder / "notes.txt").read_text() == "keep me"


def test_sweep_returns_sweep_csv(tmp_path):
    table = simdist.sweep(scenario(), {"workers": [1, 2]}, workers=1, out=tmp_path / "sweep")
    assert list(table.columns) == ["point", "key", "axis.workers", *SWEEP_SUMMARY_KEYS]
    assert list(table["axis.workers"]) == [1, 2] and list(table["workers"]) == [1, 2]
    pd.testing.assert_frame_equal(table, pd.read_csv(tmp_path / "sweep" / "sweep.csv"))
    assert table.attrs["failures"] == {}


def test_compare_returns_compare_csv(cli_run):
    table = simdist.compare(cli_run[0], {"sync": {}, "asgd": {"algorithm.name": "asgd", "workers": 1}})
    assert list(table.columns) == ["label", *SUMMARY_KEYS]
    assert list(table["label"]) == ["sync", "asgd"] and list(table["algorithm"]) == ["sync", "asgd"]
    assert table["steps"].tolist() == [4, 4]


def test_import_simdist_loads_neither_pandas_nor_torch():
    code = "import sys, simdist; assert not {'pandas', 'torch', 'matplotlib'} & set(sys.modules), 'loaded'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert sorted(simdist.__all__) == sorted(["run", "load", "sweep", "compare", "Result", "InputError", "__version__"])


def test_sweep_and_compare_are_the_api_functions_even_after_the_engines_are_imported():
    import simdist.comparison
    import simdist.sweeps

    from simdist import api

    assert simdist.sweep is api.sweep and simdist.compare is api.compare
    assert simdist.sweeps.run_sweep and simdist.comparison.run_comparison
    assert list(inspect.signature(simdist.sweep).parameters)[:2] == ["scenario", "axes"]