"""Groups at scale: the members of a collective share one group whose ranks hash once and
find a rank without a scan, and behave exactly as the plain tuple of those ranks."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

from simdist.recorder import Recorder
from simdist.runtime.base import Group, Ranks


def test_ranks_equal_and_hash_like_the_plain_tuple():
    ranks = Ranks([3, 1, 2])
    assert ranks == (3, 1, 2) and (3, 1, 2) == ranks
    assert hash(ranks) == hash((3, 1, 2))
    assert hash((ranks, 5)) == hash(((3, 1, 2), 5))
    assert {(3, 1, 2): "x"}[ranks] == "x" and {ranks: "y"}[(3, 1, 2)] == "y"
    assert repr(ranks) == "(3, 1, 2)" and list(ranks) == [3, 1, 2] and ranks[1:] == (1, 2)


def test_ranks_membership_and_position_as_a_tuple():
    ranks = Ranks([4, 7, 4, 9])
    assert 7 in ranks and 5 not in ranks and 7.0 in ranks and [7] not in ranks
    assert ranks.index(4) == 0 and ranks.index(9) == 3 and ranks.index(4, 1) == 2
    with pytest.raises(ValueError):
        ranks.index(5)


def test_ranks_survive_copy_and_pickle():
    ranks = Ranks([0, 2])
    for again in (copy.copy(ranks), copy.deepcopy(ranks), pickle.loads(pickle.dumps(ranks))):
        assert again == ranks and hash(again) == hash(ranks) and 2 in again and again.index(2) == 1


def test_members_naming_the_same_ranks_share_one_group(make_world):
    world = make_world(4)
    first = world.runtime(0).group([0, 1, 2, 3], "world")
    assert world.runtime(3).group((0, 1, 2, 3), "world") is first
    assert world.runtime(1).group([0, 1], "pair") is not first
    assert type(first.ranks) is Ranks and first == Group((0, 1, 2, 3), "world")
    assert 2 in first and first.index(3) == 3 and first.size == 4


def test_every_member_of_an_allreduce_gets_the_sum(make_world, run_world):
    world = make_world(4, fidelity="analytic")
    results = {}

    def member(rt):
        request = rt.allreduce(rt.group(range(4), "world"), torch.full((2,), float(rt.rank)))
        results[rt.rank] = (yield request).tolist()

    run_world(world, {rank: member for rank in range(4)})
    assert results == {rank: [6.0, 6.0] for rank in range(4)}


def test_a_span_without_args_reads_back_with_an_empty_dict():
    recorder = Recorder()
    recorder.span(0, "compute", "forward/backward", 0.0, 1.0)
    recorder.span(1, "comm", "allreduce", 0.5, 1.5, blocking=False, bytes=8)
    plain, with_args = recorder.spans
    assert plain.args == {} and with_args.args == {"bytes": 8} and not with_args.blocking
    assert recorder.span_columns()["rank"].tolist() == [0, 1]
