"""Tokenize C4 records into packed, memory-mappable shards (`adloco tokenize`).

Second stage of the pipeline, after ``prepare-corpus`` (offline) or straight
from local C4 files or the hub. It reads records through
:mod:`adloco.data.c4`, builds the tokenizer (:mod:`adloco.data.tokenizer`;
BPE is trained on the training documents only), assigns each document to
validation, base (the documents the experiment's base model pretrains on,
``data.base_fraction``) or train, encodes documents in batches (``data.num_proc`` worker processes),
joins each split's documents with EOS and cuts the stream into sequences of
``data.seq_len_tokens`` without padding. The remainder shorter than one
sequence is dropped and counted. Last, the validation split's reference
perplexities (uniform, unigram, bigram; :mod:`adloco.data.reference`) go into
the manifest. Output, written atomically into
``data/tokenized/<dataset>/``: flat ``uint16``/``uint32`` shards, the
tokenizer folder and ``manifest.json`` (layout in docs/DESIGN.md and
docs/data.md), which :class:`adloco.data.reader.TokenData` verifies and reads.

The split is decided per document by a seeded hash of its position in the
stream, a uniform number u in [0, 1): validation when u < f_v, base when
f_v ≤ u < f_v + (1 − f_v) f_b, train otherwise. It needs no count of the
documents up front (C4 is streamed); raising ``max_documents`` keeps every
earlier document in its split, and changing ``base_fraction`` never moves a
validation document. The same seed and input give the same bytes.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import logging
import multiprocessing
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from adloco.config import load_config_dict
from adloco.data import c4, reference
from adloco.data import tokenizer as tok
from adloco.data.reader import DTYPES, TokenSplit
from adloco.io import atomic_dir, naming_output, sha256_file, write_json_atomic

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
SPLITS = ("train", "validation")
BASE_SPLIT = "base"
# Documents per encode call: large enough to amortise the call, small enough
# that a worker's batch of C4 text stays a few MiB. A batch also ends once its
# texts reach BATCH_CHARS, so that long documents (each at most
# c4.MAX_RECORD_BYTES) bound a worker's memory too: encoding takes about 130
# bytes per byte of text.
BATCH_DOCUMENTS = 512
BATCH_CHARS = 1 << 20
# 2**27 tokens = 256 MiB of uint16 per shard file.
SHARD_TOKENS = 1 << 27
# Buffered tokens per split before full sequences are written out.
FLUSH_TOKENS = 1 << 20
# What this stage writes into its folder (adloco.io.check_replaceable).
TOKENIZED_FILES = ("manifest.json", "tokenizer/*", "*-[0-9][0-9][0-9][0-9][0-9].bin")

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _splitmix64(x: Any) -> Any:
    """SplitMix64's finalizer on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(_GOLDEN)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def document_uniforms(indices: Any, seed: int) -> Any:
    """A uniform [0, 1) number per document position, a pure function of (seed, index)."""
    key = _splitmix64(np.array([seed & _MASK64], dtype=np.uint64))
    x = _splitmix64(np.asarray(indices, dtype=np.uint64) ^ key)
    return (x >> np.uint64(11)).astype(np.float64) * 2.0**-53


def validation_mask(indices: Any, seed: int, fraction: float) -> Any:
    """True for the documents (by stream position) that go to the validation split."""
    return document_uniforms(indices, seed) < fraction


def splits_of(data_cfg: dict) -> tuple[str, ...]:
    """The splits a configuration writes: base first when ``data.base_fraction`` > 0."""
    base = data_cfg.get("base_fraction", 0.0) > 0
    return ((BASE_SPLIT,) if base else ()) + SPLITS


def document_splits(indices: Any, seed: int, validation: float, base: float) -> Any:
    """The split of each document (by stream position): 0 train, 1 validation, 2 base."""
    u = document_uniforms(indices, seed)
    out = np.zeros(u.shape, dtype=np.int8)
    out[(u >= validation) & (u < validation + (1.0 - validation) * base)] = 2
    out[u < validation] = 1
    return out


SPLIT_CODES = {"train": 0, "validation": 1, BASE_SPLIT: 2}


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


def batched_texts(
    records: Iterable[dict], size: int = BATCH_DOCUMENTS, chars: int = BATCH_CHARS
) -> Iterator[list[str]]:
    """The texts in batches of ``size`` documents, or fewer once they hold ``chars`` characters."""
    batch: list[str] = []
    held = 0
    for record in records:
        batch.append(record["text"])
        held += len(record["text"])
        if len(batch) == size or held >= chars:
            yield batch
            batch = []
            held = 0
    if batch:
        yield batch


def split_texts(
    records: Iterable[dict], seed: int, fraction: float, split: str = "train"
) -> Iterator[str]:
    """The texts of one split, in stream order (feeds BPE training)."""
    start = 0
    for batch in batched_texts(records):
        is_val = validation_mask(np.arange(start, start + len(batch)), seed, fraction)
        start += len(batch)
        for text, val in zip(batch, is_val, strict=True):
            if bool(val) == (split == "validation"):
                yield text


