"""The malformed-input corpus (tests/data/bad/): every file fails in one line, exit status 2.

Each file under ``tests/data/bad/`` is wrong in exactly one way; ``expected.yaml`` names, per
file, a phrase its error must contain (the field path or what is wrong). Scenario files run
as ``simdist run FILE --out DIR``; platform and profile files are referenced from a valid
scenario written at test time; trace files go through ``simdist calibrate trace FILE``.
Every one must print one line on stderr naming the offending file (the platform, profile
or trace file itself, or the scenario holding the bad field or dangling reference), exit
with status 2, and leave no output directory behind. Most run in-process (fast); a handful
run as real subprocesses to prove there is no traceback. Two inputs are made at test time
instead of being committed: a 50 MB scenario and a 50 MB profile.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simdist.cli import main

from helpers import TINY_PROFILE, tiny_scenario

BAD = Path(__file__).parent / "data" / "bad"
EXPECTED: dict[str, str] = yaml.safe_load((BAD / "expected.yaml").read_text())
CASES = sorted(EXPECTED)


def _host_scenario(tmp_path: Path, **changes) -> Path:
    data = tiny_scenario(name="host", **changes)
    path = tmp_path / "host.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def command_for(rel: str, tmp_path: Path) -> tuple[list[str], Path | None]:
    """The CLI arguments that feed corpus file ``rel`` to simdist, and the --out it must not create."""
    path = str(BAD / rel)
    kind = rel.split("/", 1)[0]
    out = tmp_path / "out"
    if kind == "scenario":
        return ["run", path, "--out", str(out), "--quiet"], out
    if kind == "platform":
        return ["run", str(_host_scenario(tmp_path, platform={"file": path})), "--out", str(out), "--quiet"], out
    if kind == "profile":
        host = _host_scenario(tmp_path, compute={"profiles": [TINY_PROFILE, path]})
        return ["run", str(host), "--out", str(out), "--quiet"], out
    if kind == "trace":
        return ["calibrate", "trace", path, "--summary", str(out / "summary.yaml")], out
    raise AssertionError(f"unknown corpus folder in {rel}")


def message_of(rel: str, tmp_path: Path, capsys) -> str:
    args, out = command_for(rel, tmp_path)
    status = main(args)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert status == 2, (rel, captured.err)
    assert len(lines) == 1, (rel, captured.err)
    assert out is None or not out.exists(), f"{rel}: output left behind"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")], f"{rel}: temporary output left behind"
    return lines[0]


def test_corpus_is_large_and_every_file_is_listed():
    files = sorted(str(p.relative_to(BAD)) for p in BAD.rglob("*") if p.is_file() and p.name not in ("expected.yaml", "README.md"))
    assert files == CASES, "every corpus file needs an expected.yaml entry and vice versa"
    assert len(files) >= 50
    for kind in ("scenario", "platform", "profile", "trace"):
        assert any(f.startswith(kind + "/") for f in files), kind


@pytest.mark.parametrize("rel", CASES)
def test_bad_file_is_one_line_naming_file_field_and_allowed(rel, tmp_path, capsys):
    line = message_of(rel, tmp_path, capsys)
    assert line.startswith("simdist: error: ")
    name = Path(rel).name
    host = tmp_path / "host.yaml"
    assert name in line or (str(host) in line and rel.startswith("platform/")), line
    assert EXPECTED[rel].lower() in line.lower(), line
    assert "Traceback" not in line


def test_corpus_summary(tmp_path_factory, capsys):
    """Prints the number of files and of distinct messages (file names taken out)."""
    messages = {}
    for rel in CASES:
        tmp = tmp_path_factory.mktemp("summary")
        line = message_of(rel, tmp, capsys)
        messages[rel] = re.sub(r"\S*" + re.escape(Path(rel).name) + r"\S*", "FILE", line.replace(str(tmp), "TMP"))
    distinct = len(set(messages.values()))
    with capsys.disabled():
        print(f"\nbad-input corpus: {len(CASES)} files, {distinct} distinct messages")
    assert distinct >= 0.9 * len(CASES)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simdist", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("rel", ["scenario/yaml_alias_bomb.yaml", "profile/binary.yaml"])
def test_subprocess_no_traceback_exit_2(rel, tmp_path):
    args, out = command_for(rel, tmp_path)
    proc = run_cli(*args)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert out is None or not out.exists()


def _fifty_megabytes(path: Path) -> Path:
    with path.open("w") as f:
        f.write("name: huge\n")
        line = "# " + "x" * 1021 + "\n"
        for _ in range(50 * 1024):
            f.write(line)
    return path


def test_fifty_megabyte_scenario_is_refused_unread(tmp_path):
    big = _fifty_megabytes(tmp_path / "huge.yaml")
    proc = run_cli("run", str(big), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    line, = proc.stderr.strip().splitlines()
    assert "huge.yaml" in line and "at most" in line
    assert not (tmp_path / "out").exists()


def test_fifty_megabyte_profile_is_refused(tmp_path, capsys):
    big = _fifty_megabytes(tmp_path / "huge_profile.yaml")
    host = _host_scenario(tmp_path, compute={"profiles": [str(big)]})
    assert main(["run", str(host), "--out", str(tmp_path / "out")]) == 2
    line, = capsys.readouterr().err.strip().splitlines()
    assert "huge_profile.yaml" in line and "at most" in line


def test_bad_override_of_a_good_scenario_leaves_existing_output_alone(tmp_path, capsys):
    host, out = _host_scenario(tmp_path), tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("keep")
    assert main(["run", str(host), "--out", str(out), "--overwrite", "--set", "workers=99"]) == 2
    assert (out / "keep.txt").read_text() == "keep"
    assert "workers" in capsys.readouterr().err
