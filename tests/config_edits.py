"""The test preset as a fresh mapping, and edits of it at a dotted key.

Shared by the configuration tests (``tests/config/``) and the fault suite
(``tests/test_config_faults.py``).
"""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PRESET = ROOT / "config" / "test.yaml"

# ``set_key(cfg, key, DELETE)`` removes the key instead of setting it.
DELETE = object()


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
