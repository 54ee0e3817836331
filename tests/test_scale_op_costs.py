"""An op's cost per parameter is found once and answered from then on, with the same figures
and the same bases reported as when every question was worked out afresh."""

from __future__ import annotations

from simdist.platform.op_costs import OpCostModel, ops_from_profile

from conftest import build_platform


def test_repeated_questions_get_the_first_answer_and_buffers_count():
    model = OpCostModel(build_platform("laptop-cpu", node={"devices": 2}))
    first = model.seconds(0, "update", 10**6)
    assert [model.seconds(rank, "update", 10**6) for rank in (0, 1, 0)] == [first] * 3
    assert model.seconds(0, "average", 1000, buffers=3) != model.seconds(0, "average", 1000, buffers=2)
    assert len(model._per_param) == 3


def test_bases_reported_as_before_with_measured_and_estimated_ops():
    measured = ops_from_profile({"device": "host-cpu", "ops": {"update": 2e-9}}, "p.yaml")
    model = OpCostModel(build_platform("laptop-cpu", node={"devices": 1}), measured)
    for _ in range(3):
        assert model.seconds(0, "update", 1000) == 2e-9 * 1000
        model.seconds(0, "copy", 1000)
    assert {(r["op"], r["basis"]) for r in model.describe()} == {("update", "measured"), ("copy", "estimate")}
