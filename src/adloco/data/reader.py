"""Reader of the tokenized data: memory-mapped shards, verified, batches by index.

Training, pretraining, calibration and the variance stage read
``data/tokenized/<dataset>/`` (written by :mod:`adloco.data.tokenize`) through
:class:`TokenData`. Opening checks every shard and every file of the tokenizer
folder against ``manifest.json``: its size always, its sha256 when ``verify`` is
true (the default), so a truncated or corrupted shard or ``tokenizer.json``
fails at once with :class:`CorruptDataError` naming the file instead of
training on garbage (or failing only when the final model is saved with its
tokenizer). Each split's entry must be its own (:func:`check_split_facts`:
shard names, sequence count, no shard copied over another), so a validation
shard copied over a training one is refused even with its sha256 rewritten. The
manifest's vocabulary size and special ids are then checked against the
tokenizer itself (:func:`check_tokenizer_ids`): an edited ``vocab_size``
would build a model of the wrong size, an edited ``eos_token_id`` would go
unnoticed. Manifests written before tokenizer checksums existed have no
``tokenizer.files``; their tokenizer files are not checked. Shards are
memory-mapped, never read whole; :meth:`TokenSplit.get` gathers sequences by
index with one numpy fancy index per shard touched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from adloco.core import paths
from adloco.core.io import sha256_file
from adloco.data.tokenizer import saved_ids
from adloco.formats.data_manifest import DTYPE_CODES, CorruptDataError, read_manifest

DTYPES = {name: np.dtype(code) for name, code in DTYPE_CODES.items()}


class TokenSplit:
    """The sequences of one split: ``len(split)`` sequences of ``seq_len_tokens`` tokens."""

    def __init__(self, folder: Path, name: str, entry: dict, seq_len_tokens: int, dtype: np.dtype):
        self.folder = folder
        self.name = name
        self.entry = entry
        self.seq_len_tokens = seq_len_tokens
        self.dtype = dtype
        self.documents = int(entry["documents"])
        self.tokens = int(entry["tokens"])
        counts = [int(shard["sequences"]) for shard in entry["shards"]]
        # starts[i] is the first global index of shard i; starts[-1] the total.
        self._starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        self._arrays = self._map()

    def _map(self) -> list[np.memmap]:
        return [
            np.memmap(
                self.folder / shard["file"],
                dtype=self.dtype,
                mode="r",
                shape=(int(shard["sequences"]), self.seq_len_tokens),
            )
            for shard in self.entry["shards"]
        ]

    def __getstate__(self) -> dict:
        # Re-map in the receiving process instead of pickling the mapped data.
        state = dict(self.__dict__)
        state["_arrays"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._arrays = self._map()

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __repr__(self) -> str:
        return (
            f"TokenSplit({self.name!r}, sequences={len(self)}, "
            f"seq_len_tokens={self.seq_len_tokens}, shards={len(self._arrays)})"
        )

    def _indices(self, indices: Any) -> np.ndarray:
        idx = np.asarray(indices)
        if idx.ndim != 1:
            raise ValueError(f"{self.name}: indices must be one-dimensional, got shape {idx.shape}")
        if idx.size == 0:
            return idx.astype(np.int64)
        if not np.issubdtype(idx.dtype, np.integer):
            raise TypeError(f"{self.name}: indices must be integers, got {idx.dtype}")
        idx = idx.astype(np.int64, copy=False)
        low, high = int(idx.min()), int(idx.max())
        if low < 0 or high >= len(self):
            bad = low if low < 0 else high
            raise IndexError(f"{self.name}: sequence index {bad} outside [0, {len(self)})")
        return idx

    def get_numpy(self, indices: Any) -> np.ndarray:
        """Sequences ``indices`` as a ``[n, seq_len_tokens]`` array of the shard dtype."""
        idx = self._indices(indices)
        if len(self._arrays) == 1:
            return self._arrays[0][idx]
        out = np.empty((idx.size, self.seq_len_tokens), dtype=self.dtype)
        shard_of = np.searchsorted(self._starts, idx, side="right") - 1
        for shard in np.unique(shard_of):
            rows = shard_of == shard
            out[rows] = self._arrays[shard][idx[rows] - self._starts[shard]]
        return out

    def get(self, indices: Any) -> Any:
        """Sequences ``indices`` (ints, numpy or torch) as a ``LongTensor [n, seq_len_tokens]``."""
        if isinstance(indices, torch.Tensor):
            indices = indices.detach().cpu().numpy()
        return torch.from_numpy(self.get_numpy(indices).astype(np.int64))


class TokenData:
    """A tokenized data folder: manifest, tokenizer folder and the two splits."""

    def __init__(self, folder: Path, manifest: dict):
        self.folder = folder
        self.manifest = manifest
        self.vocab_size = int(manifest["vocab_size"])
        self.seq_len_tokens = int(manifest["seq_len_tokens"])
        self.eos_token_id = int(manifest["tokenizer"]["eos_token_id"])
        self.bos_token_id = manifest["tokenizer"].get("bos_token_id")
        self.tokenizer_dir = folder / manifest["tokenizer"]["dir"]
        self.dtype = DTYPES[manifest["dtype"]]
        self._splits = {
            name: TokenSplit(folder, name, entry, self.seq_len_tokens, self.dtype)
            for name, entry in manifest["splits"].items()
        }

    @classmethod
    def open(cls, folder: str | Path, verify: bool = True) -> TokenData:
        """Open and check a folder written by ``adloco tokenize``.

        Every shard's size is checked; with ``verify`` its sha256 too. A
        mismatch raises :class:`CorruptDataError` naming the file.
        """
        folder = Path(folder)
        manifest = read_manifest(folder)
        check_shards(folder, manifest, verify=verify)
        check_tokenizer(folder, manifest, verify=verify)
        check_tokenizer_ids(folder, manifest)
        if verify:
            check_token_ids(folder, manifest)
        return cls(folder, manifest)

    def split(self, name: str) -> TokenSplit:
        if name not in self._splits:
            raise KeyError(f"{self.folder}: no split {name!r} (have {sorted(self._splits)})")
        return self._splits[name]

    def __repr__(self) -> str:
        sizes = ", ".join(f"{n}={len(s)}" for n, s in self._splits.items())
        return f"TokenData({str(self.folder)!r}, vocab_size={self.vocab_size}, {sizes})"


def check_shards(folder: str | Path, manifest: dict, verify: bool = True) -> None:
    """Size of every shard, each split's own facts, and with ``verify`` each sha256."""
    folder = Path(folder)
    itemsize = DTYPES[manifest["dtype"]].itemsize
    seq_len = int(manifest["seq_len_tokens"])
    shards = [s for entry in manifest["splits"].values() for s in entry["shards"]]
    for shard in shards:
        path = folder / shard["file"]
        if not path.is_file():
            raise FileNotFoundError(f"shard listed in {folder / 'manifest.json'} not found: {path}")
        expected_bytes = int(shard["sequences"]) * seq_len * itemsize
        actual_bytes = path.stat().st_size
        if actual_bytes != expected_bytes:
            raise CorruptDataError(
                f"{path}: {actual_bytes} bytes, the manifest says {expected_bytes} "
                f"({shard['sequences']} sequences of {seq_len} tokens): truncated or overwritten"
            )
    check_split_facts(folder, manifest)
    if verify:
        for shard in shards:
            _check_sha256(folder / shard["file"], shard["sha256"], "shard")


