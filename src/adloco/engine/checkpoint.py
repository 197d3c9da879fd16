"""Checkpoints that resume exactly.

One file per run, replaced atomically after every ``checkpoint_every_rounds``
rounds: write ``latest.pt.tmp``, fsync, rename. It holds only tensors and plain
Python containers, so it loads with ``torch.load(weights_only=True)``: nothing
in a checkpoint can execute code. A fingerprint of the run's resolved settings
guards against resuming under a changed configuration.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch

from adloco.io import atomic_path

CHECKPOINT_NAME = "latest.pt"
FORMAT_VERSION = 1


def fingerprint(settings: dict) -> str:
    """A stable hash of everything that determines a run's trajectory."""
    blob = json.dumps(settings, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def save(directory: str | Path, state: dict) -> Path:
    path = Path(directory) / CHECKPOINT_NAME
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            torch.save({"format_version": FORMAT_VERSION, **state}, fh)
            fh.flush()
            os.fsync(fh.fileno())
    return path


def load(directory: str | Path, expected_fingerprint: str) -> dict | None:
    """The saved state, or None when there is none; an error if it is from another config."""
    path = Path(directory) / CHECKPOINT_NAME
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated or foreign file
        raise ValueError(f"{path}: unreadable checkpoint ({exc}); delete it to start over") from exc
    if state.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{path}: checkpoint format {state.get('format_version')} is not {FORMAT_VERSION}"
        )
    if state.get("fingerprint") != expected_fingerprint:
        raise ValueError(
            f"{path}: checkpoint was written under a different configuration, run or seed; "
            "delete the folder to start over"
        )
    return state
