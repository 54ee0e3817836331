"""MPI progress (``platform.progress``): async against on_call.

Exact cases, computed by hand on two CPU ranks of ``laptop-cpu`` (shm: 0.11 us per route,
13.8e9 B/s; a rank computes ``t0 + t1 · batch``). Each rank posts an ``iallreduce`` of S
bytes, computes for C seconds and waits. The ring allreduce of two ranks is two steps of S/2
bytes each way: T = 2 · (0.11 us + S/2 / 13.8e9 B/s) (flows and analytic alike), or the
measured table's time where the platform has one.

* async: the allreduce runs from the post on, under the compute: a rank is done at max(C, T);
* on_call: it starts when both ranks are inside a call (waiting, after their compute): both
  are done at max(C0, C1) + T; the faster rank's time in between is ``wait``;
* a wait on anything (a blocking barrier) is a call: an iallreduce posted before it moves
  during it, and the run is as under async;
* blocking collectives, and runs without non-blocking communication, are the same in both.

Point to point: with ``messages.eager_limit`` an eager message leaves at once in both modes;
a rendezvous message to a rank that computes for C leaves when the receiver's compute ends
and it waits (all of its cost shifted by C), or at the receiver's next call that returns at
once (a poll); one to a rank that crashes goes at the crash and is dropped and counted.

Lockstep cohorts: sync with overlap gives the same tables as one process per rank in both
modes (timing-only and replayed); under on_call no bucket starts before the step's slowest
compute has ended.

Properties: in timing-only runs, DASO, DC-S3GD and sync with overlap are slower under
on_call than under async, over several seeds, and sync without overlap is unchanged; with
on_call and rendezvous messages every registered algorithm still completes,
deterministically, consuming every sample. Bad input: an unknown mode fails
naming the field, and ``simdist run`` exits 2 with one line naming ``platform.progress``
(inline) or the platform file and ``progress`` (platform file).
"""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from conftest import Sized, build_platform, build_world
from helpers import tiny_scenario as cli_scenario
from simdist.algorithms import ALGORITHMS
from simdist.cli import main
from simdist.config import describe_validation_error
from simdist.metrics import steps_table
from simdist.platform.spec import PlatformSpec
from simdist.scenario import scenario_from_dict
from simdist.simulate import Simulation, simulate
from simdist.training.data import EpochSharder
from simdist.training.datasets import validation_split_size
from simdist.training.replica import PhantomTensor
from test_lockstep_group import assert_same_results, replay_scenario, timing_scenario
from test_conformance import EPOCHS, PROFILE, TINY

T0, T1 = 1e-3, 1e-4
LATENCY_S = 0.11e-6
BANDWIDTH_BPS = 13.8e9
S_BYTES = 40_000_000  # 10 M float32
CPU_REDUCE_BPS = 19e9 / 3  # a cpu rank sums at its memory bandwidth over the 3 bytes a += b moves per byte
# ring of two: two steps of half the tensor, the first summed by its receiver: ~2.9 ms on the wire + ~3.2 ms
T_RING_S = 2 * (LATENCY_S + S_BYTES / 2 / BANDWIDTH_BPS) + S_BYTES / 2 / CPU_REDUCE_BPS
MIB = 1 << 20


def approx(x):
    return pytest.approx(x, rel=1e-12, abs=1e-18)


def world(mode: str, fidelity: str = "flows", **fields):
    platform = build_platform("laptop-cpu", node={"devices": 2}, progress=mode, **fields)
    return build_world(2, fidelity=fidelity, t0=T0, t1=T1, platform=platform)


