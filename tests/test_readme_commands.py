"""Every shell command in README.md runs as written, at a small size, in README order.

A README whose commands fail is the first thing a user meets; this file runs them all.

Which text is a command (the extraction rule, :func:`readme_commands`):

* every non-blank line of a fenced block tagged ``bash``, ``sh`` or ``console``, and every
  line of an untagged block that starts with ``simdist``, ``python`` or ``$ `` (a console
  prompt: the block's lines after it, up to the next prompt, are the output the README shows,
  and the command must print each of them). A line ending in ``\\`` continues on the next;
  ``# ...`` is a comment, and ``exit N`` in it is the documented exit status, ``status: X``
  the ``status`` the run's ``summary.json`` must hold;
* every inline code span outside fenced blocks that starts with ``simdist `` or ``python ``
  (not ``simdist/...`` or ``simdist.run``): the README's prose hands these to the reader to
  type ("e.g. `simdist run ...`", "Try: ...", the scenario table's command column), apart
  from the names of subcommands in running text (:data:`PROSE_NAMES`);
* a synopsis is not a command: a placeholder (an all-capitals word such as ``SCENARIO`` or
  ``N``), an optional part in brackets (``[--out DIR]``) or alternatives (``a|b``);
* ``A && B`` is one command whose parts run in order, stopping at the first failure.

``python`` fenced blocks are Python, not shell: :func:`test_python_blocks_run` runs them.

How they run:

* cwd is a temporary directory holding symlinks to the repository's ``scenarios/``,
  ``calibration/`` and ``benchmarks/`` (what the commands read by relative path) and a
  ``reports/`` and ``tmp/`` of its own: ``simdist report ... --out reports`` writes there,
  never into the repository's ``reports/``, and ``results/`` starts absent. Commands run in
  README order in that one directory, so ``simdist plot results/quickstart`` finds what the
  quickstart run wrote (run the whole file, not one case: later commands need earlier ones).
  Two exceptions: the scenario table's commands are alternatives (several write
  ``results/<scenario name>``), so each runs in a fresh directory of the same make; a command
  whose :data:`ADJUST` says ``cwd="empty"`` runs in an empty directory (no checkout).
* ``/tmp/...`` in a command becomes ``tmp/...`` in that directory (simdist never replaces an
  existing result folder, so a fixed ``/tmp`` path would fail on the second run).
* ``simdist ...`` runs through ``simdist.cli.main``, the ``simdist`` script's entry point
  (checked against pyproject.toml), and ``python X.py`` / ``python -m M`` through ``runpy``
  as ``__main__`` with ``sys.argv`` as written, in this process: a fresh interpreter costs
  seconds of imports per command on two cores. Anything else (``head``) runs in a shell.
* Small size: ``simdist run|compare|sweep|validate`` get ``--set stop.steps=3 --no-plots``
  appended (:data:`SMALL`; the last ``--set`` of a key wins). Figures are drawn from the
  tables, so leaving them out changes no number; the quickstart run draws them and
  ``simdist plot`` redraws them. :data:`ADJUST` lists every other change, each with its
  reason; :data:`NOT_RUN` the commands never run here and why; :data:`LONG` those run only
  with ``SIMDIST_README_LONG=1`` (minutes, or real MPI runs), and commands that need
  ``mpiexec`` are skipped where it is missing. Every other command must exit 0, or with its
  documented status.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LINKED = ("scenarios", "calibration", "benchmarks")
OWN_FOLDERS = ("reports", "tmp")
SHELL_TAGS = ("bash", "sh", "console")
SMALL = ("--set", "stop.steps=3", "--no-plots")
SHRUNK = ("run", "compare", "sweep", "validate")
LONG_ENV = "SIMDIST_README_LONG"
# a network sweep's fewest sizes: two in the rendezvous fit's range, far enough apart that time must grow
NETWORK_SWEEP = ("--sizes", "0,1KiB,1MiB,4MiB", "--budget-s", "0.02", "--batches", "1")
# a few timed steps at two batch sizes far enough apart that the step time must grow between them
TINY_TIMING = ("--repeats", "3", "--rounds", "1", "--warmup", "1", "--batch-sizes", "8,512")

# Inline spans that name a subcommand in running text ("`simdist sweep` runs every point ..."):
# names, not commands to type.
PROSE_NAMES = frozenset({
    "simdist calibrate", "simdist calibrate compute", "simdist calibrate noise",
    "simdist sweep", "simdist report", "simdist validate",
})


def _reaches_90_percent(out: Path) -> None:
    accuracy = json.loads((out / "summary.json").read_text())["final_test_accuracy"]
    assert accuracy > 0.9, f"the README promises > 90 % test accuracy; the run reached {accuracy}"


@dataclass(frozen=True)
class Adjust:
    """How one command part is run here instead of exactly as written, and why."""

    why: str
    append: tuple[str, ...] = ()
    replace: tuple[tuple[str, str], ...] = ()  # (as written, as run)
    as_written: bool = False                   # no SMALL
    status: int | None = None                  # documented exit status not in a comment
    prints: str = ""                           # text the output must hold
    cwd: str = ""                              # "empty": a directory without the checkout's folders
    check: Callable[[Path], None] | None = None  # called with the --out folder after success


ADJUST: dict[str, Adjust] = {
    "simdist run scenarios/quickstart.yaml --out results/quickstart": Adjust(
        "the README's first run, as written: it promises > 90 % accuracy, and its figures are "
        "what `simdist plot` redraws below", as_written=True, check=_reaches_90_percent),
    "simdist examples copy quickstart": Adjust(
        "'without a checkout': runs in an empty directory, the copied scenario finds its "
        "files among the package's own", cwd="empty"),
    "simdist run scenarios/quickstart.yaml --set evaluation.every_time=1ns --set evaluation.every_steps=null "
    "--out results/qs-refused": Adjust(
        "refused by the work estimate, which fewer steps would lower: as written",
        as_written=True, prints="evaluation.every_time"),
    "simdist run scenarios/quickstart.yaml --set algorithm.name=dasso": Adjust(
        "the Command line section shows it failing ('exits with status 2')", as_written=True, status=2),
    "simdist run scenarios/faults/asgd_worker_crash.yaml --out results/asgd-crash": Adjust(
        "its comment shows the full run's status (under a second as written)", as_written=True),
    "simdist run scenarios/faults/sync_node_crash.yaml --out results/sync-crash": Adjust(
        "its comment shows the full run's status (under a second as written)", as_written=True),
    "python -m simdist.calibrate.compute_profile --out calibration/profiles/host-cpu.yaml": Adjust(
        "must not overwrite the repository's measured profile; a few timed steps per size",
        replace=(("calibration/profiles/host-cpu.yaml", "host-cpu.yaml"),),
        append=(*TINY_TIMING, "--models", "mlp")),
    "simdist calibrate compute --out calibration/profiles/host-cpu.yaml": Adjust(
        "must not overwrite the repository's measured profile; a few timed steps per size",
        replace=(("calibration/profiles/host-cpu.yaml", "host-cpu.yaml"),),
        append=TINY_TIMING),
    "simdist calibrate compute --scenario scenarios/quickstart.yaml": Adjust(
        "its default output is calibration/profiles/scenarios/ in the repository; timed as written "
        "(fewer steps at these close sizes can fit t1 = 0, which it refuses)", append=("--out", "quickstart-profile.yaml")),
    "simdist calibrate network --ranks 2 --out calibration/platforms/host-shm.yaml": Adjust(
        "must not overwrite the repository's fitted overlay; four sizes (two in the rendezvous "
        "fit's range, the fewest it takes, 4x apart so that the larger one's time grows clearly "
        "above a busy host's noise), one short batch each",
        replace=(("calibration/platforms/host-shm.yaml", "host-shm.yaml"),),
        append=NETWORK_SWEEP),
    "simdist calibrate network --ranks 2 --path runtime --out /tmp/net-runtime.yaml": Adjust(
        "four sizes, one short batch each; through the runtime a message pays ~0.1 ms of overhead, "
        "so the two large sizes are megabytes apart (64 and 128 KiB were not told apart under load)",
        append=NETWORK_SWEEP),
    "simdist calibrate cpu-share --ranks 1,2,4": Adjust(
        "its default output is calibration/cpu_share/ in the repository; short rounds",
        append=("--duration-s", "0.05", "--rounds", "1", "--out", "cpu-share.yaml")),
    "python benchmarks/dcs3gd_scaling.py": Adjust(
        "one (nodes, batch) point of the six, 3 steps", append=("--nodes", "32", "--batch", "512", "--steps", "3")),
    "python benchmarks/nsoftsync_staleness.py": Adjust("one n of the four", append=("--n", "2")),
    "python benchmarks/timing_only_scale.py": Adjust(
        "a speed benchmark: 3 steps, one repeat, per-rank reference up to 64 GPUs; the 16,384-GPU run for "
        "one step; the per-algorithm table for two algorithms at 8 and 16 GPUs, 2 steps",
        append=("--steps", "3", "--repeats", "1", "--reference-up-to", "64", "--largest-steps", "1",
                "--algorithms", "sync", "asgd", "--gpus", "8", "16", "--algorithm-steps", "2",
                "--algorithm-repeats", "1")),
    "python benchmarks/timing_only_scale.py --skip-sync-table --gpus 64 256 1024 --algorithms nnt asgd": Adjust(
        "a speed benchmark: the two algorithms at 8 and 16 GPUs, 2 steps, one repeat",
        append=("--gpus", "8", "16", "--algorithm-steps", "2", "--algorithm-repeats", "1")),
    "python benchmarks/timing_only_scale.py --skip-sync-table --largest-steps 0 --algorithms dcs3gd daso "
    "--gpus 64 256 1024":
        Adjust("a speed benchmark: dc-s3gd's and daso's lockstep lanes at 8 and 16 GPUs, 2 steps, one repeat",
               append=("--gpus", "8", "16", "--algorithm-steps", "2", "--algorithm-repeats", "1")),
    "python benchmarks/memory_1024.py": Adjust("3 steps of the 1,024-GPU run", append=("--steps", "3")),
    "python benchmarks/event_floor.py": Adjust(
        "a speed floor: the skeleton at 4 and 8 GPUs, simdist's events counted at 8, 2 units, one repeat",
        append=("--gpus", "4", "8", "--units", "2", "--repeats", "1", "--count-at", "8")),
    "python benchmarks/daso_256gpu_90epochs.py": Adjust(
        "DASO's 90 epochs on 256 GPUs take seconds as written: 8 nodes, 2 epochs", append=("--nodes", "8", "--epochs", "2")),
    "python benchmarks/replay_overhead.py": Adjust(
        "2 workers, 3 steps, one repeat", append=("--workers", "2", "--steps", "3", "--repeats", "1")),
}

NOT_RUN: dict[str, str] = {
    "pip install torch==2.13.0": "an install: the environment these tests run in is its result",
    "pip install -e '.[dev,mpi,dask]'": "an install: the environment these tests run in is its result",
    "python -m pytest -q": "the test suite itself, this file included",
    "python -m pytest -q tests/test_toy_algorithm.py": "a file of the test suite: it runs there",
    "python benchmarks/fuzz_inputs.py --cases 2000 --jobs 2":
        "minutes as written; tests/test_fuzz_benchmark.py runs it with 30 cases",
    "python benchmarks/validation_table.py":
        "every algorithm for real under mpiexec at 2 and 4 ranks: tens of minutes",
    "python benchmarks/daso_vs_horovod.py":
        "writes reports/daso_vs_horovod.csv and .png into the repository (it has no --out)",
    "python benchmarks/daso_parameter_study.py":
        "writes reports/daso_parameter_study.csv into the repository (it has no --out)",
    "python benchmarks/noise_ablation.py":
        "under a minute on two cores, writing reports/noise_ablation.md into the repository; tests/test_noise_ablation.py tests its parts",
    "python benchmarks/nnt_vs_sync.py":
        "minutes (16-node runs at three batch sizes); tests/test_nnt_vs_sync_bench.py tests its parts",
    "python benchmarks/compute_profile_accuracy.py":
        "times real kernels against a profile and waits up to a minute per attempt for idle CPUs: "
        "a measurement of the host, not a command that can pass at a small size",
}

LONG: dict[str, str] = {
    "simdist validate scenarios/quickstart.yaml --ranks 2 --set stop.steps=30 --out results/validate-qs":
        "real runs under mpiexec (pilot, compared run, timings): about a minute even at 3 steps",
    "simdist validate scenarios/quickstart.yaml --ranks 2 --set stop.steps=30 --repeat-real --out results/validate-qs2":
        "real runs under mpiexec, the compared run twice: over a minute even at 3 steps",
}

NEEDS_MPI = ("simdist validate", "simdist calibrate network")


@dataclass(frozen=True)
class ReadmeCommand:
    """One command of README.md: where it is, its text without comment, what the README says of it."""

    line: int
    text: str
    comment: str = ""
    table: bool = False
    shown: tuple[str, ...] = ()

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(part.strip() for part in self.text.split(" && "))

    @property
    def status(self) -> int | None:
        found = re.search(r"\bexit (\d+)", self.comment)
        return int(found.group(1)) if found else None

    @property
    def run_status(self) -> str | None:
        found = re.search(r"\bstatus: (\w+)", self.comment)
        return found.group(1) if found else None


def _split_comment(line: str) -> tuple[str, str]:
    """(command, comment): a ``#`` after whitespace and outside quotes starts the comment."""
    quote = ""
    for index, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index].strip(), line[index + 1:].strip()
    return line.strip(), ""


