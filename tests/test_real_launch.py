"""simdist.real without running MPI: clear errors when it cannot run, and the CLI's wiring."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from simdist.errors import InputError
from simdist.real import launch
from simdist.validation.cli import add_validate_parser
from simdist.validation import validate

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "quickstart.yaml"


def test_missing_mpiexec_is_an_input_error(monkeypatch, tmp_path):
    monkeypatch.setattr(launch.shutil, "which", lambda name: None)
    with pytest.raises(InputError, match="mpiexec"):
        launch.run_real(SCENARIO, 2, tmp_path / "out")


def test_timing_only_is_refused(tmp_path):
    with pytest.raises(InputError, match="timing_only"):
        validate(SCENARIO, 2, tmp_path, overrides=["workload.timing_only=true"], plots=False)


def test_validate_parser_sets_func():
    parser = argparse.ArgumentParser()
    add_validate_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["validate", str(SCENARIO), "--ranks", "2", "--set", "stop.steps=5"])
    assert callable(args.func) and args.ranks == 2 and args.overrides == ["stop.steps=5"]
