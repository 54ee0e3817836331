"""The dask backend runs the same points as the local one and gives the identical sweep.csv.

Needs ``simdist[dask]`` (dask.distributed); skipped where it is not installed.
"""

from __future__ import annotations

import pytest

pytest.importorskip("distributed")

from simdist.sweeps import run_sweep  # noqa: E402

from test_sweep import GRID, sweep_file  # noqa: E402


@pytest.mark.slow  # ~15 s: a LocalCluster and a worker process importing torch
def test_dask_local_cluster_equals_local_backend(tmp_path):
    path = sweep_file(tmp_path, GRID)
    local = run_sweep(path, tmp_path / "local", jobs=1)
    dask = run_sweep(path, tmp_path / "dask", backend="dask", jobs=1)
    assert local.ok and dask.ok and sorted(dask.ran) == sorted(local.ran)
    assert (tmp_path / "dask" / "sweep.csv").read_text() == (tmp_path / "local" / "sweep.csv").read_text()