def encode_stream(
    batches: Iterable[list[str]],
    tokenizer_dir: Path,
    eos_token_id: int,
    dtype: Any,
    append_eos: bool,
    num_proc: int = 1,
) -> Iterator[tuple[Any, Any]]:
    """(flat ids, lengths) per batch, in input order, on ``num_proc`` processes.

    At most two batches per process are in flight, so a streamed corpus is
    never read ahead into memory.
    """
    if num_proc <= 1:
        backend = tok.load_backend(tokenizer_dir)
        for texts in batches:
            yield tok.encode_documents(backend, texts, eos_token_id, dtype, append_eos)
        return
    # spawn, not fork: the parent may hold Rust thread pools (BPE training).
    ctx = multiprocessing.get_context("spawn")
    initargs = (str(Path(tokenizer_dir) / "tokenizer.json"), eos_token_id, str(dtype), append_eos)
    with ctx.Pool(num_proc, initializer=tok.worker_init, initargs=initargs) as pool:
        pending: collections.deque = collections.deque()
        for texts in batches:
            pending.append(pool.apply_async(tok.worker_encode, (texts,)))
            if len(pending) >= 2 * num_proc:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


def _progress_bar(total: int | None, desc: str, progress: bool | None) -> Any:
    # progress None: tqdm decides (on for a terminal, off in a log file).
    return tqdm(
        total=total, desc=desc, unit="doc", disable=None if progress is None else not progress
    )


