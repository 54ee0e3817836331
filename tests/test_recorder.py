"""The recorder keeps single rows and lockstep blocks in recording order, and reads them alike."""

from __future__ import annotations

import math

import numpy as np

from simdist.recorder import Recorder, SpanBlock, UpdateBlock


def block(ranks, kind, starts, ends, blocking=True) -> SpanBlock:
    return SpanBlock(np.array(ranks), kind, kind, np.array(starts, dtype=float), np.array(ends, dtype=float), blocking)


def test_spans_mix_singles_and_blocks_in_recording_order():
    rec = Recorder()
    rec.span(9, "compute", "x", 0.0, 1.0)
    rec.span_block(block([0, 1, 2], "wait", [1.0, 2.0, 3.0], [3.0, 3.0, 3.0]))  # rank 2's is empty: dropped
    rec.span(9, "comm", "y", 1.0, 2.0)
    columns = rec.span_columns()
    assert columns["rank"].tolist() == [9, 0, 1, 9]
    assert columns["kind"].tolist() == ["compute", "wait", "wait", "comm"]
    assert [(s.rank, s.start_s, s.end_s) for s in rec.spans] == [(9, 0.0, 1.0), (0, 1.0, 3.0), (1, 2.0, 3.0),
                                                                   (9, 1.0, 2.0)]


def test_empty_recorder_has_typed_empty_columns():
    columns = Recorder().span_columns()
    assert all(len(v) == 0 for v in columns.values())
    assert columns["start_s"].dtype == float and columns["rank"].dtype == np.int64


def test_clip_cuts_blocks_and_singles_alike():
    rec = Recorder()
    rec.span_block(block([0, 1, 2], "compute", [0.0, 1.0, 5.0], [2.0, 4.0, 6.0]))
    rec.span(3, "comm", "y", 2.0, 7.0)
    rec.clip_spans(3.0)
    assert [(s.rank, s.start_s, s.end_s) for s in rec.spans] == [(0, 0.0, 2.0), (1, 1.0, 3.0), (3, 2.0, 3.0)]


def test_update_blocks_read_as_rows_and_columns():
    rec = Recorder()
    rec.update_block(UpdateBlock(0.5, np.array([0, 1]), 1, 1, 0, np.array([8, 8]), np.array([2.0, 3.0])))
    rec.update_block(UpdateBlock(0.9, np.array([0, 1]), 2, 2, 0, np.array([4, 4]), None))
    columns = rec.update_columns()
    assert columns["worker"].tolist() == [0, 1, 0, 1]
    assert columns["step"].tolist() == [1, 1, 2, 2]
    assert columns["loss"][:2].tolist() == [2.0, 3.0] and np.isnan(columns["loss"][2:]).all()
    rows = rec.updates
    assert rows[1] == dict(time_s=0.5, worker=1, step=1, version=1, staleness=0, batch_size=8, loss=3.0)
    assert rows[3]["loss"] is None


def test_update_columns_defer_to_rows_when_singles_may_carry_extra_columns():
    rec = Recorder()
    rec.update(time_s=0.0, worker=0, step=1, version=1, staleness=0, batch_size=8, loss=1.0, age_s=0.1)
    assert rec.update_columns() is None
    assert rec.updates[0]["age_s"] == 0.1


def test_rows_can_be_replaced_and_extended():
    rec = Recorder()
    rec.span_block(block([0], "compute", [0.0], [1.0]))
    merged = Recorder()
    merged.spans += rec.spans
    merged.updates = [dict(time_s=0.0, worker=0, step=1, version=1, staleness=0, batch_size=1, loss=math.nan)]
    assert len(merged.spans) == 1 and len(merged.updates) == 1


def test_spans_recorded_after_a_read_follow_it_and_keep_their_arguments():
    rec = Recorder()
    rec.span(0, "compute", "forward/backward", 0.0, 1.0, batch_size=32)
    first = rec.spans
    rec.span(1, "wait", "recv", 0.5, 2.0, blocking=False)
    rec.span(1, "comm", "recv", 2.0, 2.0)  # empty: not a span
    spans = rec.spans
    assert spans[0] is first[0] and spans[0].args == {"batch_size": 32}
    assert [(s.rank, s.kind, s.start_s, s.end_s, s.blocking) for s in spans] == [
        (0, "compute", 0.0, 1.0, True), (1, "wait", 0.5, 2.0, False)]
    rec.span(2, "comm", "send", 1.5, 4.0)
    assert rec.span_columns()["end_s"].tolist() == [1.0, 2.0, 4.0]
    rec.clip_spans(1.8)
    assert [(s.rank, s.end_s) for s in rec.spans] == [(0, 1.0), (1, 1.8), (2, 1.8)]