def is_synopsis(text: str) -> bool:
    """A placeholder word, a bracketed optional part or a|b alternatives: a usage line."""
    for token in shlex.split(text, posix=False):
        if token.startswith(("'", '"')):
            continue
        if token.startswith("[") or re.fullmatch(r"[A-Z][A-Z_]*", token.strip("[].,")) or re.search(r"\w\|\w", token):
            return True
    return False


def _blocks(lines: list[str]) -> list[tuple[str, int, int, list[tuple[int, str]]]]:
    """(tag, opening line number, closing line number, [(line number, text)]) of every fenced block."""
    found, current = [], None
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            if current is None:
                current = (line[3:].strip(), number, [])
            else:
                found.append((current[0], current[1], number, current[2]))
                current = None
        elif current is not None:
            current[2].append((number, line))
    return found


def _joined(body: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Lines with ``\\`` continuations joined, each at its first line's number."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, line in body:
        start, text = pending if pending else (number, "")
        text = f"{text} {line.strip()}".strip()
        if text.endswith("\\"):
            pending = (start, text[:-1].rstrip())
        else:
            pending = None
            out.append((start, text))
    return out


def _block_commands(tag: str, body: list[tuple[int, str]]) -> list[ReadmeCommand]:
    lines = _joined(body)
    if any(text.startswith("$ ") for _, text in lines):
        commands, current = [], None
        for number, text in lines:
            if text.startswith("$ "):
                current = [number, text[2:], []]
                commands.append(current)
            elif current is not None and text:
                current[2].append(text)
        return [ReadmeCommand(number, _split_comment(text)[0], shown=tuple(shown)) for number, text, shown in commands]
    commands = []
    for number, text in lines:
        command, comment = _split_comment(text)
        if not command or (tag == "" and not re.match(r"(simdist|python)(\s|$)", command)):
            continue
        if not is_synopsis(command):
            commands.append(ReadmeCommand(number, command, comment))
    return commands


def _inline_commands(lines: list[str], blocks) -> list[ReadmeCommand]:
    inside = {number for _, start, end, _ in blocks for number in range(start, end + 1)}
    prose = "\n".join("" if number in inside else line for number, line in enumerate(lines, 1))
    commands = []
    for span in re.finditer(r"`([^`]+)`", prose):
        text = " ".join(span.group(1).split())
        if not re.match(r"(simdist|python) ", text) or text in PROSE_NAMES or is_synopsis(text):
            continue
        number = prose.count("\n", 0, span.start()) + 1
        commands.append(ReadmeCommand(number, text, table=lines[number - 1].startswith("|")))
    return commands


def readme_commands(text: str) -> list[ReadmeCommand]:
    """Every command of the README text, in README order (see the module docstring)."""
    lines = text.splitlines()
    blocks = _blocks(lines)
    found = [command for tag, _, _, body in blocks if tag in (*SHELL_TAGS, "") for command in _block_commands(tag, body)]
    found += _inline_commands(lines, blocks)
    return sorted(found, key=lambda command: command.line)


def python_blocks(text: str) -> list[tuple[int, str]]:
    return [(start, "\n".join(line for _, line in body)) for tag, start, _, body in _blocks(text.splitlines()) if tag == "python"]


COMMANDS = readme_commands(README.read_text())


def _case_id(command: ReadmeCommand) -> str:
    return f"L{command.line}: {command.text[:70]}"


# ---------------------------------------------------------------------------- running


def _make_folder(path: Path, linked: bool) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name in LINKED if linked else ():
        (path / name).symlink_to(ROOT / name, target_is_directory=True)
    for name in OWN_FOLDERS:
        (path / name).mkdir(exist_ok=True)
    return path


def _as_run(part: str, adjust: Adjust | None) -> list[str]:
    """The argv a part runs as: /tmp rewritten, the table's replacements and additions applied."""
    text = re.sub(r"(?<![\w./])/tmp/", "tmp/", part)
    for written, run in adjust.replace if adjust else ():
        assert written in text, f"ADJUST replaces {written!r}, which {part!r} no longer holds"
        text = text.replace(written, run)
    argv = shlex.split(text)
    if adjust and adjust.append:
        return argv + list(adjust.append)
    if argv[:1] == ["simdist"] and argv[1:2] and argv[1] in SHRUNK and not (adjust and adjust.as_written):
        return argv + list(SMALL)
    return argv


@contextlib.contextmanager
def _argv(argv: list[str], path_entry: str | None):
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = argv
    if path_entry:
        sys.path.insert(0, path_entry)
    try:
        yield
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def _in_process(argv: list[str]) -> int:
    from simdist.cli import main

    try:
        if argv[0] == "simdist":
            return main(argv[1:]) or 0
        if argv[1] == "-m":
            with _argv(argv[2:], None):
                runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
            return 0
        with _argv(argv[1:], str(Path(argv[1]).resolve().parent)):
            runpy.run_path(argv[1], run_name="__main__")
        return 0
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)


