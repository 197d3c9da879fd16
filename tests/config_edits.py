"""The test preset as a fresh mapping, edits of it at a dotted key, and the shipped presets.

Shared by the configuration tests (``tests/config/``), the fault suite
(``tests/test_config_faults.py``) and the workflow tests.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PRESET = ROOT / "config" / "test.yaml"

# ``set_key(cfg, key, DELETE)`` removes the key instead of setting it.
DELETE = object()

# Tracked files of ``config/`` that are not presets: the tune experiment's grid
# declaration, which scripts/tune-grid.py turns into config/tune.yaml.
NOT_PRESETS = ("tune-grid.yaml",)


def shipped_configs() -> list[str]:
    """The presets the project ships: the files of ``config/`` that git tracks.

    A user's own configuration saved in ``config/`` (the README's way to run a
    variant) is not one, and the suite must not fail on it. Outside a git
    checkout, every ``config/*.yaml``. Nor is a file of :data:`NOT_PRESETS`.
    """
    try:
        done = subprocess.run(
            ["git", "ls-files", "--", "config/*.yaml"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        )  # fmt: skip
        tracked = sorted(Path(line).name for line in done.stdout.split())
    except (OSError, subprocess.CalledProcessError):
        tracked = []
    found = tracked or sorted(p.name for p in (ROOT / "config").glob("*.yaml"))
    return [name for name in found if name not in NOT_PRESETS]


def base() -> dict:
    """A fresh copy of ``config/test.yaml`` as read by YAML (no defaults filled)."""
    return yaml.safe_load(PRESET.read_text())


def set_key(cfg: dict, dotted: str, value) -> dict:
    """Set (or, with ``DELETE``, remove) ``cfg``'s ``dotted`` key in place; list items by index."""
    *parents, leaf = dotted.split(".")
    node = cfg
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is DELETE:
        del node[leaf]
    else:
        node[leaf] = value
    return cfg