def check_split_facts(folder: str | Path, manifest: dict) -> None:
    """Each split's entry is its own: shard names, sequence count and contents bind it.

    ``adloco tokenize`` names a split's shards ``<split>-00000.bin``, ... in
    order, and writes ``sequences = tokens // seq_len_tokens``; no two of its
    shards hold the same bytes. A shard of one split copied over another's,
    or two splits' entries swapped, breaks one of these even when the copied
    shard's sha256 and sequence count were rewritten to match it.
    """
    folder = Path(folder)
    path = paths.manifest_file(folder)
    seq_len = int(manifest["seq_len_tokens"])
    seen: dict[str, str] = {}
    for name, entry in manifest["splits"].items():
        if int(entry["sequences"]) != int(entry["tokens"]) // seq_len:
            raise CorruptDataError(
                f"{path}: split {name} has {entry['sequences']} sequences, but its "
                f"{entry['tokens']} tokens make {int(entry['tokens']) // seq_len} of "
                f"{seq_len}: its shards or counts belong to another split or were edited; "
                "re-run adloco tokenize"
            )
        for index, shard in enumerate(entry["shards"]):
            expected = f"{name}-{index:05d}.bin"
            if shard["file"] != expected:
                raise CorruptDataError(
                    f"{path}: shard {index} of split {name} is {shard['file']!r}, adloco "
                    f"tokenize names it {expected!r}: the splits were edited or swapped; "
                    "re-run adloco tokenize"
                )
            other = seen.setdefault(str(shard["sha256"]), shard["file"])
            if other != shard["file"]:
                raise CorruptDataError(
                    f"{folder / shard['file']}: the same sha256 as {folder / other} in "
                    f"{path}: a shard copied over another (split {name} would train or "
                    "evaluate on another split's sequences); re-run adloco tokenize"
                )


