"""Fuzz every input boundary of the command line: >= 10,000 generated inputs, failures kept.

Inputs come from ``tests/fuzz_generators.py`` (scenarios walked from the JSON Schema and
shrunk to tiny, their one-field and YAML-text mutations, mutated platform files, compute
profiles and measured traces, odd command lines); each case is checked by
``tests/fuzz_harness.py`` against the command-line promise: exit 0, or exit 2 with one line
``simdist: error: ...``; no traceback; no hang; no NaN/inf in outputs; nothing outside
``--out`` touched. Case ``i`` of seed ``s`` is drawn from its own random stream, so any case
can be drawn again alone.

Cases run in worker processes, each a fresh process for at most ``--chunk`` cases, capped at
``--memory-gib`` of address space (an input that exhausts memory is a failure, not the
host's problem). A worker that stops answering for twice ``--timeout-s`` is killed and its
case counted as a hang; one that dies is counted as a crash. Each failing case's inputs,
command line and stderr are written under ``--out/<index>-<class>/`` for reproduction.
Prints a table (cases, accepted, rejected, each failure class next to its target of 0, wall
time) and the failures grouped by where they arise; exits 1 if any case failed.

    python benchmarks/fuzz_inputs.py [--cases 10000] [--seed 0] [--jobs 2] [--timeout-s 20] [--out fuzz-failures]
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import re
import resource
import shlex
import shutil
import sys
import tempfile
import time
from multiprocessing.connection import wait
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fuzz_generators import FAMILIES, Case, case_for_seed, warm_up_case  # noqa: E402
from fuzz_harness import FAILURE_CLASSES  # noqa: E402

CLASSES = (*FAILURE_CLASSES, "crash")


def worker(first: int, last: int, seed: int, timeout_s: float, memory_bytes: int, failures_dir: str, conn) -> None:
    """Run cases ``first..last-1`` and report each on ``conn`` (a fresh process per chunk)."""
    from fuzz_harness import run_case

    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, resource.getrlimit(resource.RLIMIT_AS)[1]))
    sandbox = Path(tempfile.mkdtemp(prefix="simdist-fuzz-"))
    try:
        run_case(warm_up_case(), sandbox / "case", timeout_s=300)
        for index in range(first, last):
            conn.send(("start", index))
            case = case_for_seed(seed, index)
            outcome = run_case(case, sandbox / "case", timeout_s=timeout_s)
            if outcome.failures:
                save_failure(Path(failures_dir), index, case, outcome.failures, outcome.stderr)
            conn.send(("done", index, case.family, outcome.status, case.invalid, outcome.failures, outcome.seconds))
            # An interrupted import or allocation, or a thread pool a run left behind (compute.threads:
            # 256 keeps 256 idle OpenMP threads, 3 GiB of address space), is no state to run the next case in.
            spoiled = any(kind in ("hang", "out-of-memory") for kind, _ in outcome.failures)
            if (spoiled or _address_space() > memory_bytes / 2) and index + 1 < last:
                conn.send(("retire", index + 1))
                break
    finally:
        shutil.rmtree(sandbox, ignore_errors=True)
        conn.send(("exit",))
        conn.close()


def _address_space() -> int:
    """Bytes of address space this process holds (what RLIMIT_AS caps)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


def save_failure(top: Path, index: int, case: Case, failures: list[tuple[str, str]], stderr: str) -> Path:
    """``top/<index>-<class>/``: the case's files, a command line to reproduce it, stderr, the findings."""
    folder = top / f"{index:06d}-{failures[0][0]}"
    shutil.rmtree(folder, ignore_errors=True)
    for rel, content in case.files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogateescape"))
    (folder / "cwd").mkdir(parents=True, exist_ok=True)
    for rel in case.dirs:
        (folder / rel).mkdir(parents=True, exist_ok=True)
    out = case.out.replace("{root}", str(folder))
    argv = [a.replace("{root}", str(folder)).replace("{out}", out) for a in case.argv]
    shown = " ".join(shlex.quote(a) if len(a) < 300 else shlex.quote(a[:60]) + "...(" + str(len(a)) + " chars)"
                     for a in argv)
    setup = "".join(f"mkfifo {shlex.quote(str(folder / f))}\n" for f in case.fifos)
    (folder / "command.sh").write_text(f"{setup}cd {shlex.quote(str(folder / 'cwd'))} && python -m simdist {shown}\n")
    (folder / "argv.json").write_text(json.dumps(argv))
    (folder / "stderr.txt").write_text(stderr, errors="replace")
    (folder / "finding.json").write_text(json.dumps({"index": index, "family": case.family, "what": case.what,
                                                      "certainly_invalid": case.invalid, "failures": failures},
                                                     indent=2))
    return folder


