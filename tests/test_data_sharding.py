"""Per-epoch deterministic sharding and the per-worker batch iterator."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simdist.errors import InputError
from simdist.seeding import numpy_stream
from simdist.training import EpochSharder, ShardIterator


def test_shards_are_disjoint_equal_and_drop_the_tail():
    sharder = EpochSharder(103, 4, seed=7)
    assert sharder.shard_size == 25
    shards = [sharder.shard(0, w) for w in range(4)]
    assert all(len(s) == 25 and s.dtype == np.int64 for s in shards)
    joined = np.concatenate(shards)
    assert len(set(joined.tolist())) == 100
    perm = numpy_stream(7, "data-order/epoch0").permutation(103)
    assert np.array_equal(joined, perm[:100])  # contiguous slices, last 3 dropped
    assert np.array_equal(shards[2], perm[50:75])


def test_each_epoch_reshuffles_deterministically():
    a, b = EpochSharder(50, 2, seed=1), EpochSharder(50, 2, seed=1)
    assert np.array_equal(a.shard(3, 1), b.shard(3, 1))
    assert not np.array_equal(a.shard(0, 0), a.shard(1, 0))
    assert not np.array_equal(a.shard(0, 0), EpochSharder(50, 2, seed=2).shard(0, 0))


def test_more_workers_than_samples_is_an_input_error():
    with pytest.raises(InputError, match="at most 5 workers"):
        EpochSharder(5, 6, seed=0)


def test_iterator_walks_epochs_without_spanning_them():
    sharder = EpochSharder(22, 2, seed=0)  # shard size 11
    it = ShardIterator(sharder, worker=1, max_epochs=2)
    sizes, epochs = [], []
    while (batch := it.next_batch(4)) is not None:
        sizes.append(batch.size)
        epochs.append(batch.epoch)
    assert sizes == [4, 4, 3, 4, 4, 3]
    assert epochs == [0, 0, 0, 1, 1, 1]
    assert it.epoch == 2 and it.epochs_completed == 2.0 and it.samples_consumed == 22
    assert it.next_batch(4) is None


def test_iterator_accepts_a_new_batch_size_each_call():
    sharder = EpochSharder(30, 3, seed=5)  # shard size 10
    it = ShardIterator(sharder, worker=0)
    first = it.next_batch(3)
    second = it.next_batch(5)
    assert np.array_equal(np.concatenate([first.indices, second.indices]), sharder.shard(0, 0)[:8])
    assert it.samples_consumed == 8 and it.epochs_completed == pytest.approx(0.8)
    assert it.next_batch(100).size == 2 and it.epoch == 1
    with pytest.raises(InputError):
        it.next_batch(0)


@settings(max_examples=60, deadline=None)
@given(
    n_samples=st.integers(1, 60),
    n_workers=st.integers(1, 8),
    sizes=st.lists(st.integers(1, 9), min_size=1, max_size=40),
    max_epochs=st.integers(1, 3),
)
def test_iterator_consumes_each_shard_exactly_once_in_order(n_samples, n_workers, sizes, max_epochs):
    if n_workers > n_samples:
        return
    sharder = EpochSharder(n_samples, n_workers, seed=11)
    worker = n_workers - 1
    it = ShardIterator(sharder, worker, max_epochs=max_epochs)
    seen: dict[int, list[int]] = {}
    for i in range(10_000):
        batch = it.next_batch(sizes[i % len(sizes)])
        if batch is None:
            break
        assert 1 <= batch.size <= sizes[i % len(sizes)]
        seen.setdefault(batch.epoch, []).extend(batch.indices.tolist())
        assert it.epochs_completed == pytest.approx(it.samples_consumed / sharder.shard_size)
    assert sorted(seen) == list(range(max_epochs))
    for epoch, indices in seen.items():
        assert indices == sharder.shard(epoch, worker).tolist()


def test_without_shuffling_every_epoch_has_the_one_identity_order_made_once():
    sharder = EpochSharder(103, 4, seed=7, shuffle=False)
    first = sharder.permutation(0)
    assert np.array_equal(first, np.arange(103)) and sharder.permutation(5) is first
    assert np.array_equal(sharder.shard(3, 1), np.arange(25, 50))


def test_a_timing_only_run_shards_without_shuffling_and_a_replay_run_with():
    from pathlib import Path

    from simdist.scenario import load_scenario
    from simdist.simulate import Simulation

    path = Path(__file__).parents[1] / "scenarios" / "quickstart.yaml"
    replay = Simulation(load_scenario(path), None)
    timing = Simulation(load_scenario(path, ["workload.timing_only=true", "stop.target_accuracy=null"]), None)
    assert replay.algorithm.data[0].sharder.shuffle and not timing.algorithm.data[0].sharder.shuffle
