"""Output safety: simdist never writes over a folder it did not write, never over the current
directory, home or root, writes atomically, and leaves the old result or the new one when killed.

Each refusal is checked through the command line (exit status 2, one line on stderr naming the
path, every file as it was, nothing simulated); replacement, clean-up after killed writers and
interruptions are checked on :mod:`simdist.outdir` and through ``simdist run``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import simdist.comparison
import simdist.outdir as outdir
import simdist.simulate
from simdist.calibrate.provenance import write_yaml
from simdist.cli import main
from simdist.errors import InputError
from simdist.osatomic import Terminated, process_start, sigterm_as_interrupt
from simdist.outdir import MARKER, output_kind, staged_dir, tidy, write_file_atomically
from simdist.results import load_result_dir

from helpers import tiny_scenario

def scenario_file(folder: Path, name: str = "tiny.yaml", **changes) -> Path:
    data = tiny_scenario(**changes)
    path = folder / name
    path.write_text(yaml.safe_dump(data))
    return path


def snapshot(root: Path) -> dict[str, object]:
    """Every entry under ``root`` (hidden ones too): file bytes, link targets, or 'dir'."""
    seen: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        key = path.relative_to(root).as_posix()
        seen[key] = (os.readlink(path) if path.is_symlink() else "dir" if path.is_dir() else path.read_bytes())
    return seen


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name or ".old-" in p.name)


@pytest.fixture
def world(tmp_path, monkeypatch):
    """cwd ``tmp_path/home/work`` holding a file, HOME ``tmp_path/home``, a tiny scenario elsewhere."""
    home = tmp_path / "home"
    work = home / "work"
    (work / "sub").mkdir(parents=True)
    (work / "notes.txt").write_text("mine")
    (home / "diary.txt").write_text("also mine")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    return {"root": tmp_path, "home": home, "work": work, "scenario": scenario_file(scenarios)}


@pytest.fixture
def no_simulation(monkeypatch):
    def fail(*args, **kwargs):
        pytest.fail("simulated before refusing")

    monkeypatch.setattr(simdist.simulate, "simulate", fail)
    monkeypatch.setattr(simdist.comparison, "simulate", fail)  # bound at import


def refused(args: list[str], capsys, shown: str, *words: str) -> str:
    """Run the CLI; it must exit 2 with one stderr line naming ``shown`` and holding ``words``."""
    assert main(args) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"simdist: error: {shown}: "), err
    for word in words:
        assert word in lines[0], err
    return lines[0]


# --------------------------------------------------------------------------- refusals of simdist run


REFUSED = {
    "cwd": (lambda w: ".", "is the current directory"),
    "sub-dot-dot": (lambda w: "sub/..", "is the current directory"),
    "home": (lambda w: str(w["home"]), "is the home directory"),
    "root": (lambda w: "/", "is the filesystem root"),
    "ancestor-of-cwd": (lambda w: str(w["root"]), "is an ancestor of the current directory"),
    "parent-of-cwd": (lambda w: "..", "is the home directory"),
    "symlink-to-cwd": (lambda w: (w["root"] / "link").symlink_to(w["work"]) or str(w["root"] / "link"),
                       "is the current directory"),
    "foreign-folder": (lambda w: str(w["work"] / "sub"), "simdist did not write"),
    "regular-file": (lambda w: "notes.txt", "is not a directory"),
    "file-as-parent": (lambda w: "notes.txt/out", "is not a directory"),
    "name-too-long": (lambda w: "x" * 300, "300 bytes long"),
    "under-proc": (lambda w: "/proc/1/simdist-out", "cannot create a folder in /proc/1"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_run_refuses_the_output_and_touches_nothing(world, capsys, no_simulation, case):
    (world["work"] / "sub" / "keep.txt").write_text("keep me")
    if case == "under-proc" and not Path("/proc/1").is_dir():
        pytest.skip("no /proc here")
    make_out, words = REFUSED[case]
    out = make_out(world)
    before = snapshot(world["root"])
    for extra in ([], ["--overwrite"]):
        refused(["run", str(world["scenario"]), "--out", out, "--quiet", *extra], capsys, out, words)
        assert snapshot(world["root"]) == before


def test_a_marker_does_not_make_the_current_directory_replaceable(world, capsys, no_simulation):
    (world["work"] / MARKER).write_text(json.dumps({"kind": "run", "simdist_version": "0.1.0"}))
    before = snapshot(world["root"])
    refused(["run", str(world["scenario"]), "--out", ".", "--overwrite"], capsys, ".", "is the current directory")
    assert snapshot(world["root"]) == before


def test_simdist_folder_is_refused_without_overwrite_and_replaced_with_it(world, capsys):
    out = world["work"] / "results" / "tiny"
    assert main(["run", str(world["scenario"]), "--out", str(out), "--quiet"]) == 0
    assert json.loads((out / MARKER).read_text()) == {"kind": "run", "simdist_version": simdist_version()}
    (out / "stale.txt").write_text("from an earlier run")
    (out / "old-plots").mkdir()
    refused(["run", str(world["scenario"]), "--out", str(out)], capsys, str(out), "pass --overwrite")
    assert (out / "stale.txt").exists()
    assert main(["run", str(world["scenario"]), "--out", str(out), "--overwrite", "--quiet", "--set", "seed=3"]) == 0
    assert not (out / "stale.txt").exists() and not (out / "old-plots").exists()
    assert load_result_dir(out).manifest["seed"] == 3
    assert leftovers(out.parent) == []
    assert (world["work"] / "notes.txt").read_text() == "mine"


def test_result_folder_from_before_the_marker_is_recognised(world):
    legacy = world["work"] / "old"
    legacy.mkdir()
    (legacy / "manifest.json").write_text(json.dumps({"simdist_version": "0.0.9"}))
    (legacy / "summary.json").write_text("{}")
    assert output_kind(legacy) == "run"
    assert output_kind(world["work"] / "sub") is None
    assert main(["run", str(world["scenario"]), "--out", str(legacy), "--overwrite", "--quiet"]) == 0
    assert output_kind(legacy) == "run" and (legacy / "steps.csv").is_file()


def test_an_empty_folder_is_used(world):
    assert main(["run", str(world["scenario"]), "--out", "sub", "--quiet"]) == 0
    assert (world["work"] / "sub" / "summary.json").is_file() and leftovers(world["work"]) == []


# --------------------------------------------------------------------------- the other commands


@pytest.fixture
def outputs(world):
    """A run folder and a sweep folder (written by simdist), and a scenario with compare variants."""
    folder = world["root"] / "made"
    folder.mkdir()
    run_dir = folder / "run"
    assert main(["run", str(world["scenario"]), "--out", str(run_dir), "--quiet"]) == 0
    sweep = scenario_file(folder, "sweep.yaml", sweep={"grid": {"workers": [1, 2]}})
    sweep_dir = folder / "sweep"
    assert main(["sweep", str(sweep), "--out", str(sweep_dir), "--jobs", "1", "--quiet"]) == 0
    compare = scenario_file(folder, "compare.yaml", compare=[{"label": "a", "set": {}}])
    return {**world, "run": run_dir, "sweep_dir": sweep_dir, "sweep": sweep, "compare": compare}


def _command(kind: str, o: dict, out: str) -> list[str]:
    return {"sweep": ["sweep", str(o["sweep"]), "--out", out, "--jobs", "1", "--quiet"],
            "compare": ["compare", str(o["compare"]), "--out", out, "--overwrite", "--quiet"],
            "plot": ["plot", str(o["run"]), "--out", out],
            "report": ["report", str(o["sweep_dir"]), "--out", str(Path(out).parent), "--name", Path(out).name]}[kind]


@pytest.mark.parametrize("kind", ["sweep", "compare", "plot", "report"])
@pytest.mark.parametrize("where, words", [("cwd", "is the current directory"), ("home", "is the home directory"),
                                          ("foreign", "simdist did not write"), ("file", "is not a directory"),
                                          ("run", "not a")])
def test_other_commands_refuse_the_same_outputs(outputs, capsys, monkeypatch, no_simulation, kind, where, words):
    if kind == "plot" and where == "run":
        pytest.skip("the run folder is the plot's own result")
    out = {"cwd": str(outputs["work"]), "home": str(outputs["home"]), "foreign": str(outputs["work"] / "sub"),
           "file": str(outputs["work"] / "notes.txt"), "run": str(outputs["run"])}[where]
    (outputs["work"] / "sub" / "keep.txt").write_text("keep me")
    before = snapshot(outputs["root"])
    refused(_command(kind, outputs, out), capsys, out, words)
    assert snapshot(outputs["root"]) == before


def test_plot_and_report_replace_their_own_earlier_output(outputs, capsys):
    figures = outputs["work"] / "figures"
    assert main(["plot", str(outputs["run"]), "--out", str(figures)]) == 0
    (figures / "stale.png").write_text("old")
    assert main(["plot", str(outputs["run"]), "--out", str(figures)]) == 0
    assert not (figures / "stale.png").exists() and (figures / "loss_vs_time.png").is_file()
    assert output_kind(figures) == "plots"
    for _ in range(2):
        assert main(["report", str(outputs["sweep_dir"]), "--out", "reports"]) == 0
    assert output_kind(outputs["work"] / "reports" / "tiny") == "report"
    assert leftovers(outputs["work"] / "reports") == [] and leftovers(outputs["work"]) == []


def test_sweep_and_compare_continue_in_their_own_folders(outputs, capsys):
    killed_point = temp_dir(outputs["sweep_dir"] / "points", "0123456789abcdef", dead_pid())
    assert main(["sweep", str(outputs["sweep"]), "--out", str(outputs["sweep_dir"]), "--quiet"]) == 0
    assert not killed_point.exists() and leftovers(outputs["sweep_dir"] / "points") == []
    out = outputs["work"] / "cmp"
    for _ in range(2):
        assert main(["compare", str(outputs["compare"]), "--out", str(out), "--overwrite", "--quiet"]) == 0
    assert output_kind(out) == "compare" and output_kind(out / "a") == "run"
    assert leftovers(out) == []


@pytest.mark.parametrize("jobs", ["0", "-1", "1025", "two"])
def test_sweep_jobs_out_of_range_exits_2_before_running_a_point(outputs, capsys, no_simulation, jobs):
    out = outputs["work"] / "new-sweep"
    with pytest.raises(SystemExit) as info:
        main(["sweep", str(outputs["sweep"]), "--out", str(out), "--jobs", jobs])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--jobs" in err[0] and "1 to 1024" in err[0]
    assert not out.exists()


# --------------------------------------------------------------------------- files


def test_calibration_files_replace_only_their_own(tmp_path):
    mine = tmp_path / "fit.yaml"
    write_yaml(mine, {"a": 1.0, "provenance": {"generated_by": "simdist calibrate"}}, "header")
    write_yaml(mine, {"a": 2.0, "provenance": {"generated_by": "simdist calibrate"}}, "header")
    assert yaml.safe_load(mine.read_text())["a"] == 2.0
    hand = tmp_path / "profile.yaml"
    hand.write_text("device: a100\nmodels: {}\n")
    with pytest.raises(InputError, match="not written by simdist"):
        write_yaml(hand, {"a": 1.0, "provenance": {}}, "header")
    assert hand.read_text() == "device: a100\nmodels: {}\n"
    with pytest.raises(InputError, match="is a directory"):
        write_yaml(tmp_path, {"a": 1.0}, "header")
    if Path("/proc/1").is_dir():
        with pytest.raises(InputError, match="/proc/1"):
            write_yaml("/proc/1/fit.yaml", {"a": 1.0}, "header")
    assert leftovers(tmp_path) == []


def test_a_failing_file_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "table.csv"
    path.write_text("old")

    def broken(tmp: Path) -> None:
        tmp.write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(InputError) as info:
        write_file_atomically(path, broken)
    assert str(info.value) == f"{path}: cannot write this file: No space left on device"
    assert path.read_text() == "old" and leftovers(tmp_path) == []


def test_no_space_while_writing_a_folder_is_one_line_and_leaves_nothing(tmp_path):
    out = tmp_path / "new" / "deeper" / "out"
    with pytest.raises(InputError) as info:
        with staged_dir(out, kind="run") as tmp:
            (tmp / "summary.json").write_text("{}")
            raise OSError(28, "No space left on device")
    assert "No space left on device" in str(info.value) and "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []  # the parents it made are gone too


# --------------------------------------------------------------------------- killed writers


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def temp_dir(parent: Path, name: str, pid: int | None, host: str | None = None) -> Path:
    path = parent / f".{name}.tmp-{os.urandom(4).hex()}"
    path.mkdir(parents=True)
    (path / "steps.csv").write_text("half-written")
    marker = {"kind": "run", "simdist_version": "0.1.0"}
    if pid is not None:
        marker["writer"] = {"pid": pid, "host": host or socket.gethostname()}
    (path / MARKER).write_text(json.dumps(marker))
    return path


def test_temporaries_of_dead_writers_are_removed_on_the_next_run(world, capsys):
    results = world["work"] / "results"
    mine = temp_dir(results, "tiny", dead_pid())
    other = temp_dir(results, "other", dead_pid())
    stale_file = results / f".sweep.csv.tmp-{os.urandom(4).hex()}"
    stale_file.write_text("half")
    os.utime(stale_file, (time.time() - 2 * outdir.GRACE_S,) * 2)
    young = temp_dir(results, "young", None)  # no writer recorded, just made: may be mid-write
    assert main(["run", str(world["scenario"]), "--out", str(results / "tiny"), "--quiet"]) == 0
    assert not mine.exists() and not other.exists() and not stale_file.exists()
    assert young.exists()
    assert capsys.readouterr().err == ""


def test_temporaries_of_live_writers_are_kept_and_reported(world, capsys):
    results = world["work"] / "results"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = temp_dir(results, "tiny", sleeper.pid)
        elsewhere = temp_dir(results, "tiny", 1, host="another-host")
        assert main(["run", str(world["scenario"]), "--out", str(results / "tiny"), "--quiet"]) == 0
        assert live.exists() and elsewhere.exists()
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        assert f"{live} is being written by process {sleeper.pid}" in err[0]
        assert "another-host" in err[0] and "left alone" in err[0]
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_reused_pid_does_not_keep_a_temporary(tmp_path):
    stale = temp_dir(tmp_path, "x", os.getpid())
    marker = json.loads((stale / MARKER).read_text())
    marker["writer"]["process_start"] = -1  # this pid now belongs to a process that started at another time
    (stale / MARKER).write_text(json.dumps(marker))
    if process_start(os.getpid()) is None:
        pytest.skip("process start times are not readable here")
    assert tidy(tmp_path) == [] and not stale.exists()


def test_a_folder_renamed_aside_is_restored_when_its_target_is_missing(tmp_path):
    aside = tmp_path / ".run.old-0a1b2c3d"
    aside.mkdir()
    (aside / "summary.json").write_text("old result")
    superseded = tmp_path / ".done.old-0a1b2c3d"
    superseded.mkdir()
    (tmp_path / "done").mkdir()
    tidy(tmp_path)
    assert (tmp_path / "run" / "summary.json").read_text() == "old result"
    assert not aside.exists() and not superseded.exists() and (tmp_path / "done").exists()


def _old_and_new(world) -> tuple[Path, bytes]:
    out = world["work"] / "res"
    assert main(["run", str(world["scenario"]), "--out", str(out), "--quiet"]) == 0
    return out, (out / "summary.json").read_bytes()


def _new_run(world, out: Path) -> None:
    main_args = ["run", str(world["scenario"]), "--out", str(out), "--overwrite", "--quiet", "--set", "seed=5"]
    assert main(main_args) == 130


def test_interrupt_before_the_exchange_keeps_the_old_result(world, monkeypatch, capsys):
    out, old = _old_and_new(world)

    def interrupted(a, b):
        raise KeyboardInterrupt

    monkeypatch.setattr(outdir, "_exchange", interrupted)
    _new_run(world, out)
    assert (out / "summary.json").read_bytes() == old and load_result_dir(out).manifest["seed"] == 0
    assert leftovers(out.parent) == []


def test_interrupt_after_the_exchange_keeps_the_new_result(world, monkeypatch, capsys):
    out, old = _old_and_new(world)
    exchange = outdir._exchange

    def exchanged_then_interrupted(a, b):
        assert exchange(a, b)
        raise KeyboardInterrupt

    monkeypatch.setattr(outdir, "_exchange", exchanged_then_interrupted)
    _new_run(world, out)
    assert load_result_dir(out).manifest["seed"] == 5 and (out / MARKER).is_file()
    assert leftovers(out.parent) == []


def test_rename_aside_fallback_replaces_or_restores(world, monkeypatch, capsys):
    out, old = _old_and_new(world)
    monkeypatch.setattr(outdir, "_exchange", lambda a, b: False)
    rename = os.rename

    def interrupted_rename_in(a, b):
        if ".tmp-" in str(a) and Path(b) == out.resolve():
            raise KeyboardInterrupt
        return rename(a, b)

    monkeypatch.setattr(outdir.os, "rename", interrupted_rename_in)
    _new_run(world, out)
    assert (out / "summary.json").read_bytes() == old and leftovers(out.parent) == []
    monkeypatch.setattr(outdir.os, "rename", rename)
    assert main(["run", str(world["scenario"]), "--out", str(out), "--overwrite", "--quiet", "--set", "seed=5"]) == 0
    assert load_result_dir(out).manifest["seed"] == 5 and leftovers(out.parent) == []


def test_sigterm_raises_terminated_inside_the_block_only():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated):
        with sigterm_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    assert signal.getsignal(signal.SIGTERM) == before


def test_sigterm_while_writing_leaves_the_old_result_or_the_new_one(tmp_path):
    scenario = scenario_file(tmp_path, stop={"steps": 400}, outputs={"plots": True, "trace": True})
    out = tmp_path / "res"
    assert main(["run", str(scenario), "--out", str(out), "--quiet", "--no-plots"]) == 0
    old = (out / "summary.json").read_bytes()
    proc = subprocess.Popen([sys.executable, "-m", "simdist", "run", str(scenario), "--out", str(out), "--overwrite",
                             "--quiet", "--set", "seed=9"], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline and not _being_written(tmp_path):
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode in (0, 143), err
    assert "Traceback" not in err
    loaded = load_result_dir(out)  # a whole result either way
    assert all((out / name).is_file() for name in loaded.manifest["files"])
    if proc.returncode == 143:
        assert (out / "summary.json").read_bytes() == old and "terminated" in err
    else:
        assert loaded.manifest["seed"] == 9
    assert leftovers(tmp_path) == []


def _being_written(parent: Path) -> bool:
    """Whether a temporary result folder with its writer recorded is in ``parent`` (the write has begun)."""
    for path in parent.glob(".res.tmp-*"):
        try:
            if "writer" in (path / MARKER).read_text():
                return True
        except OSError:
            continue
    return False


def simdist_version() -> str:
    import simdist

    return simdist.__version__
