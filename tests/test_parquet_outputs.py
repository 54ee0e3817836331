"""Parquet tables beside the CSVs (simdist run --parquet): the same data, typed; read back alike."""

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from simdist.cli import main
from simdist.result_files import load_result_dir
from simdist.results import parquet_table

REPO = Path(__file__).resolve().parents[1]
TABLES = ("steps", "evals", "workers", "links", "events", "ledger")


@pytest.fixture(scope="module")
def daso_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("pq") / "daso"
    code = main(["run", str(REPO / "scenarios" / "daso_small.yaml"), "--set", "stop.steps=12", "--no-plots",
                 "--parquet", "--quiet", "--out", str(out)])
    assert code == 0
    return out


def test_every_table_is_written_as_parquet_with_the_csv_s_rows_and_columns(daso_dir):
    for name in TABLES:
        csv = pd.read_csv(daso_dir / f"{name}.csv")
        parquet = pd.read_parquet(daso_dir / f"{name}.parquet")
        assert list(parquet.columns) == list(csv.columns), name
        assert len(parquet) == len(csv) > 0, name
        for column in csv.columns:
            if pd.api.types.is_numeric_dtype(csv[column]):
                # the CSV holds 12 significant digits; Parquet the exact doubles
                assert parquet[column].astype(float).to_numpy() == pytest.approx(
                    csv[column].astype(float).to_numpy(), rel=1e-10, nan_ok=True), (name, column)


def test_the_manifest_lists_the_parquet_files(daso_dir):
    files = json.loads((daso_dir / "manifest.json").read_text())["files"]
    assert {f"{name}.parquet" for name in TABLES} <= set(files)


def test_a_directory_holding_only_parquet_tables_loads_as_the_csvs_do(daso_dir, tmp_path):
    only = tmp_path / "only-parquet"
    only.mkdir()
    for path in daso_dir.iterdir():
        if path.suffix != ".csv":
            (only / path.name).write_bytes(path.read_bytes())
    from_csv, from_parquet = load_result_dir(daso_dir), load_result_dir(only)
    for name in TABLES:
        a, b = getattr(from_csv, name), getattr(from_parquet, name)
        assert list(a.columns) == list(b.columns) and len(a) == len(b), name
    pd.testing.assert_frame_equal(from_csv.steps, from_parquet.steps, check_exact=False, rtol=1e-10,
                                  check_dtype=False)


def test_a_column_of_mixed_types_is_stored_as_text(tmp_path):
    table = pd.DataFrame({"kind": ["a", "b", "c"], "value": [1, "two", None], "x": [1.0, float("nan"), 2.0]})
    stored = parquet_table(table)
    assert list(stored["value"][:2]) == ["1", "two"] and pd.isna(stored["value"][2])  # missing stays missing
    assert stored["x"].dtype == float  # a numeric column is left alone
    assert list(table["value"]) == [1, "two", None]  # the table itself is not changed
    stored.to_parquet(tmp_path / "t.parquet", index=False)
    assert list(pd.read_parquet(tmp_path / "t.parquet")["value"][:2]) == ["1", "two"]


def test_without_pyarrow_the_run_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now raises ImportError
    out = tmp_path / "never"
    code = main(["run", str(REPO / "scenarios" / "quickstart.yaml"), "--set", "stop.steps=2", "--parquet",
                 "--out", str(out)])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pyarrow" in err[0] and "--parquet" in err[0]
    assert not out.exists()