def tokenize_corpus(
    data_cfg: dict,
    seed: int,
    out: str | Path,
    raw_dir: str | Path | None = None,
    *,
    shard_sequences: int | None = None,
    progress: bool | None = None,
) -> dict:
    """Tokenize the configured corpus into ``out`` (replaced atomically); return the manifest.

    ``data_cfg`` is the default-filled ``data`` section of the configuration;
    ``raw_dir`` overrides ``data.raw_dir`` for local sources.
    """
    seq_len = data_cfg["seq_len_tokens"]
    if shard_sequences is None:
        shard_sequences = max(1, SHARD_TOKENS // seq_len)
    with (
        atomic_dir(out, TOKENIZED_FILES, "--out") as tmp,
        tempfile.TemporaryDirectory(prefix="adloco-tok-") as scratch,
    ):
        tokenizer = build_tokenizer(data_cfg, seed, raw_dir, tmp, scratch, progress)
        writers = {
            s: ShardWriter(tmp, s, seq_len, tokenizer.dtype, shard_sequences)
            for s in splits_of(data_cfg)
        }
        stats = c4.RecordStats()
        stream, source = c4.open_stream(data_cfg, raw_dir, stats)
        origin = source.get("hub_path") or str(raw_dir or data_cfg["raw_dir"])
        records = c4.normalize_records(
            stream,
            data_cfg.get("max_documents"),
            origin,
            data_cfg.get("on_bad_record", "error"),
            stats,
        )
        documents = write_documents(records, tokenizer, writers, data_cfg, seed, progress)
        splits = finish_splits(writers, documents, seq_len)
        documents_read = sum(documents.values())
        _report_records(stats, documents_read)
        manifest = build_manifest(data_cfg, seed, tokenizer, splits, source, stats, documents_read)
        manifest["reference_perplexity"] = reference_levels(tmp, manifest).as_dict()
        write_json_atomic(tmp / "manifest.json", manifest)
    return manifest


class SavedTokenizer:
    """The tokenizer written into the output folder, and what the shards need of it."""

    def __init__(self, folder: Path):
        self.dir = folder
        ids = tok.saved_ids(folder)
        self.vocab_size = ids["vocab_size"]
        self.eos_token_id = ids["eos_token_id"]
        self.added = {k: ids[k] for k in ("bos_token_id", "appends_eos")}
        self.dtype = tok.token_dtype(self.vocab_size)


def build_tokenizer(
    data_cfg: dict,
    seed: int,
    raw_dir: str | Path | None,
    out: Path,
    scratch: str,
    progress: bool | None,
) -> SavedTokenizer:
    """Build (a BPE trains on the train split's documents) or load the tokenizer; save it."""
    tok_cfg = data_cfg["tokenizer"]
    train_texts = None
    if tok_cfg["kind"] == "bpe":
        bar = _progress_bar(data_cfg.get("max_documents"), "bpe train", progress)
        records = c4.iter_records(data_cfg, raw_dir)
        train_texts = split_texts(
            _counting(records, bar), seed, data_cfg["validation_fraction"], "train"
        )
    tokenizer = tok.build_tokenizer(tok_cfg, train_texts, scratch)
    if train_texts is not None:
        bar.close()
    return SavedTokenizer(tok.save_tokenizer(tokenizer, out / "tokenizer"))


def write_documents(
    records: Iterable[dict],
    tokenizer: SavedTokenizer,
    writers: dict[str, ShardWriter],
    data_cfg: dict,
    seed: int,
    progress: bool | None,
) -> dict[str, int]:
    """Encode the records and send each document's tokens to its split; documents per split."""
    fraction = data_cfg["validation_fraction"]
    base = data_cfg.get("base_fraction", 0.0)
    batches = encode_stream(
        batched_texts(records),
        tokenizer.dir,
        tokenizer.eos_token_id,
        tokenizer.dtype,
        append_eos=not tokenizer.added["appends_eos"],
        num_proc=data_cfg.get("num_proc", 1),
    )
    documents = dict.fromkeys(writers, 0)
    start = 0
    with _progress_bar(data_cfg.get("max_documents"), "tokenize", progress) as bar:
        for flat, lengths in batches:
            if flat.size and int(flat.max()) >= tokenizer.vocab_size:
                raise ValueError(
                    f"tokenizer produced id {int(flat.max())} >= its vocabulary "
                    f"{tokenizer.vocab_size}"
                )
            split_of = document_splits(np.arange(start, start + lengths.size), seed, fraction, base)
            token_split = np.repeat(split_of, lengths)
            for name, writer in writers.items():
                code = SPLIT_CODES[name]
                writer.add(flat[token_split == code])
                documents[name] += int((split_of == code).sum())
            start += int(lengths.size)
            bar.update(int(lengths.size))
    return documents


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


def build_manifest(
    data_cfg: dict,
    seed: int,
    tokenizer: SavedTokenizer,
    splits: dict[str, dict],
    source: dict,
    stats: Any,
    documents_read: int,
) -> dict:
    """manifest.json (docs/DESIGN.md, "Tokenized data")."""
    tok_cfg = data_cfg["tokenizer"]
    return {
        "format_version": FORMAT_VERSION,
        "dataset": data_cfg["dataset"],
        "source": {
            **source,
            "documents_read": documents_read,
            "on_bad_record": data_cfg.get("on_bad_record", "error"),
            "skipped_records": stats.skipped,
            "skipped_record_examples": stats.examples,
            "empty_documents": stats.empty,
        },
        "tokenizer": {
            "kind": tok_cfg["kind"],
            "name": _tokenizer_name(tok_cfg),
            "dir": "tokenizer",
            "vocab_size": tokenizer.vocab_size,
            "eos_token_id": tokenizer.eos_token_id,
            "bos_token_id": tokenizer.added["bos_token_id"],
            # Checked when the data is opened, like the shards.
            "files": _file_checksums(tokenizer.dir),
        },
        "vocab_size": tokenizer.vocab_size,
        "seq_len_tokens": data_cfg["seq_len_tokens"],
        "dtype": tokenizer.dtype.name,
        "seed": seed,
        "validation_fraction": data_cfg["validation_fraction"],
        "base_fraction": data_cfg.get("base_fraction", 0.0),
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


def _file_checksums(folder: Path) -> list[dict]:
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


def _report_records(stats: Any, documents: int) -> None:
    if stats.skipped:
        log.warning(
            "skipped %d bad records (data.on_bad_record: skip), counted in the manifest; first: %s",
            stats.skipped,
            stats.examples[0],
        )
    if stats.empty:
        log.warning(
            "%d documents have an empty text (of %d read): each adds only its EOS token",
            stats.empty,
            documents,
        )


def _counting(records: Iterable[dict], bar: Any) -> Iterator[dict]:
    for record in records:
        bar.update(1)
        yield record


def _tokenizer_name(tok_cfg: dict) -> str | None:
    if tok_cfg["kind"] == "mistral-v1":
        return f"{tok.MISTRAL_PACKAGE}:{tok.MISTRAL_V1_FILE}"
    if tok_cfg["kind"] == "pretrained":
        return tok_cfg["name"]
    return None


def run(args: argparse.Namespace) -> int:
    cfg = load_config_dict(args.config)
    data = cfg["data"]
    if data["source"] == "hub" and args.raw:
        log.info("data.source is hub: --raw %s is not read", args.raw)
    manifest = tokenize_corpus(data, cfg["seed"], args.out, raw_dir=args.raw)
    for name in manifest["splits"]:
        split = manifest["splits"][name]
        log.info(
            "%s: %d documents, %d tokens, %d sequences of %d (%d tokens dropped)",
            name,
            split["documents"],
            split["tokens"],
            split["sequences"],
            manifest["seq_len_tokens"],
            split["dropped_tokens"],
        )
    ref = manifest["reference_perplexity"]
    log.info(
        "validation reference perplexities: uniform %.0f, unigram %.1f, bigram %.1f",
        ref["uniform"],
        ref["unigram"],
        ref["bigram"],
    )
    return 0