class Tally:
    """Counts per outcome and family, and failures grouped by where they arise."""

    def __init__(self):
        self.run = 0
        self.status = collections.Counter()
        self.invalid_rejected = 0
        self.classes = collections.Counter()
        self.failing = 0
        self.families = collections.defaultdict(collections.Counter)
        self.groups: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
        self.seconds: list[float] = []
        self.retries: collections.Counter = collections.Counter()  # chunks whose worker died between cases

    def add(self, index: int, family: str, status: int | None, invalid: bool, failures: list, seconds: float) -> None:
        self.run += 1
        self.status[status] += 1
        self.invalid_rejected += invalid and status == 2
        self.families[family]["run"] += 1
        self.families[family][{0: "exit 0", 2: "exit 2"}.get(status, "other")] += 1
        self.seconds.append(seconds)
        if failures:
            self.failing += 1
            self.families[family]["failing"] += 1
        for kind, detail in {(k, d) for k, d in failures}:
            self.classes[kind] += 1
            self.groups[(kind, group_key(kind, detail))].append(index)


def group_key(kind: str, detail: str) -> str:
    """What a failure's root cause looks like: the exception and its place, or its message
    with paths, numbers, quoted values and ids blurred."""
    where = re.search(r"\[([^\]]+:\d+ in [^\]]+)\]$", detail) or re.search(r"at (\S+:\d+ in \S+)", detail)
    if where:
        head = re.split(r"[:\[]", detail, maxsplit=1)[0].strip() if kind in ("traceback", "out-of-memory") else ""
        return f"{head} {where.group(1)}".strip()
    text = re.sub(r"\[[0-9a-f]{8,}\]", "[ID]", detail)
    text = re.sub(r"=\S*", "=V", re.sub(r"'[^']*'", "'S'", text))
    text = re.sub(r"/\S*", "PATH", text)
    return re.sub(r"-?\d[\d.e+-]*", "N", text)[:100]


def run(args) -> Tally:
    """Run every case in ``args.jobs`` worker processes; the tally of what they did."""
    failures_dir = Path(args.out)
    failures_dir.mkdir(parents=True, exist_ok=True)
    context = multiprocessing.get_context("fork")
    pending = collections.deque((s, min(s + args.chunk, args.cases)) for s in range(0, args.cases, args.chunk))
    active: dict = {}  # conn -> [process, (first, last) of its chunk not yet done, current index, started at]
    tally = Tally()
    progress = Progress(args.cases)
    hard_limit_s = 2 * args.timeout_s + 30  # beyond the in-process timer: a hang in C code
    while pending or active:
        while pending and len(active) < args.jobs:
            first, last = pending.popleft()
            receive, send = context.Pipe(duplex=False)
            process = context.Process(target=worker, args=(first, last, args.seed, args.timeout_s,
                                                          int(args.memory_gib * 2**30), str(failures_dir), send))
            process.start()
            send.close()
            active[receive] = [process, (first, last), None, time.monotonic()]
        for conn in wait(list(active), timeout=1.0):
            state = active[conn]
            try:
                message = conn.recv()
            except (EOFError, OSError):  # the worker died mid-case
                state[0].join(10)
                code = state[0].exitcode
                how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
                _lost(args, tally, pending, state, "crash", f"worker process died ({how}) without a Python exception")
                _retire(active, conn)
                continue
            if message[0] == "start":
                state[2], state[3] = message[1], time.monotonic()
            elif message[0] == "done":
                tally.add(*message[1:])
                state[1], state[2] = (message[1] + 1, state[1][1]), None  # what is left of its chunk
                progress.update(tally)
            elif message[0] == "retire":
                pending.appendleft((message[1], state[1][1]))
                state[1] = (state[1][1], state[1][1])
            else:
                _retire(active, conn)
        now = time.monotonic()
        for conn, state in list(active.items()):
            if state[2] is not None and now - state[3] > hard_limit_s:
                state[0].kill()
                _lost(args, tally, pending, state, "hang", f"no answer for {hard_limit_s:g} s (killed)")
                _retire(active, conn)
    progress.close()
    return tally


