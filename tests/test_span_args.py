"""Communication spans say what moved and with whom: bytes and peers, as the MPI runtime records them.

A collective's comm span carries ``bytes`` (the rank's payload) and ``group_size``, with
``nonblocking`` for a non-blocking one; a receive carries ``bytes`` and ``src``; a send that is
waited on carries ``bytes`` and ``dst``. The names are the MPI runtime's
(:mod:`simdist.real.runtime`), so a real and a simulated trace read alike; a lockstep cohort
records the same args as one process per rank.
"""

from __future__ import annotations

from test_lockstep_group import replay_scenario
from test_conformance import tiny_scenario

from simdist.scenario import scenario_from_dict
from simdist.simulate import Simulation


def comm_spans(simulation: Simulation):
    result = simulation.execute()
    return [s for s in result.recorder.spans if s.kind == "comm" and s.name != "message overhead"], simulation


def args_by_span(spans):
    return sorted((s.rank, s.name, round(s.start_s, 12), s.blocking, tuple(sorted(s.args.items()))) for s in spans)


def test_a_collective_s_spans_carry_its_bytes_and_group_size_alike_in_a_cohort_and_per_rank():
    scenario = scenario_from_dict(replay_scenario(**{"stop": {"steps": 6}}))
    per_rank, simulation = comm_spans(Simulation(scenario, None, lockstep=False))
    cohort, cohort_sim = comm_spans(Simulation(scenario, None, lockstep=True))
    assert cohort_sim.in_lockstep and not simulation.in_lockstep
    gradient_bytes = simulation.workload.param_count * 4  # float32
    assert per_rank and all(s.args == {"bytes": gradient_bytes, "group_size": 4} for s in per_rank)
    assert args_by_span(per_rank) == args_by_span(cohort)


def test_overlapped_bucket_allreduces_say_they_are_non_blocking_and_what_each_bucket_weighs():
    data = replay_scenario(**{"stop": {"steps": 4}, "algorithm": {"name": "sync", "overlap": "backward",
                                                                   "bucket_bytes": 128}})
    scenario = scenario_from_dict(data)
    per_rank, simulation = comm_spans(Simulation(scenario, None, lockstep=False))
    cohort, _ = comm_spans(Simulation(scenario, None, lockstep=True))
    assert {s.args["nonblocking"] for s in per_rank} == {True}
    buckets = [s.args["bytes"] for s in per_rank if not s.blocking and s.rank == 0]
    steps = 4
    assert sum(buckets) == steps * simulation.workload.param_count * 4  # every step moves the whole gradient ...
    assert len(buckets) > steps  # ... in several buckets
    assert args_by_span(per_rank) == args_by_span(cohort)


def test_a_parameter_server_s_receives_name_their_source_and_bytes():
    spans, simulation = comm_spans(Simulation(tiny_scenario("asgd"), None))
    receives = [s for s in spans if s.name == "recv"]
    assert receives
    workers, servers = set(simulation.workers), {d.rank for d in simulation.platform.devices} - set(simulation.workers)
    for span in receives:
        assert set(span.args) == {"bytes", "src"} and span.args["bytes"] > 0
        peers = servers if span.rank in workers else workers  # a worker hears from servers, a server from workers
        assert span.args["src"] in peers
