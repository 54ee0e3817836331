"""Running one generated input in a sandbox and checking the command-line promise.

The promise (``simdist.cli``): bad input gets one line on stderr, ``simdist: error: ...``,
and exit status 2, with no traceback; valid input runs and exits 0; nothing hangs; outputs
hold no NaN or infinity; no file outside ``--out`` is touched.

:func:`run_case` writes a :class:`~fuzz_generators.Case`'s files under a fresh sandbox
(``inputs/``, ``cwd/``), runs ``simdist.cli.main`` in this process with the working
directory set to ``cwd/``, stdout and stderr captured, a wall-clock limit (an interval
timer raising :class:`CaseTimeout`) and optionally an address-space cap, then checks:

* no exception escapes ``main`` (else ``traceback``; ``out-of-memory`` when it is an
  allocation failure; ``hang`` when the time limit struck);
* status 0 or 2 (else ``bad-exit``); status 2 prints exactly one line starting
  ``simdist: error:`` (argparse's own ``simdist run: error:`` too) that names where the
  problem is (an input file, a path or option on the command line), else ``bad-message``;
* a certainly-invalid input does not exit 0 (else ``accepted-invalid``);
* after 0, every JSON, CSV and YAML file under ``--out`` parses and holds only finite
  numbers (else ``non-finite-output``), and nothing in the sandbox outside ``--out``
  changed (else ``data-loss``);
* after 2, nothing in the sandbox changed at all: no ``--out`` left behind
  (``leftover-output``), nothing else created, changed or removed (``data-loss``).

Cases marked ``subprocess`` (a FIFO, ``/dev/zero``) run as ``python -m simdist`` instead,
under the same limits, so that a blocking read cannot take the runner down with it.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fuzz_generators import Case

__all__ = ["Outcome", "CaseTimeout", "FAILURE_CLASSES", "run_case", "prepare", "memory_cap", "output_problem"]

FAILURE_CLASSES = ("data-loss", "traceback", "hang", "accepted-invalid", "non-finite-output", "out-of-memory",
                   "bad-message", "bad-exit", "leftover-output")
_ERROR_LINE = re.compile(r"simdist(?: [a-z-]+)*: error: \S")
_OOM = ("can't allocate memory", "DefaultCPUAllocator", "Cannot allocate memory", "MemoryError", "std::bad_alloc")


class CaseTimeout(BaseException):
    """Raised by the interval timer when a case runs past its wall-clock limit."""


@dataclass
class Outcome:
    """What one case did: exit status (None if it never returned), stderr, and its failures."""

    status: int | None
    stderr: str
    seconds: float
    failures: list[tuple[str, str]] = field(default_factory=list)  # (class, detail)

    @property
    def ok(self) -> bool:
        return not self.failures


def prepare(case: Case, root: Path) -> tuple[list[str], Path, Path]:
    """Write the case's files under ``root``; (argv, cwd, out) with placeholders filled in."""
    shutil.rmtree(root, ignore_errors=True)
    (root / "inputs").mkdir(parents=True)
    (root / "cwd").mkdir()
    cwd = root / "cwd"

    def fill(text: str) -> str:
        return text.replace("{root}", str(root)).replace("{out}", given_out)

    given_out = case.out.replace("{root}", str(root))
    out = cwd / given_out  # an absolute path replaces cwd
    for rel, content in case.files.items():
        path = root / fill(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogateescape"))
    for rel in case.dirs:
        (root / rel).mkdir(parents=True, exist_ok=True)
    for rel in case.fifos:
        os.mkfifo(root / rel)
    argv = [fill(arg) for arg in case.argv]
    return argv, cwd, out


def _snapshot(root: Path, skip: Path | None) -> dict[str, tuple]:
    """Every path under ``root`` (``skip``'s subtree left out) with its type, size and mtime."""
    seen: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if skip is not None:
            dirnames[:] = [n for n in dirnames if not _same(here / n, skip)]
        for name in dirnames:
            seen[str((here / name).relative_to(root)) + "/"] = ("dir",)
        for name in filenames:
            path = here / name
            if skip is not None and _same(path, skip):
                continue
            st = os.lstat(path)
            seen[str(path.relative_to(root))] = (st.st_mode >> 12, st.st_size, st.st_mtime_ns)
    return seen


def _same(a: Path, b: Path) -> bool:
    return os.path.abspath(a) == os.path.abspath(b)


def _diff(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    changes = [f"removed {p}" for p in before if p not in after]
    changes += [f"created {p}" for p in after if p not in before]
    changes += [f"changed {p}" for p in before if p in after and before[p] != after[p]]
    return sorted(changes)


@contextlib.contextmanager
def memory_cap(extra_bytes: int | None):
    """Cap this process's address space at its current size plus ``extra_bytes`` (None: no cap)."""
    if extra_bytes is None:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        size = int(f.read().split()[0]) * resource.getpagesize()
    limit = size + extra_bytes if hard == resource.RLIM_INFINITY else min(size + extra_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _raise_timeout(signum, frame):
    raise CaseTimeout()


def _where(exc: BaseException) -> str:
    """The innermost simdist frame of a traceback (else the innermost frame): 'file:line in func'."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/simdist/" in f.filename] or frames
    if not ours:
        return "?"
    f = ours[-1]
    return f"{f.filename.rsplit('/simdist/', 1)[-1]}:{f.lineno} in {f.name}"


def _in_process(argv: list[str], cwd: Path, timeout_s: float, memory_bytes: int | None):
    """(status, stdout, stderr, failure or None) of ``simdist.cli.main(argv)`` run here."""
    from simdist.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    previous_dir = os.getcwd()
    previous_handler = signal.signal(signal.SIGALRM, _raise_timeout)
    status, failure = None, None
    try:
        os.chdir(cwd)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        with memory_cap(memory_bytes), contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr), \
                warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                status = main(argv)
            except SystemExit as exc:  # argparse
                status = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        signal.setitimer(signal.ITIMER_REAL, 0)
        for w in caught:  # a fresh process would print each of these on stderr
            stderr.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, ""))
    except CaseTimeout as exc:
        failure = ("hang", f"still running after {timeout_s:g} s, at {_where(exc)}")
    except BaseException as exc:  # noqa: BLE001 - any escape is the failure we look for
        signal.setitimer(signal.ITIMER_REAL, 0)
        last = f"{type(exc).__name__}: {str(exc)[:300]}".splitlines()[0] if str(exc) else type(exc).__name__
        kind = "out-of-memory" if isinstance(exc, MemoryError) or any(s in last for s in _OOM) else "traceback"
        failure = (kind, f"{last} [{_where(exc)}]")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        os.chdir(previous_dir)
    return status, stdout.getvalue(), stderr.getvalue(), failure


_LIMITED_MAIN = ("import resource, runpy, sys; limit = int(sys.argv.pop(1)); "
                 "limit and resource.setrlimit(resource.RLIMIT_AS, (limit, limit)); "
                 "sys.argv[0] = 'simdist'; runpy.run_module('simdist', run_name='__main__')")


def _as_subprocess(argv: list[str], cwd: Path, timeout_s: float, memory_bytes: int | None):
    """The same as :func:`_in_process`, as a ``python -m simdist`` process (start-up not counted)."""
    startup_s = 30.0
    limit = 0 if memory_bytes is None else memory_bytes + (2 << 30)  # python and torch take about 1 GiB
    try:
        done = subprocess.run([sys.executable, "-c", _LIMITED_MAIN, str(limit), *argv], cwd=cwd, capture_output=True,
                              text=True, errors="replace", timeout=timeout_s + startup_s)
    except subprocess.TimeoutExpired:
        return None, "", "", ("hang", f"process still running after {timeout_s + startup_s:g} s")
    failure = None
    if "Traceback (most recent call last)" in done.stderr or done.returncode < 0:
        last = (done.stderr.strip().splitlines() or [f"killed by signal {-done.returncode}"])[-1]
        failure = ("out-of-memory" if any(s in done.stderr for s in _OOM) else "traceback", last[:300])
    return done.returncode, done.stdout, done.stderr, failure


def run_case(case: Case, root: Path, *, timeout_s: float = 10.0, memory_bytes: int | None = None) -> Outcome:
    """Run ``case`` in the sandbox ``root`` (wiped first) and check every invariant."""
    argv, cwd, out = prepare(case, root)
    out_before = _exists(out)
    out_was_file = out_before and _is_file(out)
    before = _snapshot(root, None)
    start = time.perf_counter()
    runner = _as_subprocess if case.subprocess else _in_process
    status, _stdout, stderr, failure = runner(argv, cwd, timeout_s, memory_bytes)
    outcome = Outcome(status, stderr, time.perf_counter() - start)
    if failure is not None:
        outcome.failures.append(failure)
        return outcome
    if status == 0:
        if case.invalid:
            outcome.failures.append(("accepted-invalid", case.what))
        problem = output_problem(out) if not out_was_file else None
        if problem:
            outcome.failures.append(("non-finite-output", problem))
        skip = None if out_was_file else out
        outside = {p: v for p, v in before.items() if skip is None or not _under(root / p, skip)}
        changes = _diff(outside, _snapshot(root, skip))
        if changes:
            outcome.failures.append(("data-loss", "; ".join(changes[:3])))
    elif status == 2:
        lines = stderr.strip().splitlines()
        if len(lines) != 1 or not _ERROR_LINE.match(lines[0]):
            outcome.failures.append(("bad-message", " | ".join(lines)[:300] or "(nothing on stderr)"))
        elif not _names_an_input(lines[0], case, argv):
            outcome.failures.append(("bad-message", f"names no input file or option: {lines[0][:200]}"))
        changes = _diff(before, _snapshot(root, None))
        if not out_before and _exists(out):
            outcome.failures.append(("leftover-output", f"{out.name[:60]} left behind after exit status 2"))
            changes = [c for c in changes if not _under(root / c.split(" ", 1)[1], out)]
        if changes:
            outcome.failures.append(("data-loss", "; ".join(changes[:3])))
    else:
        lines = stderr.strip().splitlines() or ["(nothing on stderr)"]
        shown = " | ".join(dict.fromkeys([lines[0][:200], lines[-1][:200]]))
        outcome.failures.append(("bad-exit", f"exit status {status}: {shown}"))
    return outcome


def _names_an_input(line: str, case: Case, argv: list[str]) -> bool:
    """Whether an error line says where the problem is, as ``NAME:``: one of the case's files,
    an option, a path on its command line or its output folder (argparse's errors, which end
    '(see --help)', name the argument their own way)."""
    if line.endswith("(see --help)"):
        return True
    names = {Path(rel).name for rel in case.files} | {a for a in argv if a.startswith("--")}
    names |= {Path(a).name for a in argv if "/" in a and len(a) < 4096}
    outs = {case.out.replace("{root}", "").rsplit("/", 1)[-1] or case.out} if "{out}" in case.argv else set()
    if "--out" not in case.argv and case.argv[:1] == ["run"]:
        outs.add("results")  # the default output folder, results/<name>
    names.discard("")
    return not names | outs or any(f"{name}:" in line for name in names) or any(f"{o}:" in line or f"{o}/" in line
                                                                                 for o in outs)


def _exists(path: Path) -> bool:
    try:
        os.lstat(path)
    except OSError:  # missing, a name too long, a parent that is no directory, ...
        return False
    return True


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False


def _under(path: Path, top: Path) -> bool:
    path, top = os.path.abspath(str(path).rstrip("/")), os.path.abspath(top)
    return path == top or path.startswith(top.rstrip("/") + "/")


# -- output checks -------------------------------------------------------------------------

def _reject_constant(name: str):
    raise ValueError(f"non-finite constant {name}")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"non-finite number {text}")
    return value


_NONFINITE_TOKENS = {"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity", ".inf",
                     "-.inf", ".nan"}


def _yaml_numbers(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"non-finite number {value}")
    if isinstance(value, dict):
        for item in value.values():
            _yaml_numbers(item)
    elif isinstance(value, list):
        for item in value:
            _yaml_numbers(item)


def output_problem(out: Path) -> str | None:
    """The first output file under ``out`` that does not parse or holds a non-finite number."""
    import numpy as np
    import pandas as pd
    import yaml

    if not _exists(out):
        return None
    files = [out] if out.is_file() else sorted(p for p in out.rglob("*") if p.is_file())
    for path in files:
        name = path.name
        try:
            if name.endswith(".json"):
                json.loads(path.read_text(), parse_constant=_reject_constant, parse_float=_finite_float)
            elif name.endswith(".csv"):
                if path.stat().st_size == 0:
                    continue
                table = pd.read_csv(path, keep_default_na=False, na_values=[""])
                for column in table.columns:
                    values = table[column]
                    if values.dtype.kind in "fiu":
                        bad = values[values.notna() & ~np.isfinite(values.astype(float))]
                    else:
                        bad = values[values.astype(str).str.strip().str.lower().isin(_NONFINITE_TOKENS)]
                    if len(bad):
                        raise ValueError(f"column {column!r} holds {bad.iloc[0]!r}")
            elif name.endswith((".yaml", ".yml")):
                _yaml_numbers(yaml.safe_load(path.read_text()))
        except Exception as exc:  # noqa: BLE001 - any parse failure is the finding
            return f"{path.relative_to(out.parent)}: {type(exc).__name__}: {str(exc)[:200]}"
    return None
