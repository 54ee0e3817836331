"""The event-floor benchmark: its skeleton schedules exactly the events it says, simdist's count
is per unit, and a tiny run prints both floors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import BENCHMARKS, load_benchmark
from simdist.runtime.environment import CountingEnvironment


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("event_floor")


@pytest.mark.parametrize("ranks, events, units", [(1, 1, 1), (3, 9, 4), (5, 13, 2)])
def test_the_skeleton_schedules_events_per_unit_for_every_rank_and_unit(bench, ranks, events, units):
    env = CountingEnvironment()
    bench.build_skeleton(env, ranks, events, units)
    env.run()
    # each process is also started once and ends once
    assert env.scheduled == ranks * (events * units + 2)


def test_the_fitted_exponent_recovers_a_power_law(bench):
    gpus = [64, 256, 1024, 4096]
    assert bench.exponent(gpus, [3.0 * g ** 1.25 for g in gpus]) == pytest.approx(1.25)


def test_simdist_schedules_a_steady_number_of_events_per_unit(bench):
    nnt = bench.events_per_unit("nnt", 8, 4)
    asgd = bench.events_per_unit("asgd", 8, 4)
    # a compute, an own update, a pack, two sends (each started, moved, delivered) and the
    # neighbours' gradients applied: several events, far from hundreds
    assert 4 < nnt < 30 and 4 < asgd < 30


def test_a_tiny_run_prints_both_floors_against_their_targets():
    done = subprocess.run([sys.executable, str(BENCHMARKS / "event_floor.py"), "--gpus", "4", "8", "--units", "2",
                           "--repeats", "1", "--count-at", "8"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "events per nnt GPU-iteration" in done.stdout and "per applied asgd update" in done.stdout
    assert "ms per iteration" in done.stdout and "us per applied update" in done.stdout
    assert "exponent" in done.stdout


def test_bad_sizes_are_refused_with_exit_2():
    done = subprocess.run([sys.executable, str(BENCHMARKS / "event_floor.py"), "--gpus", "2"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--gpus must be at least 4" in done.stderr
