"""The tokenized data's ``manifest.json``: its version, its fields, and the check that reads it.

:mod:`adloco.data.tokenize` writes the manifest last, beside the shards and
the tokenizer (:mod:`adloco.data.manifest` builds it); :mod:`adloco.data.reader`
opens the data through :func:`read_manifest` and then checks every file it
lists. The layout is in docs/data.md. Here with the standard library alone:
``dtype`` names a numpy dtype by its code, which the reader builds.
"""

from __future__ import annotations

from pathlib import Path

from adloco.core import paths
from adloco.core.io import read_json_object

FORMAT_VERSION = 1
# The shards' token dtype: the manifest's name and its numpy code (little-endian).
DTYPE_CODES = {"uint16": "<u2", "uint32": "<u4"}


class CorruptDataError(ValueError):
    """A tokenized data folder does not match its manifest."""


def read_manifest(folder: str | Path) -> dict:
    """``folder``'s manifest.json, its version, fields and split counts checked."""
    path = paths.manifest_file(folder)
    manifest = read_json_object(
        path,
        f"tokenized data manifest not found: {path} (run adloco tokenize)",
        error=CorruptDataError,
        fix="the tokenized data is damaged; run adloco tokenize again, which writes it whole",
    )
    if manifest.get("format_version") != FORMAT_VERSION:
        raise CorruptDataError(
            f"{path}: format_version {manifest.get('format_version')!r}, this reader reads "
            f"{FORMAT_VERSION}"
        )
    missing = [
        k
        for k in ("vocab_size", "seq_len_tokens", "dtype", "tokenizer", "splits")
        if k not in manifest
    ]
    if missing:
        raise CorruptDataError(f"{path}: missing fields {missing}")
    if manifest["dtype"] not in DTYPE_CODES:
        raise CorruptDataError(
            f"{path}: dtype {manifest['dtype']!r} is not one of {sorted(DTYPE_CODES)}"
        )
    for name, entry in manifest["splits"].items():
        for key in ("documents", "tokens", "sequences", "shards"):
            if key not in entry:
                raise CorruptDataError(f"{path}: split {name} has no field {key!r}")
        if sum(int(s["sequences"]) for s in entry["shards"]) != int(entry["sequences"]):
            raise CorruptDataError(f"{path}: split {name}: shard sequences do not add up")
    return manifest
