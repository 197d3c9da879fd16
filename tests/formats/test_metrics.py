"""adloco.formats.metrics: derive_summary of hand-written metrics rows, by hand and brute force."""

from __future__ import annotations

import math
from dataclasses import fields

import pytest

from adloco.formats.metrics import (
    REQUIRED_ROW_KEYS,
    SUMMARY_KEYS,
    MetricsRow,
    derive_summary,
    fill_messages,
    finite_or_none,
    is_number,
)


def _row(round_, trainer, **values):
    row = {
        "round": round_,
        "trainer": trainer,
        "tokens_total": 0,
        "communications": 0,
        "sim_time_s": 0.0,
    }
    row.update(values)
    return row


# Three rounds; two trainers until a merge leaves one in round 3. Perplexities
# include a NaN and a null (not evaluated); round 3 has one trainer row only.
ROWS = [
    _row(1, 0, tokens_total=100, communications=1, messages_total=0, bytes_total=10, sim_time_s=1.0,
         wall_time_s=0.5, val_perplexity=90.0, active_trainers=2),
    _row(1, 1, tokens_total=200, communications=2, messages_total=1, bytes_total=20, sim_time_s=1.0,
         wall_time_s=0.6, val_perplexity=80.0, active_trainers=2),
    _row(2, 0, tokens_total=300, communications=3, messages_total=1, bytes_total=30, sim_time_s=2.5,
         wall_time_s=1.1, val_perplexity=float("nan"), active_trainers=2),
    _row(2, 1, tokens_total=400, communications=4, messages_total=2, bytes_total=40, sim_time_s=2.5,
         wall_time_s=1.2, val_perplexity=60.0, active_trainers=2),
    _row(3, 0, tokens_total=500, communications=5, messages_total=4, bytes_total=55, sim_time_s=4.0,
         wall_time_s=1.9, val_perplexity=70.0, active_trainers=1),
]  # fmt: skip