def overlap_run(w, batches: dict[int, int], nbytes: int = S_BYTES, before=None):
    """Each rank posts an iallreduce of ``nbytes``, (``before``), computes its batch, waits: end times."""
    group = w.runtime(0).group([0, 1])
    ends = {}

    def worker(rt):
        request = rt.iallreduce(group, PhantomTensor(nbytes // 4))
        if before is not None:
            yield before(rt, group)
        yield rt.compute(None, Sized(batches[rt.rank]))
        yield request
        ends[rt.rank] = rt.now()

    for rank in (0, 1):
        w.spawn(rank, worker(w.runtime(rank)))
    w.env.run()
    return ends


def spans(w, kinds=("wait", "comm")):
    return sorted((s.rank, s.kind, s.start_s, s.end_s, s.blocking) for s in w.recorder.spans if s.kind in kinds)


# -- the field -------------------------------------------------------------------------------------


def test_progress_defaults_to_async_and_takes_on_call():
    assert PlatformSpec().progress == "async"
    assert PlatformSpec(progress="on_call").progress == "on_call"
    assert world("async").on_call is None and world("on_call").on_call is not None


# -- collectives, by hand ----------------------------------------------------------------------------


@pytest.mark.parametrize("fidelity", ["flows", "analytic"])
@pytest.mark.parametrize("batch", [10, 80])  # C = 2 ms < T, and C = 9 ms > T
def test_iallreduce_then_compute_then_wait(fidelity, batch):
    C = T0 + T1 * batch
    overlapped = overlap_run(world("async", fidelity), {0: batch, 1: batch})
    assert overlapped == {0: approx(max(C, T_RING_S)), 1: approx(max(C, T_RING_S))}
    on_call = world("on_call", fidelity)
    assert overlap_run(on_call, {0: batch, 1: batch}) == {0: approx(C + T_RING_S), 1: approx(C + T_RING_S)}
    # the collective's data moved only once both ranks waited
    assert spans(on_call) == [(0, "comm", approx(C), approx(C + T_RING_S), False),
                              (0, "comm", approx(C), approx(C + T_RING_S), True),
                              (1, "comm", approx(C), approx(C + T_RING_S), False),
                              (1, "comm", approx(C), approx(C + T_RING_S), True)]


def test_on_call_starts_when_the_slower_rank_waits_and_the_faster_one_waits_for_it():
    c0, c1 = T0 + T1 * 10, T0 + T1 * 70  # 2 ms and 8 ms (longer than the ring)
    w = world("on_call")
    end = c1 + T_RING_S
    assert overlap_run(w, {0: 10, 1: 70}) == {0: approx(end), 1: approx(end)}
    assert spans(w) == [(0, "comm", approx(c1), approx(end), False), (0, "comm", approx(c1), approx(end), True),
                        (0, "wait", approx(c0), approx(c1), True),
                        (1, "comm", approx(c1), approx(end), False), (1, "comm", approx(c1), approx(end), True)]
    assert overlap_run(world("async"), {0: 10, 1: 70}) == {0: approx(T_RING_S), 1: approx(c1)}


def test_a_priced_collective_waits_for_the_calls_too():
    table_s = 3e-3  # the measured time of a 4 MiB allreduce on 2 ranks
    rows = [[MIB, 1e-3], [4 * MIB, table_s], [16 * MIB, 10e-3]]
    fields = {"collectives": {"tables": [{"op": "allreduce", "ranks": 2, "source": "t", "rows": rows}]}}
    C = T0 + T1 * 10
    assert overlap_run(world("async", **fields), {0: 10, 1: 10}, 4 * MIB) == {0: approx(table_s), 1: approx(table_s)}
    on_call = overlap_run(world("on_call", **fields), {0: 10, 1: 10}, 4 * MIB)
    assert on_call == {0: approx(C + table_s), 1: approx(C + table_s)}


def test_a_wait_on_another_collective_is_a_call_that_moves_the_posted_one():
    def barrier(rt, group):
        return rt.barrier(group)

    async_w, on_call_w = world("async"), world("on_call")
    expected = overlap_run(async_w, {0: 10, 1: 10}, before=barrier)
    assert overlap_run(on_call_w, {0: 10, 1: 10}, before=barrier) == expected
    assert spans(on_call_w) == spans(async_w)


def test_blocking_collectives_are_the_same_in_both_modes():
    logs = []
    for mode in ("async", "on_call"):
        w = world(mode)
        group = w.runtime(0).group([0, 1])

        def worker(rt):
            yield rt.compute(None, Sized(10 + 20 * rt.rank))
            yield rt.allreduce(group, PhantomTensor(S_BYTES // 4))

        for rank in (0, 1):
            w.spawn(rank, worker(w.runtime(rank)))
        w.env.run()
        logs.append((w.env.now, spans(w, ("compute", "wait", "comm"))))
    assert logs[0] == logs[1]


# -- point to point ----------------------------------------------------------------------------------

EAGER = {"messages": {"eager_limit": "64KiB", "source": "hand-made"}}


def p2p_run(mode: str, nbytes: int, *, poll_at_s: float | None = None):
    """Rank 0 sends ``nbytes`` to rank 1 at time 0; rank 1 computes C (optionally polls at
    ``poll_at_s`` inside it, with a second compute), then receives: the arrival time."""
    w = world(mode, **EAGER)
    got = {}

    def sender(rt):
        yield rt.send(1, PhantomTensor(nbytes // 4))

    def receiver(rt):
        if poll_at_s is None:
            yield rt.compute(None, Sized(10))
        else:
            yield rt.busy(poll_at_s)
            assert rt.poll() is None  # nothing has arrived yet; the call answers the handshake
            yield rt.busy(T0 + T1 * 10 - poll_at_s)
        message = yield rt.recv()
        got["arrived"] = message.arrived_s

    w.spawn(0, sender(w.runtime(0)))
    w.spawn(1, receiver(w.runtime(1)))
    w.env.run()
    return got["arrived"]


def test_eager_messages_leave_at_once_in_both_modes():
    assert p2p_run("on_call", 32 * 1024) == approx(p2p_run("async", 32 * 1024))
    assert p2p_run("async", 32 * 1024) == approx(LATENCY_S + 32 * 1024 / BANDWIDTH_BPS)


def test_a_rendezvous_message_waits_for_the_receivers_call():
    C = T0 + T1 * 10
    alone_s = LATENCY_S + 4 * MIB / BANDWIDTH_BPS
    assert p2p_run("async", 4 * MIB) == approx(alone_s)
    assert p2p_run("on_call", 4 * MIB) == approx(C + alone_s)  # the receiver answered once it waited
    assert p2p_run("on_call", 4 * MIB, poll_at_s=0.5e-3) == approx(0.5e-3 + alone_s)  # its poll answered


def test_a_rendezvous_message_to_a_crashed_rank_goes_and_is_dropped_and_counted():
    w = world("on_call", **EAGER)

    def sender(rt):
        yield rt.send(1, PhantomTensor(MIB))  # 4 MiB: rendezvous; rank 1 is computing

    def receiver(rt):
        yield rt.compute(None, Sized(10))
        yield rt.recv()

    def crash(env):
        yield env.timeout(0.5e-3)
        w.crash(1, [1])

    w.spawn(0, sender(w.runtime(0)))
    w.spawn(1, receiver(w.runtime(1)))
    w.env.process(crash(w.env))
    w.env.run()
    assert w.dropped["messages"] == {1: 1} and w.dropped["bytes"] == {1: 4 * MIB}
    assert dict(w.network.received_bytes) == {(0, 1): 4 * MIB}  # it crossed the links after the crash


# -- lockstep cohorts --------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [timing_scenario, replay_scenario], ids=["timing-only", "replay"])
@pytest.mark.parametrize("mode", ["async", "on_call"])
def test_a_cohort_overlapping_buckets_equals_per_rank_processes(mode, make):
    data = make(**{"algorithm": {"name": "sync", "overlap": "backward", "bucket_bytes": 200}})
    data["platform"] = {**data["platform"], "progress": mode}
    scenario = scenario_from_dict(data)
    per_rank = Simulation(scenario, None, lockstep=False)
    cohort = Simulation(scenario, None, lockstep=True)
    a, b = per_rank.execute(), cohort.execute()
    assert not per_rank.in_lockstep and cohort.in_lockstep
    assert_same_results(a, b)


def test_under_on_call_no_bucket_starts_before_the_slowest_compute_ends():
    data = timing_scenario(**{"algorithm": {"name": "sync", "overlap": "backward", "bucket_bytes": 20_000}})
    data["platform"] = {**data["platform"], "progress": "on_call"}
    result = Simulation(scenario_from_dict(data), None, lockstep=True).execute()
    step_ends: dict[float, float] = {}  # a step's compute start (every rank's) -> its slowest rank's end
    for span in result.recorder.spans:
        if span.kind == "compute":
            step_ends[span.start_s] = max(step_ends.get(span.start_s, 0.0), span.end_s)
    buckets = [s for s in result.recorder.spans if s.kind == "comm" and not s.blocking]
    assert len(buckets) > len(step_ends)  # several buckets a step
    for bucket in buckets:  # a bucket belongs to the step that started last before it
        step = max(start for start in step_ends if start <= bucket.start_s)
        assert bucket.start_s >= step_ends[step]


# -- algorithms: never faster under on_call ----------------------------------------------------------


def timing_run(algorithm: dict, mode: str, seed: int) -> float:
    data = {
        "name": "progress", "seed": seed,
        "platform": {"preset": "cluster-a100-hdr", "nodes": 2, "node": {"devices": 2}, "progress": mode},
        "workload": {"model": {"name": "mlp", "hidden": [512, 512]},
                     "dataset": {"name": "synthetic", "samples": 400, "features": 64, "classes": 3},
                     "batch_size": 8, "timing_only": True},
        "algorithm": algorithm, "stop": {"epochs": 2}, "compute": {"noise_sigma": 0.2},
    }
    return simulate(scenario_from_dict(data)).virtual_time_s


@pytest.mark.parametrize("algorithm", [
    {"name": "daso", "schedule": "fixed", "B": 2, "S": 1},
    {"name": "dcs3gd"},
    {"name": "sync", "overlap": "backward", "bucket_bytes": 100_000},
], ids=["daso", "dcs3gd", "sync-overlap"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_overlapping_algorithms_are_never_faster_under_on_call(algorithm, seed):
    async_s, on_call_s = timing_run(algorithm, "async", seed), timing_run(algorithm, "on_call", seed)
    assert on_call_s >= async_s * (1 - 1e-12)
    assert on_call_s > async_s  # each of them overlaps something it can no longer overlap


def test_sync_without_overlap_is_the_same_in_both_modes():
    assert timing_run({"name": "sync"}, "on_call", 1) == timing_run({"name": "sync"}, "async", 1)


@pytest.fixture(scope="module", params=sorted(TINY))
def on_call_runs(request):
    """Every algorithm's conformance scenario with on_call progress and every message a rendezvous."""
    devices, nodes, workers, options = TINY[request.param]
    scenario = scenario_from_dict({
        "name": f"on-call-{request.param}",
        "platform": {"preset": "laptop-cpu", "nodes": nodes, "node": {"devices": devices}, "progress": "on_call",
                     "messages": {"eager_limit": 64, "source": "hand-made"}},
        "workers": workers,
        "workload": {"model": {"name": "mlp", "hidden": [16]},
                     "dataset": {"name": "synthetic", "samples": 300, "features": 8, "classes": 3},
                     "batch_size": 16, "optimizer": {"name": "sgd", "lr": 0.05}},
        "algorithm": {"name": request.param, **options},
        "stop": {"epochs": EPOCHS},
        "evaluation": {"every_steps": 10},
        "compute": {"profiles": [PROFILE], "noise_sigma": 0.2},
    })
    return scenario, simulate(scenario), simulate(scenario)


def test_every_algorithm_completes_under_on_call_with_rendezvous_messages(on_call_runs):
    scenario, a, b = on_call_runs
    assert a.status == "completed" and a.recorder.updates
    assert a.recorder.updates == b.recorder.updates and a.virtual_time_s == b.virtual_time_s
    train = 240 - validation_split_size(240, scenario.validation_split)  # nnt holds its validation split out
    shard = EpochSharder(train, scenario.worker_count, scenario.seed).shard_size
    assert int(steps_table(a)["batch_size"].sum()) == EPOCHS * shard * scenario.worker_count
    assert a.extra["sent_bytes"] == a.extra["received_bytes"] > 0


def test_every_registered_algorithm_is_covered():
    assert set(ALGORITHMS.names()) == set(TINY)


# -- bad input -------------------------------------------------------------------------------------


def test_an_unknown_mode_fails_naming_the_field():
    with pytest.raises(ValidationError) as err:
        PlatformSpec.model_validate({"progress": "eventually"})
    where, message = describe_validation_error(err.value)
    assert where == "progress" and "'async' or 'on_call'" in message


def test_simdist_run_exits_2_with_one_line_naming_platform_progress(tmp_path, capsys):
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(cli_scenario(platform={"preset": "laptop-cpu", "node": {"devices": 2},
                                                          "progress": "threaded"})))
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "platform.progress" in err and str(path.name) in err
    assert not out.exists()


def test_a_platform_file_with_an_unknown_mode_is_named_with_its_field(tmp_path, capsys):
    platform = tmp_path / "cluster.yaml"
    platform.write_text(yaml.safe_dump({"nodes": 1, "node": {"devices": 2}, "progress": "sometimes"}))
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(cli_scenario(platform="cluster.yaml")))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cluster.yaml" in err and "progress" in err
