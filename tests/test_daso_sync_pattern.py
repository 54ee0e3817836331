"""DASO's global-sync mechanics, read from what a run records (docs/algorithms.md §5).

Every case runs 2 nodes × 2 CPU ranks (``laptop-cpu``, one NIC per node), timing-only (the
mechanics do not depend on the numbers trained), an MLP 8-16-3 on 400 synthetic training samples:
100 per worker, batches of 10, so 10 batches per epoch. What a run records and is read here:

* ``global_sync`` events, one per sync, by the group's node-0 member: ``group``, ``S`` (batches it
  actually waited), ``blocking``, ``B``, ``step`` (the batch after which it was merged; a blocking
  sync is merged after the batch that started it), so it started after batch ``step − S``;
* spans of each rank's own work: ``pack parameters bf16`` / ``unpack parameters bf16`` (a blocking
  sync's casts), ``pack parameters`` and ``update: global merge`` (a non-blocking sync's float32 send
  buffer and merge), the non-blocking ``allreduce`` comm span of the global group, and one
  ``forward/backward`` span per batch, which places every other span after a batch;
* ``update`` rows, whose staleness is the number of local steps since the last merge.

The expected pattern is written out from the documented rules (:func:`expected_syncs`): with
``schedule: fixed`` a send after every B-th batch, counted across epochs; a blocking sync (S = 0)
merged at once, a non-blocking one after S more batches, or after the last batch if the data ends
first; a merge comes before a send in the same batch; sync j is done by group j mod G (the GPUs of
local rank j mod G). With the default (adaptive) schedule: warm-up epochs block every batch,
cycling starts at B = max_global_skips // 2 and S = 1, no sync crosses an epoch end (one pending at
an epoch's last batch is merged there), cool-down blocks every batch.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from simdist.scenario import scenario_from_dict
from simdist.simulate import simulate

PROFILE = str((Path(__file__).parent / "data" / "tiny_profile.yaml").resolve())
NODES, GPUS = 2, 2
BATCHES_PER_EPOCH = 10  # 400 training samples / 4 workers / batches of 10
SLOW_NIC = {"kind": "ethernet-tcp", "bandwidth": "1MBps"}  # a global sync of 780 B takes several batches


def scenario(*, epochs=2, nic=None, workload=None, **algorithm):
    node = {"devices": GPUS} | ({"nic_link": nic} if nic else {})
    return scenario_from_dict({
        "name": "daso-sync-pattern",
        "seed": 3,
        "platform": {"preset": "laptop-cpu", "nodes": NODES, "node": node},
        "workload": {"model": {"name": "mlp", "hidden": [16]},
                     "dataset": {"name": "synthetic", "samples": 500, "features": 8, "classes": 3},
                     "batch_size": 10, "optimizer": {"name": "sgd", "lr": 0.1}, "timing_only": True}
                    | (workload or {}),
        "algorithm": {"name": "daso", **algorithm},
        "stop": {"epochs": epochs},
        "evaluation": {"every_steps": 10**6},
        "compute": {"profiles": [PROFILE]},
    })


@dataclass(frozen=True)
class Sync:
    group: int
    started: int  # the batch after which it was sent
    merged: int  # the batch after which it was merged (= started when blocking)
    blocking: bool
    B: int

    @property
    def waited(self) -> int:
        return self.merged - self.started


def expected_syncs(epochs: int, schedule_of_epoch, *, adaptive: bool) -> list[Sync]:
    """The documented global-sync pattern; ``schedule_of_epoch(e)`` gives epoch e's (B, S)."""
    total = epochs * BATCHES_PER_EPOCH
    syncs, pending, since_send, started = [], None, 0, 0
    for t in range(1, total + 1):
        B, S = schedule_of_epoch((t - 1) // BATCHES_PER_EPOCH)
        since_send += 1
        epoch_end = t % BATCHES_PER_EPOCH == 0
        cut = epoch_end and (adaptive or t == total)  # no sync may wait past this batch
        if pending is not None and (t - pending[1] >= pending[2] or cut):
            syncs.append(Sync(pending[0], pending[1], t, False, pending[3]))
            pending = None
        if since_send >= B:
            group, started, since_send = started % GPUS, started + 1, 0
            if S == 0:
                syncs.append(Sync(group, t, t, True, B))
            elif cut:
                syncs.append(Sync(group, t, t, False, B))
            else:
                pending = (group, t, S, B)
    return syncs


def recorded_syncs(result) -> list[Sync]:
    return [Sync(e["group"], e["step"] - e["S"], e["step"], e["blocking"], e["B"])
            for e in result.recorder.events if e["kind"] == "global_sync"]


def after_batch(result, rank: int, name: str) -> list[int]:
    """For every ``name`` span of ``rank``: the number of its batches computed before it started."""
    spans = [s for s in result.recorder.spans if s.rank == rank]
    ends = sorted(s.end_s for s in spans if s.name == "forward/backward")
    return [sum(end <= s.start_s for end in ends) for s in spans if s.name == name]


def members(group: int) -> list[int]:
    """Worker ranks of global group ``group``: local rank ``group`` on every node."""
    return [node * GPUS + group for node in range(NODES)]


FIXED = [(B, S) for B in (1, 2, 4) for S in sorted({0, 1, B})]


@pytest.fixture(scope="module", params=FIXED, ids=[f"B{B}-S{S}" for B, S in FIXED])
def fixed_run(request):
    B, S = request.param
    return B, S, simulate(scenario(schedule="fixed", B=B, S=S))


# -- schedule: fixed ------------------------------------------------------------------------------


def test_hand_written_patterns():
    """The expectation itself, against patterns written out by hand (2 epochs = 20 batches)."""
    fixed = lambda B, S: expected_syncs(2, lambda epoch: (B, S), adaptive=False)
    assert [(s.group, s.started, s.merged, s.blocking) for s in fixed(4, 1)] == [
        (0, 4, 5, False), (1, 8, 9, False), (0, 12, 13, False), (1, 16, 17, False), (0, 20, 20, False)]
    assert [(s.group, s.started, s.merged) for s in fixed(4, 4)] == [
        (0, 4, 8), (1, 8, 12), (0, 12, 16), (1, 16, 20), (0, 20, 20)]
    assert [(s.started, s.merged, s.blocking) for s in fixed(2, 0)] == [(t, t, True) for t in range(2, 21, 2)]
    assert [s.group for s in fixed(1, 1)] == [0, 1] * 10


def test_fixed_syncs_start_finish_and_rotate_as_documented(fixed_run):
    B, S, result = fixed_run
    assert recorded_syncs(result) == expected_syncs(2, lambda epoch: (B, S), adaptive=False)


def test_fixed_syncs_per_epoch_are_one_every_B_batches(fixed_run):
    B, S, result = fixed_run
    started = Counter((sync.started - 1) // BATCHES_PER_EPOCH for sync in recorded_syncs(result))
    per_epoch = [sum(1 for t in range(e * BATCHES_PER_EPOCH + 1, (e + 1) * BATCHES_PER_EPOCH + 1) if t % B == 0)
                 for e in range(2)]
    assert [started[e] for e in range(2)] == per_epoch
    assert {sync.blocking for sync in recorded_syncs(result)} == {S == 0}
    assert {sync.B for sync in recorded_syncs(result)} == {B}


def test_only_the_groups_members_do_the_global_work_bf16_only_when_blocking(fixed_run):
    B, S, result = fixed_run
    syncs = expected_syncs(2, lambda epoch: (B, S), adaptive=False)
    for rank in range(NODES * GPUS):
        mine = [sync for sync in syncs if rank in members(sync.group)]
        if S == 0:
            assert after_batch(result, rank, "pack parameters bf16") == [s.started for s in mine]
            assert after_batch(result, rank, "unpack parameters bf16") == [s.merged for s in mine]
            assert after_batch(result, rank, "pack parameters") == []
            assert after_batch(result, rank, "update: global merge") == []
        else:
            assert after_batch(result, rank, "pack parameters") == [s.started for s in mine]
            assert after_batch(result, rank, "update: global merge") == [s.merged for s in mine]
            assert after_batch(result, rank, "pack parameters bf16") == []
            assert after_batch(result, rank, "unpack parameters bf16") == []


def test_staleness_counts_batches_since_the_last_merge(fixed_run):
    B, S, result = fixed_run
    merges = {sync.merged for sync in expected_syncs(2, lambda epoch: (B, S), adaptive=False)}
    expected, since = [], 0
    for t in range(1, 2 * BATCHES_PER_EPOCH + 1):
        expected.append(since)
        since = 0 if t in merges else since + 1
    for worker in range(NODES * GPUS):
        assert [r["staleness"] for r in result.recorder.updates if r["worker"] == worker] == expected


# -- the default (adaptive) schedule ----------------------------------------------------------------


def test_default_schedule_blocks_in_warm_up_and_cool_down_and_cycles_between():
    """Defaults: 4 warm-up and 4 cool-down epochs, cycling from B = 8 // 2 = 4, S = 1. The loss
    falls 20 % an epoch, so cycling never meets a plateau and keeps (4, 1)."""
    epochs = 10
    losses = [2.0 * 0.8 ** e for e in range(epochs)]
    result = simulate(scenario(epochs=epochs, workload={"loss_curve": {"values": losses}}))
    assert result.status == "completed"
    phases = [(e["phase"], e["epoch"], e["B"], e["S"]) for e in result.recorder.events if e["kind"] == "phase"]
    assert phases == [("warmup", 0, 1, 0), ("cycling", 4, 4, 1), ("cooldown", 6, 1, 0)]

    def schedule_of_epoch(epoch):
        return (4, 1) if 4 <= epoch < 6 else (1, 0)
    expected = expected_syncs(epochs, schedule_of_epoch, adaptive=True)
    assert recorded_syncs(result) == expected
    per_epoch = Counter((s.started - 1) // BATCHES_PER_EPOCH for s in expected)
    assert [per_epoch[e] for e in range(epochs)] == [10] * 4 + [2, 3] + [10] * 4
    # cycling: sent after batches 44, 48 (merged at 45, 49), 52, 56 (53, 57) and 60, merged at once at the epoch end
    cycling = [(s.started, s.merged, s.blocking) for s in expected if not s.blocking]
    assert cycling == [(44, 45, False), (48, 49, False), (52, 53, False), (56, 57, False), (60, 60, False)]
    # bf16 casts exactly in the blocking phases, float32 sends in cycling
    bf16 = sorted(t for rank in range(4) for t in after_batch(result, rank, "pack parameters bf16"))
    fp32 = sorted(t for rank in range(4) for t in after_batch(result, rank, "pack parameters"))
    assert bf16 == sorted(t for t in range(1, 41) for _ in range(NODES)) + sorted(
        t for t in range(61, 101) for _ in range(NODES))
    assert fp32 == sorted(t for t in (44, 48, 52, 56, 60) for _ in range(NODES))


# -- overlap and time -------------------------------------------------------------------------------


@pytest.mark.parametrize("S", [1, 2, 4])
def test_non_blocking_communication_overlaps_local_steps(S):
    """On a slow global network, while a member's non-blocking global allreduce is in flight the
    rank computes the S batches that follow the send (they start before the allreduce ends)."""
    result = simulate(scenario(schedule="fixed", B=4, S=S, nic=SLOW_NIC))
    overlapped = 0
    for rank in range(NODES * GPUS):
        spans = [s for s in result.recorder.spans if s.rank == rank]
        flights = [s for s in spans if s.kind == "comm" and s.name == "allreduce" and not s.blocking]
        merges = [s for s in spans if s.name == "update: global merge"]
        computes = [s for s in spans if s.name == "forward/backward"]
        assert len(flights) == len(merges) > 0
        for flight, merge in zip(flights, merges):
            inside = [c for c in computes if flight.start_s <= c.start_s < merge.start_s]
            expected = len(computes) - sum(c.start_s < flight.start_s for c in computes)
            assert len(inside) == min(S, expected)  # the S local steps between send and merge
            overlapped += sum(c.start_s < flight.end_s for c in inside)
    assert overlapped > 0


def test_S_changes_the_run_time_when_the_global_network_is_slow():
    """B = 4 fixed. On a 1 MB/s global network one float32 sync takes longer than a batch, so a
    larger S hides more of it: time falls strictly from S = 1 to S = 2 to S = 4. On the preset's
    network the sync hides behind one batch and S = 1, 2, 4 take the same time (as in the
    ResNet-50 parameter study, reports/daso_parameter_study.csv)."""
    slow = [simulate(scenario(schedule="fixed", B=4, S=S, nic=SLOW_NIC)).virtual_time_s for S in (1, 2, 4)]
    assert slow[0] > slow[1] > slow[2]
    assert slow[0] > 1.2 * slow[2]
    fast = [simulate(scenario(schedule="fixed", B=4, S=S)).virtual_time_s for S in (1, 2, 4)]
    assert fast[0] == pytest.approx(fast[1], rel=1e-9) and fast[1] == pytest.approx(fast[2], rel=1e-9)
    assert fast[2] < slow[2]
