"""The metrics row of a round and the summary of a run: one definition for writer and reader.

The training engine writes one :class:`MetricsRow` per trainer per round to
``metrics.jsonl`` and a summary (:func:`derive_summary`) to ``summary.json``;
the report reads both. Both sides import this module, so the engine does not
depend on the report and the two cannot disagree on a field. Every field is
described in docs/engine.md ("Run outputs").
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from adloco.formats.clock import TrainerSync

# Fields every metrics row must carry for the summary and time-to-target.
REQUIRED_ROW_KEYS = ("round", "trainer", "tokens_total", "communications", "sim_time_s")

# summary.json fields (docs/engine.md, "Run outputs"); each can also be derived from metrics.jsonl.
SUMMARY_KEYS = (
    "final_val_perplexity",
    "best_val_perplexity",
    "tokens_total",
    "communications",
    "messages_total",
    "bytes_total",
    "sim_time_s",
    "wall_time_s",
    "rounds",
    "final_trainers",
)


@dataclass
class MetricsRow:
    """One trainer's round, as written to metrics.jsonl."""

    run: str
    seed: int
    method: str
    round: int
    trainer: int
    active_trainers: int  # trainers that trained this round (before its merge)
    nodes: int  # node slots the trainer ran on
    requested_batch: int  # the trainer's requested global batch B (sequences per inner step)
    local_batch: int  # largest requested local batch of its slots, ceil(B / nodes)
    effective_batch: int  # sequences per full inner step over all its slots, after switch mode
    micro_batch: int  # largest forward+backward pass (what must fit in memory)
    accum_steps: int  # largest number of passes per step
    switch_mode: str  # plain, capped or accumulate (the most involved of its slots)
    inner_steps: int  # optimizer steps of this round (fewer in a round cut to the budget)
    tokens: int  # tokens the trainer processed this round
    tokens_total: int  # tokens of all trainers so far
    communications: int  # trainer rounds so far (one per trainer per round; the paper's count)
    allreduces: int  # the trainer's all-reduces this round that crossed the network (>= 2 slots)
    merge_transfers: int  # merged trainers' states sent to this trainer this round
    messages_total: int  # network messages so far: all-reduces and merge transfers of every trainer
    bytes: int  # bytes the trainer's synchronisation (and a merge into it) moved
    bytes_total: int
    train_loss: float
    val_loss: float | None
    val_perplexity: float | None
    val_loss_stderr: float | None  # standard error of val_loss over its sample of sequences
    lr_scale: float  # factor on the peak inner lr for the local batch (train.lr_scaling)
    inner_lr: float  # inner lr of the round's last step
    inner_lr_sum: float  # sum of the inner lr over the round's steps
    sim_time_s: float  # simulated time at the end of the round (adloco.formats.clock)
    round_time_s: float  # simulated time of this round (the same for all its trainers)
    wall_time_s: float  # wall-clock seconds of training so far (not reproducible)
    stats: dict | None  # batch-test statistics, when the trainer tests
    epochs: int  # passes over the trainer's data subset started
    events: list  # merges, batch changes, reallocations, rollbacks
    slot_work: list  # adloco.formats.clock.SlotWork of each slot: what the clock charges
    sync: dict  # adloco.formats.clock.TrainerSync: the trainer's communication

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finite_or_none(value: Any) -> float | None:
    """A perplexity as a float, or None when not evaluated (null or NaN)."""
    if not is_number(value) or math.isnan(value):
        return None
    return float(value)


def fill_messages(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with ``allreduces``, ``merge_transfers`` and ``messages_total`` filled in.

    Rows written before the engine counted network messages carry only their
    ``sync`` (:class:`adloco.formats.clock.TrainerSync`), from which the counts
    follow: an all-reduce crosses the network only on two or more slots, and a
    merge sends one transfer per absorbed trainer. Rows that have the fields
    are returned unchanged; the rows are in the order the engine wrote them.
    """
    if all("messages_total" in r for r in rows) or not all("sync" in r for r in rows):
        return rows  # counted by the engine, or not countable (no row says what it sent)
    total, out = 0, []
    for row in rows:
        sync = TrainerSync.from_dict(row["sync"])
        total += sync.messages()
        out.append(
            {
                **row,
                "allreduces": sync.allreduces(),
                "merge_transfers": sync.merge_messages,
                "messages_total": total,
            }
        )
    return out


def derive_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary.json fields, computed from the metrics rows alone."""
    last_round = max(r["round"] for r in rows)
    last = [r for r in rows if r["round"] == last_round]
    perplexities = [finite_or_none(r.get("val_perplexity")) for r in rows]
    perplexities = [p for p in perplexities if p is not None]
    final = [finite_or_none(r.get("val_perplexity")) for r in last]
    final = [p for p in final if p is not None]

    def largest(key: str) -> float | None:
        values = [r[key] for r in rows if is_number(r.get(key))]
        return max(values) if values else None

    active = [r["active_trainers"] for r in last if is_number(r.get("active_trainers"))]
    return {
        "rounds": last_round,
        "final_val_perplexity": min(final) if final else None,
        "best_val_perplexity": min(perplexities) if perplexities else None,
        "tokens_total": largest("tokens_total"),
        "communications": largest("communications"),
        "messages_total": largest("messages_total"),
        "bytes_total": largest("bytes_total"),
        "sim_time_s": largest("sim_time_s"),
        "wall_time_s": largest("wall_time_s"),
        "final_trainers": max(active) if active else len({r["trainer"] for r in last}),
    }