def run_part(argv: list[str], cwd: Path) -> tuple[int, str]:
    """(exit status, stdout + stderr) of one command part run in ``cwd``."""
    if argv[0] == "simdist" or (argv[0] == "python" and len(argv) > 1):
        output = io.StringIO()
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            status = _in_process(argv)
        return status, output.getvalue()
    done = subprocess.run(shlex.join(argv), shell=True, cwd=cwd, capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout + done.stderr


def _out_folder(argv: list[str]) -> Path | None:
    outs = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--out"]
    return Path(outs[-1]) if outs else None


def _skip_reason(part: str) -> str | None:
    if part in NOT_RUN:
        return f"not run: {NOT_RUN[part]}"
    if part in LONG and not os.environ.get(LONG_ENV):
        return f"long ({LONG[part]}); set {LONG_ENV}=1 to run it"
    if part.startswith(NEEDS_MPI) and shutil.which("mpiexec") is None:
        return "needs mpiexec, which this host lacks"
    return None


def _expected_status(command: ReadmeCommand, part: str) -> int:
    """ADJUST's documented status, else the comment's ``exit N`` (it speaks of the last part), else 0."""
    adjust = ADJUST.get(part)
    if adjust and adjust.status is not None:
        return adjust.status
    return command.status if part == command.parts[-1] and command.status is not None else 0


def _check_result_folder(command: ReadmeCommand, part: str, argv: list[str], status: int, cwd: Path, where: str) -> None:
    """A refused run writes nothing; a run that succeeds wrote its --out folder, with the status shown."""
    out = _out_folder(argv)
    if argv[0] != "simdist" or argv[1] not in ("run", "compare", "sweep") or out is None:
        return
    out = out if out.is_absolute() else cwd / out
    if status != 0:
        assert not out.exists(), f"{where}a refused run must write nothing, but {out} exists"
        return
    assert out.is_dir(), f"{where}exit 0 but no result folder {out}"
    if part == command.parts[-1] and command.run_status:
        summary = json.loads((out / "summary.json").read_text())
        assert summary["status"] == command.run_status, f"{where}status {summary['status']}, README: {command.run_status}"
    if part in ADJUST and ADJUST[part].check:
        ADJUST[part].check(out)


def _check_part(command: ReadmeCommand, part: str, argv: list[str], status: int, output: str, cwd: Path) -> None:
    where = f"README.md line {command.line}: {part}\nran as: {shlex.join(argv)}\n"
    expected = _expected_status(command, part)
    assert status == expected, f"{where}exit status {status}, expected {expected}\n{output[-3000:]}"
    shown = list(command.shown) if part == command.parts[-1] else []
    prints = [ADJUST[part].prints] if part in ADJUST and ADJUST[part].prints else []
    for text in prints + shown:
        assert text in output, f"{where}the README shows {text!r}; the command printed:\n{output[-3000:]}"
    _check_result_folder(command, part, argv, status, cwd, where)


@pytest.fixture(scope="module")
def shared_folder(tmp_path_factory) -> Path:
    return _make_folder(tmp_path_factory.mktemp("readme"), linked=True)


@pytest.mark.parametrize("command", COMMANDS, ids=_case_id)
def test_readme_command_runs(command: ReadmeCommand, shared_folder: Path, tmp_path: Path, monkeypatch):
    if any(part in ADJUST and ADJUST[part].cwd == "empty" for part in command.parts):
        cwd = _make_folder(tmp_path / "empty", linked=False)
    elif command.table:
        cwd = _make_folder(tmp_path / "fresh", linked=True)
    else:
        cwd = shared_folder
    monkeypatch.chdir(cwd)
    skipped = []
    for part in command.parts:
        reason = _skip_reason(part)
        if reason:
            skipped.append(f"{part}: {reason}")
            continue
        argv = _as_run(part, ADJUST.get(part))
        status, output = run_part(argv, cwd)
        _check_part(command, part, argv, status, output, cwd)
    if len(skipped) == len(command.parts):
        pytest.skip("; ".join(skipped))


def test_python_blocks_run(tmp_path: Path, monkeypatch):
    """The README's Python examples run as written (in a directory holding the checkout's folders)."""
    blocks = python_blocks(README.read_text())
    assert blocks, "README.md has no python block; drop this test or the rule"
    monkeypatch.chdir(_make_folder(tmp_path, linked=True))
    for line, code in blocks:
        output = io.StringIO()
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            exec(compile(code, f"README.md:{line}", "exec"), {"__name__": "__readme__"})


# ---------------------------------------------------------------------------- the rule itself


def test_the_tables_name_only_commands_the_readme_holds():
    """A stale entry (the README's command changed) would silently stop adjusting or skipping it."""
    parts = {part for command in COMMANDS for part in command.parts}
    text = README.read_text()
    for table, name in ((ADJUST, "ADJUST"), (NOT_RUN, "NOT_RUN"), (LONG, "LONG")):
        stale = sorted(set(table) - parts)
        assert not stale, f"{name} names commands README.md no longer holds: {stale}"
    missing = sorted(name for name in PROSE_NAMES if f"`{name}`" not in " ".join(text.split()))
    assert not missing, f"PROSE_NAMES not in README.md: {missing}"


def test_simdist_script_is_the_entry_point_run_in_process():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["simdist"] == "simdist.cli:main"


def test_extraction_rule_on_a_sample():
    sample = "\n".join([
        "Run `simdist run a.yaml --out r` or `simdist sweep`; see `simdist/cli.py`, `simdist.run`.",
        "| x | `simdist compare b.yaml` |",
        "```bash",
        "simdist run a.yaml \\",
        "  --set k=1   # refused, exit 2",
        "pip install x && simdist list links",
        "```",
        "```",
        "simdist run SCENARIO [--out DIR]",
        "simdist list algorithms|links",
        "simdist schema",
        "```",
        "```",
        "$ simdist run a.yaml --set algorithm.name=x",
        "simdist: error: unknown",
        "```",
        "```python",
        "import simdist",
        "```",
    ])
    found = readme_commands(sample)
    assert [(c.line, c.text) for c in found] == [
        (1, "simdist run a.yaml --out r"), (2, "simdist compare b.yaml"), (4, "simdist run a.yaml --set k=1"),
        (6, "pip install x && simdist list links"), (11, "simdist schema"),
        (14, "simdist run a.yaml --set algorithm.name=x")]
    assert found[1].table and found[2].status == 2 and found[3].parts == ("pip install x", "simdist list links")
    assert found[5].shown == ("simdist: error: unknown",)
    assert python_blocks(sample) == [(17, "import simdist")]
