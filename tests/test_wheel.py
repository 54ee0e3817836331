"""A non-editable install works: the wheel carries the shipped profiles, platforms and example
scenarios, and ``simdist`` run from a folder outside the repository finds them.

The wheel is built the way ``python -m build`` builds one (an sdist through the PEP 517 hook,
then a wheel from the unpacked sdist, so ``MANIFEST.in`` is tested too), from a copy of the
source tree, without build isolation and without an index: nothing is downloaded. It is
installed into a venv that sees this environment's packages (torch ...) but gets ``simdist``
from the wheel, which the tests check. Building, installing and the quickstart run take
about 25 s together.

The rule for naming a shipped file (``simdist/resources.py``) and ``simdist examples`` are
tested in-process as well, against the source checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from simdist import __version__
from simdist.cli import main
from simdist.examples import copy_example, examples, scenario_references
from simdist.resources import SHIPPED, is_shipped_name, resolve_reference, shipped_file, shipped_root
from simdist.scenario import load_scenario

REPO = Path(__file__).resolve().parents[1]
SOURCE_FOLDERS = ("simdist", "calibration", "scenarios")  # plus the files at the top of the repository


def _shipped_names() -> list[str]:
    """The shipped names the wheel must carry, listed from the repository's folders."""
    return sorted(p.relative_to(REPO).as_posix() for folder, pattern in SHIPPED
                  for p in (REPO / folder).glob(pattern) if p.is_file())


