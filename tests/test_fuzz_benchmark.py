"""The input-fuzzing benchmark runs end to end at a tiny size and prints its table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "fuzz_inputs.py"


def test_thirty_cases_print_the_table_and_keep_each_failure(tmp_path):
    failures = tmp_path / "failures"
    done = subprocess.run([sys.executable, str(BENCHMARK), "--cases", "30", "--jobs", "1", "--timeout-s", "8",
                           "--out", str(failures)], capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr  # 1: some case failed (its input is kept)
    table = done.stdout
    assert "fuzzed 30 inputs" in table and "cases run" in table
    for row in ("valid accepted (exit 0)", "rejected (exit 2)", "data-loss", "traceback", "hang", "accepted-invalid",
                "non-finite-output", "failing cases", "wall time (s)"):
        assert row in table, row
    run = int(next(line.split()[-1] for line in table.splitlines() if line.startswith("cases run")))
    assert run == 30
    failing = int(next(line.split()[2] for line in table.splitlines() if line.startswith("failing cases")))
    kept = sorted(failures.iterdir())
    assert len(kept) == failing and (done.returncode == 1) == (failing > 0)
    for folder in kept:  # each failure can be replayed from its folder
        assert (folder / "command.sh").is_file() and (folder / "stderr.txt").is_file()
        assert json.loads((folder / "finding.json").read_text())["failures"]
