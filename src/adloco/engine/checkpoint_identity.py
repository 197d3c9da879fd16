"""Whose checkpoint a folder holds, so that only a run's own is ever set aside.

A stale checkpoint (other settings or code, or a finished run) is moved to
``<folder>.stale`` and the run starts over (:mod:`adloco.engine.checkpoint`),
and the next set-aside replaces that ``.stale``. So a mistyped
``--checkpoints`` naming another run's folder once cost that run its rounds:
the wrong command set them aside, and the right one, finding the wrong
command's checkpoint in its folder, set that aside over them and trained from
round 0. Now the manifest (and ``finished.json``) records :func:`identity`:
the experiment (the configuration's name, under which its folders lie), the
run's name and the seed; its ``fingerprint`` records the settings and code.
A folder holding the checkpoint of another experiment, run or seed is refused
before any work, in one line naming the folder, both identities and what to
do (:class:`ForeignCheckpointError`), and nothing in it is moved or deleted.

The same experiment, run and seed under changed settings or code is the run's
own stale checkpoint and is still set aside: Snakemake and DVC re-run a job
whose settings changed on the same folder, and refusing it would stop every
such re-run. A checkpoint written before checkpoints recorded their identity
is judged by its fingerprint alone, as before.
"""

from __future__ import annotations

import json
from pathlib import Path

from adloco.core.io import read_json_object
from adloco.engine.checkpoint import FINISHED_NAME, MANIFEST_NAME


class ForeignCheckpointError(ValueError):
    """The folder holds the checkpoint of another experiment, run or seed: refused, kept."""


def identity(experiment: str | None, run: str, seed: int) -> dict:
    """Whose checkpoint it is: the experiment, the run's name and the seed (JSON values)."""
    return {"experiment": experiment, "run": run, "seed": int(seed)}


def _describe(found: dict) -> str:
    return f"experiment {found.get('experiment')}, run {found.get('run')}, seed {found.get('seed')}"


def recorded(directory: str | Path) -> dict | None:
    """The identity the folder's manifest (else its ``finished.json``) records, or None.

    None for a folder without a checkpoint, one written before identities were
    recorded, or a manifest that does not read (loading names that one).
    """
    for name in (MANIFEST_NAME, FINISHED_NAME):
        try:
            found = read_json_object(Path(directory) / name).get("identity")
        except (OSError, ValueError):
            continue
        if isinstance(found, dict):
            return found
    return None


def check(directory: str | Path, mine: dict, what: str = "--checkpoints") -> None:
    """Refuse ``directory`` when it holds the checkpoint of another identity than ``mine``."""
    found = recorded(directory)
    if found is None or found == json.loads(json.dumps(mine)):
        return
    raise ForeignCheckpointError(
        f"{what} {directory} holds the checkpoint of {_describe(found)}, not of this "
        f"command's {_describe(mine)}: point {what} at this run's own folder, or move "
        f"{directory} away to train this run from the start (it was left as it is)"
    )