def _lost(args, tally: Tally, pending, state, kind: str, detail: str) -> None:
    """Count the case a dead or killed worker was running, save it, and queue the rest of its chunk."""
    process, (first, last), index, _ = state
    process.join(5)
    if index is None:  # died between cases (its warm-up, say): run the rest again, twice at most
        tally.retries[(first, last)] += 1
        if first < last and tally.retries[(first, last)] <= 2:
            pending.appendleft((first, last))
        return
    case = case_for_seed(args.seed, index)
    save_failure(Path(args.out), index, case, [(kind, detail)], "")
    tally.add(index, case.family, None, case.invalid, [(kind, detail)], 0.0)
    if index + 1 < last:
        pending.appendleft((index + 1, last))


def _retire(active: dict, conn) -> None:
    process = active.pop(conn)[0]
    conn.close()
    process.join(5)
    if process.is_alive():
        process.kill()


class Progress:
    """A rich progress bar on a terminal; otherwise a line every tenth of the run."""

    def __init__(self, total: int):
        self.total, self.next_line = total, max(1, total // 10)
        self.bar = None
        if sys.stderr.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("fuzzing"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                TextColumn("{task.fields[failing]} failing"), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("fuzz", total=total, failing=0)

    def update(self, tally: Tally) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=tally.run, failing=tally.failing)
        elif tally.run >= self.next_line:
            print(f"  {tally.run}/{self.total} cases, {tally.failing} failing", file=sys.stderr, flush=True)
            self.next_line += max(1, self.total // 10)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def report(tally: Tally, args, wall_s: float) -> str:
    accepted, rejected = tally.status[0], tally.status[2]
    lines = [f"fuzzed {tally.run} inputs (seed {args.seed}, {args.jobs} jobs, {args.timeout_s:g} s per case) "
             f"in {wall_s:.1f} s wall",
             "", f"{'':34}{'count':>8}{'target':>8}",
             f"{'cases run':34}{tally.run:>8}",
             f"{'valid accepted (exit 0)':34}{accepted:>8}",
             f"{'rejected (exit 2)':34}{rejected:>8}",
             f"{'  of them certainly invalid':34}{tally.invalid_rejected:>8}",
             "failure classes (a case may show several):"]
    for kind in CLASSES:
        lines.append(f"{'  ' + kind:34}{tally.classes[kind]:>8}{0:>8}")
    lines.append(f"{'failing cases':34}{tally.failing:>8}{0:>8}")
    mean = sum(tally.seconds) / max(1, len(tally.seconds))
    lines.append(f"{'wall time (s)':34}{wall_s:>8.1f}   ({mean * 1000:.0f} ms per case on average)")
    lines += ["", f"{'family':10}{'run':>7}{'exit 0':>8}{'exit 2':>8}{'failing':>9}"]
    for family in FAMILIES:
        c = tally.families[family]
        lines.append(f"{family:10}{c['run']:>7}{c['exit 0']:>8}{c['exit 2']:>8}{c['failing']:>9}")
    if tally.groups:
        lines += ["", f"failures by place (inputs under {args.out}/<index>-<class>/):"]
        for (kind, key), indexes in sorted(tally.groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            example = min(indexes)
            lines.append(f"  {len(indexes):>5}  {kind:18} {key[:90]}  (e.g. case {example})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10_000, help="inputs to generate and run (default 10000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the run: case i is drawn from seed and i")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes (default 2)")
    parser.add_argument("--timeout-s", type=float, default=20.0, help="wall-clock limit per case (default 20)")
    parser.add_argument("--chunk", type=int, default=250, help="cases per worker process (default 250)")
    parser.add_argument("--memory-gib", type=float, default=4.0, help="address-space cap per worker (default 4)")
    parser.add_argument("--out", default="fuzz-failures", help="folder for failing cases (default fuzz-failures)")
    args = parser.parse_args(argv)
    if args.cases < 1 or args.jobs < 1 or args.chunk < 1 or args.timeout_s <= 0:
        parser.error("--cases, --jobs, --chunk and --timeout-s must be positive")
    start = time.perf_counter()
    tally = run(args)
    print(report(tally, args, time.perf_counter() - start), flush=True)
    return 1 if tally.failing else 0


if __name__ == "__main__":
    sys.exit(main())
