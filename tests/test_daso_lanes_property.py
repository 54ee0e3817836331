"""DASO's lockstep lanes give the results of one process per rank, over drawn configurations.

tests/test_lockstep_group.py checks chosen cases; here hypothesis draws the schedule (fixed B
and S, or the adaptive one), the node shape (one to four GPUs per node, two to four nodes),
MPI progress (async or on_call), compute noise, a straggler and the stop (steps, epochs or a
time limit), and every result table of the lanes must equal one process per rank.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_lockstep_group import assert_same_results, run_both, timing_scenario


@st.composite
def daso_cases(draw) -> dict:
    if draw(st.booleans()):
        B = draw(st.integers(1, 4))
        algorithm = {"name": "daso", "schedule": "fixed", "B": B, "S": draw(st.integers(0, B))}
    else:
        algorithm = {"name": "daso", "warmup_epochs": 1, "cooldown_epochs": 1, "max_global_skips": 4}
    compute = {"noise_sigma": draw(st.sampled_from([0.0, 0.1, 0.4]))}
    if draw(st.booleans()):
        compute["stragglers"] = [{"ranks": [1], "factor": 3.0, "duration": "1s"}]
    return {
        "algorithm": algorithm,
        "platform": {"preset": "cluster-a100-hdr", "nodes": draw(st.integers(2, 4)),
                     "node": {"devices": draw(st.sampled_from([1, 2, 4]))},
                     "progress": draw(st.sampled_from(["async", "on_call"]))},
        "compute": compute,
        "stop": draw(st.sampled_from([{"steps": 9}, {"epochs": 3}, {"virtual_time": "1ms"}])),
        "workload.loss_curve": {"law": "exponential", "start": 2.3, "end": 0.2, "scale": 1.0},
    }


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(daso_cases())
def test_daso_lanes_equal_one_process_per_rank(case):
    (_, per_rank), (lanes, result) = run_both(timing_scenario(**case))
    assert lanes.in_lockstep, lanes.execution
    assert_same_results(per_rank, result)
