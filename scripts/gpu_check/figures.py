"""What each step's files say: the figures kept in the JSON, and the checks on them.

Each reader raises ``AssertionError`` (or ``ValueError``) with what it found
when a step's output does not hold what it must: the runner then records the
step as failed with that message.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

# The two-process run against the single process: float addition in another
# order where a trainer's slots sit on both ranks (tests/engine/test_distributed.py).
DIST_REL_TOL = 1e-5
# A stacked run against the same run's slots one by one, last validation loss.
VECTORIZED_REL_TOL = 1e-2


def manifest(folder: Path) -> dict[str, Any]:
    m = json.loads((folder / "manifest.json").read_text())
    splits = {name: s.get("sequences", s.get("num_sequences")) for name, s in m["splits"].items()}
    return {
        "path": str(folder),
        "vocab_size": m["vocab_size"],
        "seq_len_tokens": m["seq_len_tokens"],
        "tokenizer": m["tokenizer"]["kind"],
        "sequences": splits,
    }


def calibration(path: Path) -> dict[str, Any]:
    rec = json.loads(path.read_text())
    measured = rec["step_time_measured"]
    assert rec["max_batch"] >= 1, f"max batch {rec['max_batch']}"
    assert all(math.isfinite(s) and s > 0 for s in measured["fwd_bwd_s"]), measured["fwd_bwd_s"]
    return {
        "device": rec["device"],
        "kind": rec["kind"],
        "gpu_name": rec.get("gpu_name"),
        "model_parameters": rec["model_parameters"],
        "seq_len_tokens": rec["seq_len_tokens"],
        "dtype": rec["dtype"],
        "memory_bytes": rec["memory_bytes"],
        "budget_bytes": rec["budget_bytes"],
        "raw_max_batch": rec["raw_max_batch"],
        "max_batch": rec["max_batch"],
        "trials": len(rec["trials"]),
        "method": rec["method"],
        "batches": measured["batches"],
        "fwd_bwd_s": measured["fwd_bwd_s"],
        "update_s": measured["update_s"],
        "stopped_by_oom": measured["stopped_by_oom"],
    }


def _rows(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line]


def training(run: Path) -> dict[str, Any]:
    """Losses finite and falling: the last evaluation below the first."""
    rows = _rows(run)
    assert rows, f"{run}/metrics.jsonl has no rounds"
    train = [r["train_loss"] for r in rows if r.get("train_loss") is not None]
    evals = [(r["round"], r["val_loss"]) for r in rows if r.get("val_loss") is not None]
    bad = [x for x in train + [v for _, v in evals] if not math.isfinite(x)]
    assert not bad, f"non-finite losses: {bad[:5]}"
    assert evals, "no evaluation was logged"
    first_round, last_round = evals[0][0], evals[-1][0]
    first = min(v for r, v in evals if r == first_round)
    last = min(v for r, v in evals if r == last_round)
    assert last < first, (
        f"validation loss did not fall: round {first_round} {first:.4f}, "
        f"round {last_round} {last:.4f}"
    )
    wall = max(r["wall_time_s"] for r in rows)
    tokens = sum(r["tokens"] for r in rows)
    return {
        "rounds": last_round,
        "val_loss_first": round(first, 5),
        "val_loss_last": round(last, 5),
        "train_loss_last": round(train[-1], 5),
        "tokens": tokens,
        "wall_time_s": round(wall, 2),
        "tokens_per_s": round(tokens / wall, 1) if wall > 0 else None,
        "requested_batches": [r["requested_batch"] for r in rows],
        "switch_modes": sorted({r["switch_mode"] for r in rows}),
    }


def vectorized_training(run: Path, sequential: Path) -> dict[str, Any]:
    """A stacked run: its own checks, and its losses beside the same run's slots one by one.

    Under bf16 autocast the two differ by rounding that grows over the rounds
    (2.2e-4 relative after 4 rounds at the paper's shape on an H100), so the
    last validation losses must agree within :data:`VECTORIZED_REL_TOL`, not to the bit.
    """
    got = training(run)
    ref = training(sequential) if (sequential / "metrics.jsonl").exists() else None
    if ref is not None:
        diff = abs(got["val_loss_last"] - ref["val_loss_last"]) / ref["val_loss_last"]
        got.update(
            val_loss_last_sequential=ref["val_loss_last"],
            relative_difference_to_sequential=diff,
            speed_vs_sequential=ref["wall_time_s"] / got["wall_time_s"],
        )
        assert diff <= VECTORIZED_REL_TOL, (
            f"last validation loss {got['val_loss_last']} vectorized, {ref['val_loss_last']} "
            f"sequential: {diff:.2e} relative (tolerance {VECTORIZED_REL_TOL})"
        )
    return got


def same_run(one: Path, two: Path) -> dict[str, Any]:
    """The two-process run equals the single process: every logged loss, round by round."""
    a, b = _rows(one), _rows(two)
    assert len(a) == len(b), f"{len(a)} rows in one process, {len(b)} in two"
    worst = 0.0
    for ra, rb in zip(a, b, strict=True):
        for key in ("train_loss", "val_loss"):
            x, y = ra.get(key), rb.get(key)
            assert (x is None) == (y is None), f"round {ra['round']}: {key} {x} vs {y}"
            if x is not None:
                worst = max(worst, abs(x - y) / max(abs(x), 1e-12))
        assert ra["tokens"] == rb["tokens"], f"round {ra['round']}: tokens differ"
    assert worst <= DIST_REL_TOL, (
        f"losses differ by {worst:.2e} relative (tolerance {DIST_REL_TOL})"
    )
    return {"rows": len(a), "max_relative_loss_difference": worst, "tolerance": DIST_REL_TOL}


def bench(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def environment(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())
