"""benchmarks/time_slices_check.py: the simulated half of its comparison, and its bad arguments."""

from __future__ import annotations

import pytest

from helpers import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("time_slices_check")


def test_a_simulated_pair_ends_a_slice_remainder_apart(bench):
    # 6 ms each on one core, 4 ms slices from a tick: rank 0 runs 0-4 and 8-10, rank 1 4-8 and 10-12
    assert bench.simulated_gaps(0.004, 0.0, [(0.006, 0.006)]) == pytest.approx([0.002])
    # spread over a slice: the second pair starts 2 ms after a tick, so rank 0 runs to the tick at 4 ms
    # (2 ms), rank 1 to 8 ms, rank 0 to 12 ms (6 ms done), rank 1 to 14 ms: 2 ms apart again
    gaps = bench.simulated_gaps(0.004, 0.0, [(0.006, 0.006), (0.006, 0.006)])
    assert gaps == pytest.approx([0.002, 0.002])
    assert bench.simulated_gaps(0.004, 0.0, [(0.002, 0.002)]) == pytest.approx([0.002])  # within a slice: one after the other


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--steps", "x"], ["--repeats", "1"], ["--core", "9999"]])
def test_bad_arguments_exit_2(bench, argv, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2 and "error" in capsys.readouterr().err
