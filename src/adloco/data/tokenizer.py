"""Tokenizers of the data stage: build or load one, and encode documents fast.

Used by `adloco tokenize` (:mod:`adloco.data.tokenize`), which saves the
tokenizer into the output's ``tokenizer/`` folder; training, evaluation and
the final model load it back with ``AutoTokenizer.from_pretrained``. Three
kinds (``data.tokenizer.kind``):

- ``bpe``: byte-level BPE trained with the ``tokenizers`` library on the train
  documents, one special token ``<|endoftext|>`` (EOS, id 0). Small
  vocabularies keep the tiny CPU model's LM head cheap; training is
  deterministic (same texts, same ``tokenizer.json`` bytes).
- ``mistral-v1``: the Llama-2-layout 32k SentencePiece model that the
  ``mistral-common`` package ships, converted by transformers' ``LlamaTokenizer``.
- ``pretrained``: ``AutoTokenizer.from_pretrained(name)``, a hub id or a folder
  (the paper uses MicroLlama's tokenizer).

Encoding goes through the Rust backend (``tokenizers.Tokenizer``) loaded from
the saved ``tokenizer.json``, so the worker processes of the stage import
neither transformers nor torch.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from adloco.config import TokenizerConfig
from adloco.data.corpus import package_file

BPE_EOS = "<|endoftext|>"
MISTRAL_PACKAGE = "mistral-common"
MISTRAL_V1_FILE = "mistral_common/data/tokenizer.model.v1"
MISTRAL_V1_VOCAB = 32000
# A probe for what the tokenizer adds around a document by itself.
_PROBE_TEXT = "a"


def train_bpe(texts: Iterable[str], vocab_size: int, length: int | None = None) -> Any:
    """A byte-level BPE tokenizer trained on ``texts``, wrapped for transformers.

    Byte-level pre-tokenization without a normalizer: every string round-trips
    exactly, and no text is ever unknown.
    """
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BPE_EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer=trainer, length=length)
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=BPE_EOS)


def mistral_v1_folder(folder: str | Path) -> Path:
    """Write a loadable folder for mistral-common's Llama-2-layout SentencePiece model.

    ``LlamaTokenizerFast(vocab_file=...)`` in transformers 5 silently builds a
    3-token vocabulary; ``AutoTokenizer.from_pretrained`` on a folder whose
    config names ``LlamaTokenizer`` converts the model properly (it needs the
    ``sentencepiece`` and ``protobuf`` packages).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(package_file(MISTRAL_PACKAGE, MISTRAL_V1_FILE), folder / "tokenizer.model")
    config = {
        "tokenizer_class": "LlamaTokenizer",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        # Llama-2 convention: BOS opens each document, EOS is added by the packer.
        "add_bos_token": True,
        "add_eos_token": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return folder


def load_mistral_v1(work_dir: str | Path) -> Any:
    folder = mistral_v1_folder(Path(work_dir) / "mistral-v1")
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    if len(tokenizer) != MISTRAL_V1_VOCAB:
        raise ValueError(
            f"{folder}: the mistral-v1 tokenizer loaded with {len(tokenizer)} tokens, "
            f"expected {MISTRAL_V1_VOCAB} (are sentencepiece and protobuf installed?)"
        )
    return tokenizer


def load_pretrained(name: str) -> Any:
    # Never trust_remote_code: only tokenizer classes that transformers ships.
    return AutoTokenizer.from_pretrained(name)


def build_tokenizer(
    spec: TokenizerConfig, train_texts: Iterable[str] | None, work_dir: str | Path
) -> Any:
    """The tokenizer that ``data.tokenizer`` (``spec``) asks for.

    ``train_texts`` (the train documents) is read only by kind ``bpe``;
    ``work_dir`` is a scratch folder.
    """
    kind = spec.kind
    if kind == "bpe":
        if train_texts is None:
            raise ValueError("data.tokenizer.kind bpe needs the train documents")
        tokenizer = train_bpe(train_texts, spec.vocab_size)
    elif kind == "mistral-v1":
        tokenizer = load_mistral_v1(work_dir)
    elif kind == "pretrained":
        if not spec.name:
            raise ValueError("data.tokenizer.name: required when data.tokenizer.kind is pretrained")
        tokenizer = load_pretrained(spec.name)
    else:
        raise ValueError(f"data.tokenizer.kind: unknown kind {kind!r}")
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(f"data.tokenizer: {kind} tokenizer has no fast (tokenizers) backend")
    if tokenizer.eos_token_id is None:
        raise ValueError(f"data.tokenizer: {kind} tokenizer has no EOS token")
    return tokenizer


def save_tokenizer(tokenizer: Any, folder: str | Path) -> Path:
    """``save_pretrained`` into ``folder``; check that ``tokenizer.json`` is there."""
    folder = Path(folder)
    try:
        tokenizer.save_pretrained(str(folder))
    except OSError:
        raise
    except Exception as exc:
        # The Rust backend's write errors are plain Exceptions: "... (os error 28)".
        code = re.search(r"\(os error (\d+)\)", str(exc))
        if code is None:
            raise
        errno_ = int(code.group(1))
        raise OSError(errno_, os.strerror(errno_), str(folder / "tokenizer.json")) from exc
    settings_path = folder / "tokenizer_config.json"
    settings = json.loads(settings_path.read_text())
    if settings.get("tokenizer_class") == "TokenizersBackend":
        # transformers 5's name for PreTrainedTokenizerFast; the old name loads in 4 and 5.
        settings["tokenizer_class"] = "PreTrainedTokenizerFast"
        settings_path.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")
    if not (folder / "tokenizer.json").is_file():
        raise ValueError(f"{folder}: the saved tokenizer has no tokenizer.json")
    return folder


def load_backend(folder: str | Path) -> Any:
    """The Rust ``tokenizers.Tokenizer`` of a saved tokenizer folder."""
    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer file not found: {path}")
    return Tokenizer.from_file(str(path))


def saved_ids(folder: str | Path) -> dict:
    """What a saved tokenizer folder says: vocabulary size, EOS and added BOS ids, EOS appended.

    Read the way training and the final model read it
    (``AutoTokenizer.from_pretrained``), so that the manifest written from it
    and checked against it (:mod:`adloco.data.reader`) hold what every stage
    will see.
    """
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    if tokenizer.eos_token_id is None:
        raise ValueError(f"{folder}: the tokenizer has no EOS token")
    eos = int(tokenizer.eos_token_id)
    added = describe(load_backend(folder), eos)
    return {"vocab_size": len(tokenizer), "eos_token_id": eos, **added}


def describe(backend: Any, eos_token_id: int) -> dict:
    """What the backend adds around a document: BOS id (or None), whether it appends EOS."""
    ids = backend.encode(_PROBE_TEXT).ids
    bare = backend.encode(_PROBE_TEXT, add_special_tokens=False).ids
    bos = None
    if len(ids) > len(bare) and ids[len(ids) - len(bare) :] == bare:
        bos = ids[0]
    appends_eos = bool(ids) and ids[-1] == eos_token_id and bare[-1:] != [eos_token_id]
    return {"bos_token_id": bos, "appends_eos": appends_eos}


def token_dtype(vocab_size: int) -> np.dtype:
    """Little-endian ``uint16`` when every id fits, else ``uint32``."""
    return np.dtype("<u2") if vocab_size <= 65535 else np.dtype("<u4")


class SavedTokenizer:
    """A tokenizer saved into a folder, and what the shards and the manifest need of it."""

    def __init__(self, folder: Path):
        self.dir = folder
        ids = saved_ids(folder)
        self.vocab_size = ids["vocab_size"]
        self.eos_token_id = ids["eos_token_id"]
        self.added = {k: ids[k] for k in ("bos_token_id", "appends_eos")}
        self.dtype = token_dtype(self.vocab_size)


def encode_documents(
    backend: Any,
    texts: Sequence[str],
    eos_token_id: int,
    dtype: np.dtype | str = "<u2",
    append_eos: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of each text followed by EOS, flattened, and each document's length.

    The stage's tokenization function: documents get the tokenizer's own
    special tokens (BOS for Llama tokenizers, none for BPE), then one EOS that
    separates them in the packed stream. Lengths include that EOS.
    """
    encode = getattr(backend, "encode_batch_fast", backend.encode_batch)
    ids = [encoding.ids for encoding in encode(list(texts))]
    if append_eos:
        for doc in ids:
            doc.append(eos_token_id)
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=int(lengths.sum()))
    return flat, lengths


# Worker processes of the stage: each loads the backend once.
_WORKER: dict[str, Any] = {}


def worker_init(tokenizer_json: str, eos_token_id: int, dtype: str, append_eos: bool) -> None:
    # One process per core: the Rust thread pool would oversubscribe them.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _WORKER.update(
        backend=Tokenizer.from_file(tokenizer_json),
        eos_token_id=eos_token_id,
        dtype=dtype,
        append_eos=append_eos,
    )


def worker_encode(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    return encode_documents(
        _WORKER["backend"],
        texts,
        _WORKER["eos_token_id"],
        _WORKER["dtype"],
        _WORKER["append_eos"],
    )
