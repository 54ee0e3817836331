"""benchmarks/host_drift.py: the summary of its windows, a short real run and its bad arguments."""

from __future__ import annotations

import math

import pytest

from helpers import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("host_drift")


def test_the_summary_gives_spread_drift_and_block_means(bench):
    s = bench.summary([1.0, 2.0, 3.0, 4.0] * 3)  # 12 windows: a block of ten and one of two
    assert s["mean_s"] == pytest.approx(2.5) and s["sd_pct"] == pytest.approx(100 * math.sqrt(1.25) / 2.5)
    assert (s["min_s"], s["max_s"]) == (1.0, 4.0)
    assert s["block_means_s"] == pytest.approx([2.3, 3.5])  # 1,2,3,4,1,2,3,4,1,2 then 3,4
    assert bench.summary([1.0, 2.0, 3.0, 4.0, 5.0])["lag1"] == pytest.approx(1.0)  # a slow, steady drift
    assert math.isnan(bench.summary([2.0, 2.0, 2.0])["lag1"])  # no spread: nothing to correlate


def test_windows_time_the_step_in_wall_and_cpu_time(bench):
    calls = []
    windows = bench.window_medians(lambda: calls.append(sum(range(2000))), seconds=0.05, window_s=0.01)
    # every window lasts at least window_s, so at most five fit; a busy host may stretch one
    assert 1 <= len(windows) <= 5 and len(calls) > len(windows)
    assert all(wall > 0 and cpu >= 0 for wall, cpu in windows)


@pytest.mark.parametrize("argv", [["--window-s", "0"], ["--seconds", "1", "--window-s", "2"], ["--batch-size", "0"],
                                  ["--model", "nope"]])
def test_bad_arguments_exit_2(bench, argv, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2 and "error" in capsys.readouterr().err
