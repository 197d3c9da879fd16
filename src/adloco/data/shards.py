"""Shard files of the tokenize stage: a split's token stream packed into fixed-length sequences.

:mod:`adloco.data.tokenize` sends each split's tokens (documents already
joined by EOS) to a :class:`ShardWriter`, which cuts the stream into
sequences of ``data.seq_len_tokens`` without padding and writes them as flat
little-endian ``uint16``/``uint32`` files ``<split>-00000.bin``,
``<split>-00001.bin``, ... (at most :data:`SHARD_TOKENS` tokens each),
hashed while written. The tail shorter than one sequence is dropped and
counted. :func:`finish_splits` closes the writers into the manifest's
``splits`` entries (docs/DESIGN.md, "Tokenized data"), which
:class:`adloco.data.reader.TokenData` verifies and reads.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from adloco.core.io import naming_output

# 2**27 tokens = 256 MiB of uint16 per shard file.
SHARD_TOKENS = 1 << 27
# Buffered tokens per split before full sequences are written out.
FLUSH_TOKENS = 1 << 20


class ShardWriter:
    """Packs one split's token stream into fixed-length sequences in shard files.

    Tokens arrive as flat arrays (documents already joined by EOS); full
    sequences go to ``<split>-00000.bin``, ``<split>-00001.bin``, ... of at
    most ``shard_sequences`` sequences each, hashed while written. The tail
    shorter than one sequence is dropped by :meth:`finish`.
    """

    def __init__(
        self, folder: Path, split: str, seq_len_tokens: int, dtype: Any, shard_sequences: int
    ):
        if shard_sequences < 1:
            raise ValueError("shard_sequences must be at least 1")
        self.folder = Path(folder)
        self.split = split
        self.seq_len_tokens = seq_len_tokens
        self.dtype = dtype
        self.capacity_tokens = shard_sequences * seq_len_tokens
        self.tokens = 0
        self.shards: list[dict] = []
        self._pending: list[Any] = []
        self._pending_tokens = 0
        self._file = None
        self._hash = None
        self._shard_tokens = 0

    def add(self, tokens: Any) -> None:
        if tokens.size == 0:
            return
        self.tokens += int(tokens.size)
        self._pending.append(tokens.astype(self.dtype, copy=False))
        self._pending_tokens += int(tokens.size)
        if self._pending_tokens >= FLUSH_TOKENS:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        data = np.concatenate(self._pending)
        full = data.size - data.size % self.seq_len_tokens
        self._write(data[:full])
        rest = data[full:]
        self._pending = [rest] if rest.size else []
        self._pending_tokens = int(rest.size)

    def _write(self, data: Any) -> None:
        while data.size:
            if self._file is None:
                name = f"{self.split}-{len(self.shards):05d}.bin"
                self._file = open(self.folder / name, "wb")  # closed by _close
                self._hash = hashlib.sha256()
                self.shards.append({"file": name})
                self._shard_tokens = 0
            part = data[: self.capacity_tokens - self._shard_tokens]
            raw = part.tobytes()
            with naming_output(self.folder / self.shards[-1]["file"]):
                self._file.write(raw)
            self._hash.update(raw)
            self._shard_tokens += int(part.size)
            data = data[part.size :]
            if self._shard_tokens == self.capacity_tokens:
                self._close()

    def _close(self) -> None:
        if self._file is None:
            return
        self._file.close()
        self.shards[-1]["sequences"] = self._shard_tokens // self.seq_len_tokens
        self.shards[-1]["sha256"] = self._hash.hexdigest()
        self._file = None

    def finish(self) -> dict:
        """Write what is left, drop the partial tail; return the split's manifest entry."""
        self._flush()
        dropped = self._pending_tokens
        self._pending = []
        self._close()
        return {
            "tokens": self.tokens,
            "sequences": sum(s["sequences"] for s in self.shards),
            "dropped_tokens": dropped,
            "shards": self.shards,
        }


def finish_splits(
    writers: dict[str, ShardWriter], documents: dict[str, int], seq_len: int
) -> dict[str, dict]:
    """Close the shards; each split's manifest entry. A split without one sequence is an error."""
    splits = {}
    for name in writers:
        entry = {"documents": documents[name], **writers[name].finish()}
        if entry["sequences"] == 0:
            raise ValueError(
                f"the {name} split got {entry['documents']} documents, "
                f"{entry['tokens']} tokens: not one sequence of {seq_len} tokens "
                "(raise data.max_documents, data.validation_fraction or data.base_fraction, "
                "or lower data.seq_len_tokens)"
            )
        splits[name] = entry
    return splits