def check_token_ids(folder: str | Path, manifest: dict) -> None:
    """Every token id below the vocabulary: one above it would fail inside the embedding.

    After :func:`check_tokenizer_ids`, so an edited ``vocab_size`` is named as such.
    """
    folder = Path(folder)
    vocab_size = int(manifest["vocab_size"])
    for entry in manifest["splits"].values():
        for shard in entry["shards"]:
            path = folder / shard["file"]
            ids = np.memmap(path, dtype=DTYPES[manifest["dtype"]], mode="r")
            top = int(ids.max()) if ids.size else 0
            if top >= vocab_size:
                raise CorruptDataError(
                    f"{path}: token id {top} is not below the manifest's vocabulary size "
                    f"{vocab_size}: the shard was written with another tokenizer or edited; "
                    "tokenize again"
                )


def check_tokenizer(folder: str | Path, manifest: dict, verify: bool = True) -> None:
    """Size (and with ``verify``, sha256) of every tokenizer file the manifest lists."""
    folder = Path(folder)
    tokenizer_dir = folder / manifest["tokenizer"].get("dir", "tokenizer")
    files = manifest["tokenizer"].get("files") or []
    for entry in files:
        path = tokenizer_dir / entry["file"]
        if not path.is_file():
            raise FileNotFoundError(
                f"tokenizer file listed in {folder / 'manifest.json'} not found: {path}"
            )
        if path.stat().st_size != int(entry["bytes"]):
            raise CorruptDataError(
                f"{path}: {path.stat().st_size} bytes, the manifest says {entry['bytes']}: "
                "the tokenizer file is truncated or overwritten (re-run adloco tokenize)"
            )
    if verify:
        for entry in files:
            _check_sha256(tokenizer_dir / entry["file"], entry["sha256"], "tokenizer file")


def check_tokenizer_ids(folder: str | Path, manifest: dict) -> None:
    """The manifest's vocabulary size and EOS/BOS ids are those of the tokenizer it names."""
    folder = Path(folder)
    tokenizer_dir = folder / manifest["tokenizer"].get("dir", "tokenizer")
    try:
        actual = saved_ids(tokenizer_dir)
    except Exception as exc:  # noqa: BLE001 (whatever a damaged file makes the loader raise)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CorruptDataError(
            f"{tokenizer_dir}: the tokenizer does not load ({reason}); re-run adloco tokenize"
        ) from exc
    claims = {
        "vocab_size": manifest["vocab_size"],
        "tokenizer.vocab_size": manifest["tokenizer"].get("vocab_size", actual["vocab_size"]),
        "tokenizer.eos_token_id": manifest["tokenizer"].get("eos_token_id"),
        "tokenizer.bos_token_id": manifest["tokenizer"].get("bos_token_id"),
    }
    for key, claimed in claims.items():
        real = actual[key.rpartition(".")[2]]
        if claimed != real:
            raise CorruptDataError(
                f"{folder / 'manifest.json'}: {key} is {claimed!r}, but the tokenizer in "
                f"{tokenizer_dir} says {real!r}: the manifest was edited or belongs to other "
                "data (re-run adloco tokenize)"
            )


def _check_sha256(path: Path, expected: str, what: str) -> None:
    digest = sha256_file(path)
    if digest != expected:
        raise CorruptDataError(
            f"{path}: sha256 {digest} does not match the manifest's {expected}: "
            f"the {what} is corrupt (re-run adloco tokenize)"
        )
