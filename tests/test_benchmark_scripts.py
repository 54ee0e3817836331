"""The replay-overhead benchmark runs end to end at a tiny size, and its pairing is as documented."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from helpers import load_benchmark

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "replay_overhead.py"


def _module():
    return load_benchmark("replay_overhead")


def test_each_simulator_run_sits_between_two_runs_of_every_naive_loop():
    bench, calls = _module(), []

    def recorder(name):
        def run():
            calls.append(name)
            return len(calls)
        return run

    sim, first, second = bench.paired_runs(2, recorder("sim"), recorder("a"), recorder("b"))
    assert calls == ["a", "b", "sim", "a", "b", "sim", "a", "b"]
    assert (sim, first, second) == ([3, 6], [1, 4, 7], [2, 5, 8])
    assert bench.sandwiched(first) == [2.5, 5.5]  # the mean of the runs either side


def test_tiny_run_prints_both_replays_and_the_same_sync_math():
    done = subprocess.run([sys.executable, str(BENCHMARK), "--workers", "2", "--steps", "3", "--repeats", "1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    losses = re.search(r"same math: test loss simulator (\S+) vs naive (\S+)", done.stdout)
    assert losses and losses.group(1) == losses.group(2)
    assert "ratio simulator / naive (per-worker)" in done.stdout and "(one model, reference)" in done.stdout