def _check(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from an sdist of a copy of the source tree."""
    pytest.importorskip("setuptools")
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    source.mkdir()
    for path in REPO.iterdir():
        if path.is_file():
            shutil.copy2(path, source / path.name)
    for folder in SOURCE_FOLDERS:
        shutil.copytree(REPO / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    hook = f"from setuptools import build_meta; print(build_meta.build_sdist({str(work / 'sdist')!r}))"
    sdist_name = _check([sys.executable, "-c", hook], cwd=source).stdout.strip().splitlines()[-1]
    with tarfile.open(work / "sdist" / sdist_name) as archive:
        archive.extractall(work / "unpacked", filter="data")
    (unpacked,) = (work / "unpacked").iterdir()
    _check([sys.executable, "-m", "pip", "wheel", str(unpacked), "--no-deps", "--no-build-isolation", "--no-index",
            "--quiet", "-w", str(work / "dist")], cwd=work)
    (built,) = (work / "dist").glob("simdist-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> dict:
    """A venv with the wheel installed; its python, its ``simdist`` and a clean environment."""
    root = tmp_path_factory.mktemp("venv")
    _check([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(root / "env")], cwd=root)
    python = root / "env" / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    _check([str(python), "-m", "pip", "install", "--no-deps", "--force-reinstall", "--no-index", "--quiet",
            str(wheel)], cwd=root, env=env)  # pip itself comes from the system site-packages
    return {"python": python, "simdist": root / "env" / "bin" / "simdist", "env": env, "root": root}


def test_wheel_carries_every_shipped_file_and_nothing_else_of_the_top_level_folders(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    packaged = sorted(n.removeprefix("simdist/_shipped/") for n in names if n.startswith("simdist/_shipped/"))
    assert packaged == _shipped_names()
    assert "calibration/profiles/host-cpu.yaml" in packaged and "scenarios/quickstart.yaml" in packaged
    assert not [n for n in names if n.split("/")[0] in ("calibration", "scenarios", "tests", "benchmarks")]
    assert "simdist/resources.py" in names and "simdist/examples.py" in names
    with zipfile.ZipFile(wheel) as archive:  # copied byte for byte
        assert archive.read("simdist/_shipped/scenarios/quickstart.yaml") == (REPO / "scenarios/quickstart.yaml").read_bytes()


def test_installed_wheel_runs_the_quickstart_from_outside_the_repository(venv, tmp_path):
    env, simdist = venv["env"], str(venv["simdist"])
    where = _check([str(venv["python"]), "-c", "import simdist; print(simdist.__file__)"], tmp_path, env).stdout
    assert Path(where.strip()).is_relative_to(venv["root"]), f"simdist imported from {where}, not from the wheel"
    assert _check([simdist, "--version"], tmp_path, env).stdout.strip() == f"simdist {__version__}"
    listed = _check([simdist, "examples"], tmp_path, env).stdout.splitlines()
    assert any(line.split()[0] == "quickstart" and "MLP on digits" in line for line in listed)
    assert any(line.startswith("faults/sync_node_crash ") for line in listed)
    _check([simdist, "examples", "copy", "quickstart"], tmp_path, env)
    assert (tmp_path / "quickstart.yaml").read_bytes() == (REPO / "scenarios/quickstart.yaml").read_bytes()
    _check([simdist, "run", "quickstart.yaml", "--out", "out", "--set", "stop.steps=3", "--quiet"], tmp_path, env)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["status"] == "step_limit"


def test_installed_wheel_reads_its_own_profiles_and_a_shipped_overlay_by_name(venv, tmp_path):
    (tmp_path / "mine.yaml").write_text((REPO / "scenarios/quickstart.yaml").read_text())
    probe = ("from simdist.platform.compute import default_profile_paths\n"
             "from simdist.scenario import load_scenario\n"
             "print(*default_profile_paths(), sep='\\n')\n"
             "s = load_scenario('mine.yaml', ['platform.overlays=[calibration/platforms/host-shm.yaml]'])\n"
             "print('tables', len(s.platform.collectives.tables))\n")
    lines = _check([str(venv["python"]), "-c", probe], tmp_path, venv["env"]).stdout.splitlines()
    profiles = [Path(line) for line in lines[:-1]]
    assert [p.name for p in profiles] == sorted(p.name for p in (REPO / "calibration/profiles").glob("*.yaml"))
    assert all(p.is_relative_to(venv["root"]) for p in profiles)
    assert lines[-1] == "tables 1"  # host-shm.yaml's measured allreduce table was merged in


def test_installed_examples_copy_onto_an_existing_file_fails_and_leaves_it(venv, tmp_path):
    mine = tmp_path / "quickstart.yaml"
    mine.write_text("# my own scenario\n")
    done = subprocess.run([str(venv["simdist"]), "examples", "copy", "quickstart", "."], cwd=tmp_path,
                          env=venv["env"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "already exists" in done.stderr and "quickstart.yaml" in done.stderr
    assert mine.read_text() == "# my own scenario\n"


# --- the same rules against the source checkout (an editable install), in-process -------------

def test_checkout_reads_the_top_level_folders_in_place():
    assert shipped_root() == REPO  # no copy: an edit to calibration/ or scenarios/ shows at once
    assert shipped_file("calibration/platforms/host-shm.yaml") == REPO / "calibration/platforms/host-shm.yaml"
    assert {e.name for e in examples()} == {p.relative_to(REPO / "scenarios").with_suffix("").as_posix()
                                            for p in (REPO / "scenarios").glob("**/*.yaml")}


def test_shipped_names_are_repository_paths_under_the_shipped_folders():
    assert is_shipped_name("calibration/profiles/host-cpu.yaml")
    assert is_shipped_name("scenarios/faults/sync_node_crash.yaml")
    for name in ("../calibration/profiles/host-cpu.yaml", "/calibration/profiles/host-cpu.yaml",
                 "calibration/profiles/../platforms/host-shm.yaml", "./calibration/profiles/host-cpu.yaml",
                 "calibration/traces/README.md", "calibration/profiles/sub/x.yaml", "calibration/profiles/x.txt"):
        assert not is_shipped_name(name), name


def test_a_local_file_wins_over_the_shipped_file_of_the_same_name(tmp_path):
    name = "calibration/platforms/host-shm.yaml"
    assert resolve_reference(tmp_path, name) == REPO / name
    (tmp_path / name).parent.mkdir(parents=True)
    (tmp_path / name).write_text("node: {}\n")
    assert resolve_reference(tmp_path, name) == tmp_path / name
    assert resolve_reference(tmp_path, "missing.yaml") == tmp_path / "missing.yaml"  # reported by the caller


def test_every_example_copies_out_and_loads_where_it_was_copied(tmp_path):
    for entry in examples():
        dest = tmp_path / entry.name.replace("/", "-")
        written = copy_example(entry.name, dest)
        assert written[0] == dest / entry.path.name
        load_scenario(written[0])


def test_copy_takes_along_a_file_the_scenario_refers_to_that_is_not_shipped(tmp_path, monkeypatch):
    shipped = tmp_path / "shipped"
    (shipped / "scenarios").mkdir(parents=True)
    (shipped / "calibration" / "platforms").mkdir(parents=True)
    (shipped / "scenarios" / "net.yaml").write_text("node: {intra_link: {kind: shm, latency: 2us}}\n")
    (shipped / "scenarios" / "ex.yaml").write_text(
        "# An example with an overlay beside it\nname: ex\n"
        "platform: {preset: laptop-cpu, overlays: [net.yaml, calibration/platforms/host-shm.yaml]}\n")
    shutil.copy(REPO / "calibration/platforms/host-shm.yaml", shipped / "calibration/platforms/host-shm.yaml")
    monkeypatch.setattr("simdist.examples.shipped_root", lambda: shipped)
    monkeypatch.setattr("simdist.resources.shipped_root", lambda: shipped)
    assert scenario_references({"platform": {"overlays": ["net.yaml"]}, "compare": [
        {"label": "b", "set": {"platform.file": "p.yaml", "compute.profiles": ["q.yaml"]}}]}) == ["net.yaml", "p.yaml",
                                                                                                  "q.yaml"]
    written = copy_example("ex", tmp_path / "out")
    assert written == [tmp_path / "out" / "ex.yaml", tmp_path / "out" / "net.yaml"]  # host-shm.yaml is shipped


def test_examples_copy_refuses_an_unknown_name_and_an_existing_file(tmp_path, capsys):
    assert main(["examples", "copy", "quickstrat", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown example 'quickstrat'; known: " in err and "quickstart" in err
    assert main(["examples", "copy", "quickstart.yaml", str(tmp_path)]) == 0
    before = (tmp_path / "quickstart.yaml").read_bytes()
    assert main(["examples", "copy", "quickstart", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (tmp_path / "quickstart.yaml").read_bytes() == before
    (tmp_path / "afile").write_text("x")
    assert main(["examples", "copy", "quickstart", str(tmp_path / "afile")]) == 2
    assert "not a folder" in capsys.readouterr().err


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"simdist {__version__}"
