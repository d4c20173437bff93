"""The one turn record and the collected trajectories file it is stored in."""

from __future__ import annotations

import math

import pyarrow.parquet as pq
import pytest

from creditaudit.errors import InputError
from creditaudit.replay.records import TRAJECTORIES, TURN_SCHEMA, TurnRecord, trajectories_from_table


def test_every_column_is_described():
    for field in TURN_SCHEMA:
        assert field.metadata and field.metadata[b"description"].decode().strip(), field.name


def test_the_collected_file_describes_itself_without_creditaudit(collected_run):
    run, _ = collected_run
    schema = pq.read_schema(run / TRAJECTORIES)
    described = {f.name: f.metadata[b"description"].decode() for f in schema}
    assert list(described) == TURN_SCHEMA.names
    assert described["mean_logprob"] == TURN_SCHEMA.field("mean_logprob").metadata[b"description"].decode()


def test_records_read_back_are_the_rows(collected_run):
    run, _ = collected_run
    table = pq.read_table(run / TRAJECTORIES)
    trajectories = trajectories_from_table(table)
    rows = table.to_pylist()
    by_key = {(r["trajectory_id"], r["turn"]): r for r in rows}
    assert sum(len(t) for t in trajectories) == len(rows)
    for trajectory in trajectories:
        for record in trajectory.turns:
            row = by_key[trajectory.trajectory_id, record.turn]
            for name in ("observation", "action", "feedback", "state_signature", "prompt_sha256", "stop_reason",
                         "seed", "done", "won", "mean_logprob", "sum_logprob", "action_admissible"):
                assert getattr(record, name) == row[name], name
            assert record.admissible == tuple(row["admissible"])
            assert record.token_logprobs == tuple(row["token_logprobs"])


def test_a_hand_made_record_needs_only_what_the_signals_read():
    record = TurnRecord(0, "a hall .", ("open door",), "open door", (-0.5, -0.25), -0.375, "done .")
    assert record.sum_logprob == -0.75 and record.action_admissible
    assert (record.state_signature, record.stop_reason, record.seed, record.done) == ("", "", -1, False)
    assert math.isclose(record.mean_logprob, record.sum_logprob / 2)


def test_a_table_without_a_record_column_is_refused(collected_run):
    run, _ = collected_run
    table = pq.read_table(run / TRAJECTORIES)
    with pytest.raises(InputError, match="missing column.*stop_reason"):
        trajectories_from_table(table.drop_columns(["stop_reason"]))
