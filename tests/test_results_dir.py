"""The result directory: contents, byte-stable summary, atomic writes, overwrite, loading back."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import simdist.plots
from simdist.errors import InputError
from simdist.metrics import SUMMARY_KEYS, summarize
from simdist.results import RESULT_FILES, LoadedResult, content_hash, load_result_dir, write_result_dir

try:
    from test_metrics import make_result
except ImportError:  # tests/ collected as a package
    from .test_metrics import make_result


def _leftovers(parent):
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def test_writes_every_file_of_the_contract(tmp_path):
    out = write_result_dir(make_result(), tmp_path / "run", plots=False)
    assert out == tmp_path / "run"
    assert sorted(p.name for p in out.iterdir()) == sorted(RESULT_FILES)
    steps = pd.read_csv(out / "steps.csv")
    assert list(steps.columns) == ["time_s", "worker", "step", "version", "staleness", "batch_size", "loss", "age_s"]
    assert list(pd.read_csv(out / "workers.csv").columns) == ["worker", "compute_s", "comm_s", "idle_s",
                                                              "samples", "steps"]
    assert list(pd.read_csv(out / "links.csv").columns) == ["link", "kind", "bytes", "busy_s"]
    assert list(pd.read_csv(out / "evals.csv").columns) == ["time_s", "step", "worker", "test_loss", "test_accuracy"]
    events = pd.read_csv(out / "events.csv")
    assert list(events.columns) == ["time_s", "rank", "kind", "phase"] and list(events["phase"]) == ["warmup"]
    assert _leftovers(tmp_path) == []


def test_summary_json_is_the_summary_and_byte_stable(tmp_path):
    result = make_result()
    a = write_result_dir(result, tmp_path / "a", plots=False)
    b = write_result_dir(result, tmp_path / "b", plots=False)
    text = (a / "summary.json").read_text()
    assert text == (b / "summary.json").read_text()
    assert text == json.dumps(summarize(result), indent=2) + "\n"
    assert list(json.loads(text)) == list(SUMMARY_KEYS)
    # only wall_time_s may differ between otherwise identical runs
    c = write_result_dir(make_result(wall_time_s=99.0), tmp_path / "c", plots=False)
    diff = {k for k, v in json.loads((c / "summary.json").read_text()).items() if json.loads(text)[k] != v}
    assert diff == {"wall_time_s"}
    for name in ("steps.csv", "evals.csv", "workers.csv", "links.csv", "trace.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_manifest_contents(tmp_path):
    result = make_result()
    out = write_result_dir(result, tmp_path / "run")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["scenario"] == result.scenario and manifest["platform"] == result.platform
    assert manifest["seed"] == 7 and manifest["algorithm"] == "asgd"
    assert manifest["timing_only"] is False and manifest["status"] == "completed"
    assert set(manifest["packages"]) == {"python", "torch", "numpy", "pandas", "simpy", "pydantic"}
    assert manifest["content_hash"] == content_hash(result.scenario, result.platform, result.seed, manifest["inputs"])
    assert len(manifest["content_hash"]) == 64
    assert manifest["summary"] == json.loads((out / "summary.json").read_text())
    listed = set(manifest["files"])
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert listed == on_disk
    assert "plots/accuracy_vs_time.png" in listed and "manifest.json" in listed


def test_content_hash_identifies_inputs():
    h = content_hash({"a": 1, "b": [1, 2]}, {"n": 2}, 3)
    assert h == content_hash({"b": [1, 2], "a": 1}, {"n": 2}, 3)  # key order does not matter
    assert h != content_hash({"a": 1, "b": [1, 2]}, {"n": 2}, 4)
    assert h != content_hash({"a": 2, "b": [1, 2]}, {"n": 2}, 3)


def test_failure_while_writing_leaves_nothing_behind(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("plotting failed")

    monkeypatch.setattr(simdist.plots, "plot_tables", boom)
    with pytest.raises(RuntimeError, match="plotting failed"):
        write_result_dir(make_result(), tmp_path / "run")
    assert not (tmp_path / "run").exists()
    assert list(tmp_path.iterdir()) == []


def test_failure_during_overwrite_keeps_the_old_directory(tmp_path, monkeypatch):
    out = write_result_dir(make_result(), tmp_path / "run", plots=False)
    before = (out / "summary.json").read_bytes()
    monkeypatch.setattr(simdist.plots, "plot_tables", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        write_result_dir(make_result(wall_time_s=5.0), out, overwrite=True)
    assert (out / "summary.json").read_bytes() == before
    assert _leftovers(tmp_path) == []


def test_existing_directory_is_refused_without_overwrite(tmp_path):
    out = write_result_dir(make_result(), tmp_path / "run", plots=False)
    with pytest.raises(InputError) as info:
        write_result_dir(make_result(wall_time_s=5.0), out, plots=False)
    assert "already exists; pass --overwrite to replace it" in str(info.value)
    assert info.value.source == str(out) and info.value.field is None
    assert "\n" not in str(info.value)
    assert json.loads((out / "summary.json").read_text())["wall_time_s"] == 1.25


def test_overwrite_replaces_the_directory(tmp_path):
    out = write_result_dir(make_result(), tmp_path / "run", plots=False)
    (out / "plots").mkdir()
    (out / "stale.txt").write_text("from an older run")
    write_result_dir(make_result(wall_time_s=5.0), out, overwrite=True, plots=False)
    assert json.loads((out / "summary.json").read_text())["wall_time_s"] == 5.0
    assert not (out / "stale.txt").exists() and not (out / "plots").exists()
    assert _leftovers(tmp_path) == []


def test_empty_existing_directory_and_missing_parent_are_fine(tmp_path):
    (tmp_path / "empty").mkdir()
    write_result_dir(make_result(), tmp_path / "empty", plots=False)
    assert (tmp_path / "empty" / "summary.json").is_file()
    out = write_result_dir(make_result(), tmp_path / "deep" / "er" / "run", plots=False)
    assert (out / "manifest.json").is_file()


def test_a_file_in_the_way_is_refused(tmp_path):
    (tmp_path / "run").write_text("not a directory")
    with pytest.raises(InputError, match="not a directory"):
        write_result_dir(make_result(), tmp_path / "run", overwrite=True, plots=False)


def test_load_round_trip(tmp_path):
    result = make_result()
    out = write_result_dir(result, tmp_path / "run", plots=False)
    loaded = load_result_dir(out)
    assert isinstance(loaded, LoadedResult)
    assert loaded.path == out and loaded.algorithm == "asgd" and loaded.n_workers == 2
    assert loaded.summary == summarize(result)
    assert loaded.manifest["seed"] == 7
    assert len(loaded.steps) == 6 and loaded.steps["batch_size"].sum() == 160
    assert loaded.steps["loss"].tolist() == [2.0, 1.8, 1.5, 1.2, 1.0, 1.1]
    assert len(loaded.evals) == 4 and len(loaded.links) == 2
    assert loaded.workers.set_index("worker").loc[0, "idle_s"] == 4.0


def test_timing_only_round_trip_has_missing_loss(tmp_path):
    out = write_result_dir(make_result(timing_only=True), tmp_path / "run", plots=False)
    loaded = load_result_dir(out)
    assert loaded.steps["loss"].isna().all()
    assert loaded.evals.empty and list(loaded.evals.columns) == ["time_s", "step", "worker", "test_loss",
                                                                 "test_accuracy"]
    assert loaded.summary["final_test_accuracy"] is None


@pytest.mark.parametrize("missing", ["manifest.json", "summary.json", "steps.csv", "evals.csv", "links.csv"])
def test_not_a_result_directory_is_an_input_error(tmp_path, missing):
    out = write_result_dir(make_result(), tmp_path / "run", plots=False)
    (out / missing).unlink()
    with pytest.raises(InputError) as info:
        load_result_dir(out)
    message = str(info.value)
    assert str(out) in message and missing in message and "\n" not in message


def test_missing_or_corrupt_directory_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no such directory"):
        load_result_dir(tmp_path / "nope")
    out = write_result_dir(make_result(), tmp_path / "run", plots=False)
    (out / "manifest.json").write_text("{not json")
    with pytest.raises(InputError, match="manifest.json"):
        load_result_dir(out)
    (out / "manifest.json").write_text("{}")
    (out / "links.csv").write_text("")
    with pytest.raises(InputError, match="links.csv"):
        load_result_dir(out)
