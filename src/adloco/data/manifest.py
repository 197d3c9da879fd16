"""``manifest.json`` of the tokenize stage: what was read, the tokenizer, the splits.

:mod:`adloco.data.tokenize` writes the manifest last, into the output
folder beside the shards and the tokenizer: the source and what it skipped,
the tokenizer and a checksum of each of its files, the data settings, each
split's shards (:func:`adloco.data.shards.finish_splits`) and the validation
split's reference perplexities (:func:`reference_levels`,
:mod:`adloco.data.reference`). The layout is in docs/DESIGN.md ("Tokenized
data") and docs/data.md; :mod:`adloco.data.reader` checks it when the data
is opened.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from adloco.config import DataConfig, TokenizerConfig
from adloco.core.io import sha256_file
from adloco.data import reference
from adloco.data import tokenizer as tok
from adloco.data.reader import DTYPES, TokenSplit
from adloco.formats.data_manifest import FORMAT_VERSION


def build_manifest(
    data: DataConfig,
    seed: int,
    tokenizer: tok.SavedTokenizer,
    splits: dict[str, dict],
    source: dict,
    stats: Any,
    documents_read: int,
) -> dict:
    """manifest.json (docs/DESIGN.md, "Tokenized data"), without the reference perplexities."""
    return {
        "format_version": FORMAT_VERSION,
        "dataset": data.dataset,
        "source": {
            **source,
            "documents_read": documents_read,
            "on_bad_record": data.on_bad_record,
            "skipped_records": stats.skipped,
            "skipped_record_examples": stats.examples,
            "empty_documents": stats.empty,
        },
        "tokenizer": {
            "kind": data.tokenizer.kind,
            "name": tokenizer_name(data.tokenizer),
            "dir": "tokenizer",
            "vocab_size": tokenizer.vocab_size,
            "eos_token_id": tokenizer.eos_token_id,
            "bos_token_id": tokenizer.added["bos_token_id"],
            # Checked when the data is opened, like the shards.
            "files": file_checksums(tokenizer.dir),
        },
        "vocab_size": tokenizer.vocab_size,
        "seq_len_tokens": data.seq_len_tokens,
        "dtype": tokenizer.dtype.name,
        "seed": seed,
        "validation_fraction": data.validation_fraction,
        "base_fraction": data.base_fraction,
        "splits": splits,
    }


def reference_levels(folder: Path, manifest: dict) -> reference.ReferencePerplexity:
    """Uniform, unigram and bigram perplexities of the validation split just written."""

    def split(name: str) -> TokenSplit:
        entry = manifest["splits"][name]
        dtype = DTYPES[manifest["dtype"]]
        return TokenSplit(folder, name, entry, manifest["seq_len_tokens"], dtype)

    counted = [name for name in manifest["splits"] if name != "validation"]
    chunks = (c for name in counted for c in reference.split_chunks(split(name)))
    validation = split("validation")
    return reference.reference_perplexity(
        chunks,
        validation.get_numpy(np.arange(len(validation))),
        manifest["vocab_size"],
        counts_from=counted,
    )


def file_checksums(folder: Path) -> list[dict]:
    """Every file of ``folder`` (relative path, bytes, sha256), sorted by path."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return [
        {
            "file": p.relative_to(folder).as_posix(),
            "bytes": p.stat().st_size,
            "sha256": sha256_file(p),
        }
        for p in files
    ]


def tokenizer_name(tokenizer: TokenizerConfig) -> str | None:
    """The manifest's ``tokenizer.name``: the package file, the pretrained name, or None (BPE)."""
    if tokenizer.kind == "mistral-v1":
        return f"{tok.MISTRAL_PACKAGE}:{tok.MISTRAL_V1_FILE}"
    if tokenizer.kind == "pretrained":
        return tokenizer.name
    return None