def _brute_force(rows):
    """The summary by another route: sort, take the tail, scan every field."""
    ordered = sorted(rows, key=lambda r: (r["round"], r["trainer"]))
    last_round = ordered[-1]["round"]

    def ok(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v

    final = [r["val_perplexity"] for r in ordered if r["round"] == last_round]
    every = [r.get("val_perplexity") for r in ordered]
    out = {"rounds": last_round}
    out["final_val_perplexity"] = min((float(v) for v in final if ok(v)), default=None)
    out["best_val_perplexity"] = min((float(v) for v in every if ok(v)), default=None)
    keys = ("tokens_total", "communications", "messages_total", "bytes_total", "sim_time_s",
            "wall_time_s")  # fmt: skip
    for key in keys:
        out[key] = max((r[key] for r in ordered if ok(r.get(key))), default=None)
    active = [r["active_trainers"] for r in ordered if r["round"] == last_round]
    out["final_trainers"] = max(active)
    return out


def test_summary_of_hand_written_rows():
    summary = derive_summary(ROWS)
    assert summary == {
        "rounds": 3,
        "final_val_perplexity": 70.0,
        "best_val_perplexity": 60.0,
        "tokens_total": 500,
        "communications": 5,
        "messages_total": 4,
        "bytes_total": 55,
        "sim_time_s": 4.0,
        "wall_time_s": 1.9,
        "final_trainers": 1,
    }
    assert summary == _brute_force(ROWS)
    assert set(summary) == set(SUMMARY_KEYS)


def test_summary_does_not_depend_on_row_order():
    assert derive_summary(list(reversed(ROWS))) == derive_summary(ROWS)
    assert derive_summary(ROWS[2:] + ROWS[:2]) == _brute_force(ROWS)


def test_final_perplexity_is_the_best_trainer_of_the_last_round():
    rows = ROWS[:4]  # round 2: trainer 0 NaN, trainer 1 60
    summary = derive_summary(rows)
    assert summary["rounds"] == 2
    assert summary["final_val_perplexity"] == 60.0
    assert summary["best_val_perplexity"] == 60.0
    assert summary["final_trainers"] == 2
    assert summary == _brute_force(rows)


def test_missing_values():
    # No perplexity evaluated, no bytes, wall time or active-trainer count: None,
    # and the trainers of the last round are counted.
    rows = [
        _row(1, 0, tokens_total=8, communications=1, sim_time_s=0.5, val_perplexity=None),
        _row(1, 2, tokens_total=16, communications=2, sim_time_s=0.5),
        _row(1, 5, tokens_total=24, communications=3, sim_time_s=0.5, bytes_total=True),
    ]
    summary = derive_summary(rows)
    assert summary == {
        "rounds": 1,
        "final_val_perplexity": None,
        "best_val_perplexity": None,
        "tokens_total": 24,
        "communications": 3,
        "messages_total": None,  # not logged
        "bytes_total": None,  # a bool is not a number
        "sim_time_s": 0.5,
        "wall_time_s": None,
        "final_trainers": 3,
    }


def test_numbers_and_perplexities():
    assert is_number(3) and is_number(2.5) and is_number(float("inf"))
    assert not is_number(True) and not is_number(None) and not is_number("3")
    assert finite_or_none(None) is None
    assert finite_or_none(float("nan")) is None
    assert finite_or_none("12") is None
    assert finite_or_none(12) == 12.0 and isinstance(finite_or_none(12), float)
    assert math.isinf(finite_or_none(float("inf")))


def test_metrics_row_as_dict_has_every_field_and_the_required_keys():
    names = [f.name for f in fields(MetricsRow)]
    values = {name: i for i, name in enumerate(names)}
    row = MetricsRow(**values).as_dict()
    assert list(row) == names
    assert row == values
    assert set(REQUIRED_ROW_KEYS) <= set(row)
    assert set(SUMMARY_KEYS) - {"rounds", "final_trainers", "final_val_perplexity",
                                "best_val_perplexity"} <= set(row)  # fmt: skip


def test_summary_of_no_rows_fails():
    with pytest.raises(ValueError):
        derive_summary([])


def _sync(nodes, merge_messages=0, allreduce_count=None):
    sync = {"nodes": nodes, "allreduce_payload_bytes": [40], "merge_payload_bytes": 40,
            "merge_messages": merge_messages}  # fmt: skip
    if allreduce_count is not None:
        sync.update(allreduce_count=allreduce_count, per_step=True)
    return sync


def test_messages_count_only_what_crosses_the_network():
    # Round 1: four one-slot trainers (no message, though four trainer rounds);
    # round 2: a merge into trainer 0 (one transfer) on two slots (one all-reduce);
    # round 3: one trainer on 4 slots; then ddp's 5 all-reduces a round on 4 slots.
    rows = [_row(1, t, sync=_sync(1)) for t in range(4)]
    rows += [_row(2, 0, sync=_sync(2, merge_messages=1)), _row(2, 2, sync=_sync(2))]
    rows += [_row(3, 0, sync=_sync(4)), _row(4, 0, sync=_sync(4, allreduce_count=5))]
    filled = fill_messages(rows)
    assert [r["allreduces"] for r in filled] == [0, 0, 0, 0, 1, 1, 1, 5]
    assert [r["merge_transfers"] for r in filled] == [0, 0, 0, 0, 1, 0, 0, 0]
    assert [r["messages_total"] for r in filled] == [0, 0, 0, 0, 2, 3, 4, 9]
    assert derive_summary(filled)["messages_total"] == 9
    # Rows the engine counted are left as they are; rows without a sync cannot be counted.
    assert fill_messages(filled) is filled
    bare = [_row(1, 0)]
    assert fill_messages(bare) is bare


def test_the_engines_counters_equal_the_rows_sync():
    """TrainerSync.messages() is what the engine adds up (a one-slot merge target included)."""
    from adloco.formats.clock import TrainerSync

    assert TrainerSync(1, (40,)).messages() == 0
    assert TrainerSync(1, (40,), 40, 2).messages() == 2  # two states sent to a one-slot trainer
    assert TrainerSync(3, (40, 8), 40, 1).messages() == 2  # one all-reduce (two payloads) + 1
    assert TrainerSync(2, (40,), allreduce_count=7, per_step=True).messages() == 7
