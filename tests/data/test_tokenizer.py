"""Tokenizers: BPE training, mistral-v1, pretrained folders, the stage's encode function."""

from __future__ import annotations

import numpy as np
import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from adloco.config import TokenizerConfig
from adloco.data import tokenizer as tok

SENTENCE = "The Eiffel Tower was completed in 1889; it’s 330 metres tall — a café nearby."


@pytest.fixture(scope="module")
def texts(tiny_c4_records) -> list[str]:
    return [r["text"] for r in tiny_c4_records]


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory, texts):
    folder = tmp_path_factory.mktemp("bpe") / "tokenizer"
    return tok.save_tokenizer(tok.train_bpe(texts, 300), folder)


def test_bpe_training_is_deterministic(texts):
    first = tok.train_bpe(texts, 300).backend_tokenizer.to_str()
    second = tok.train_bpe(texts, 300).backend_tokenizer.to_str()
    assert first == second


def test_bpe_folder_loads_with_autotokenizer_and_round_trips(bpe_dir, texts):
    loaded = AutoTokenizer.from_pretrained(bpe_dir)
    assert isinstance(loaded, PreTrainedTokenizerFast)
    assert len(loaded) == 300
    assert loaded.eos_token == tok.BPE_EOS and loaded.eos_token_id == 0
    for text in [*texts, SENTENCE]:
        ids = loaded(text)["input_ids"]
        assert loaded.decode(ids) == text  # byte-level: exact, no normalisation


def test_encode_documents_is_raw_tokenizer_plus_eos(bpe_dir, texts):
    loaded = AutoTokenizer.from_pretrained(bpe_dir)
    backend = tok.load_backend(bpe_dir)
    flat, lengths = tok.encode_documents(backend, texts, loaded.eos_token_id)
    expected = [ids + [loaded.eos_token_id] for ids in loaded(texts)["input_ids"]]
    assert lengths.tolist() == [len(ids) for ids in expected]
    assert flat.dtype == np.dtype("<u2")
    assert flat.tolist() == [i for ids in expected for i in ids]
    # A tokenizer that appends EOS itself gets no second one.
    flat_no_eos, lengths_no_eos = tok.encode_documents(
        backend, texts, loaded.eos_token_id, append_eos=False
    )
    assert (lengths_no_eos == lengths - 1).all()
    assert flat_no_eos.size == flat.size - len(texts)


def test_describe_bpe(bpe_dir):
    assert tok.describe(tok.load_backend(bpe_dir), 0) == {
        "bos_token_id": None,
        "appends_eos": False,
    }


def test_mistral_v1_has_32000_tokens_and_round_trips(tmp_path):
    loaded = tok.load_mistral_v1(tmp_path)
    assert len(loaded) == 32000 == tok.MISTRAL_V1_VOCAB
    assert (loaded.bos_token_id, loaded.eos_token_id) == (1, 2)
    ids = loaded(SENTENCE)["input_ids"]
    assert ids[0] == 1 and 2 not in ids
    assert loaded.decode(ids, skip_special_tokens=True) == SENTENCE
    # The saved folder (what the stage writes) loads back to the same encoding.
    saved = tok.save_tokenizer(loaded, tmp_path / "saved")
    assert AutoTokenizer.from_pretrained(saved)(SENTENCE)["input_ids"] == ids
    backend = tok.load_backend(saved)
    assert backend.encode(SENTENCE).ids == ids
    assert tok.describe(backend, 2) == {"bos_token_id": 1, "appends_eos": False}


def test_pretrained_kind_loads_a_local_folder(bpe_dir, texts):
    spec = TokenizerConfig(kind="pretrained", name=str(bpe_dir), vocab_size=300)
    loaded = tok.build_tokenizer(spec, None, bpe_dir)
    reference = AutoTokenizer.from_pretrained(bpe_dir)
    assert len(loaded) == len(reference)
    assert loaded(texts[:5])["input_ids"] == reference(texts[:5])["input_ids"]


def test_build_tokenizer_errors(tmp_path):
    with pytest.raises(ValueError, match="data.tokenizer.name"):
        tok.build_tokenizer(TokenizerConfig("pretrained", None, 300), None, tmp_path)
    with pytest.raises(ValueError, match="train documents"):
        tok.build_tokenizer(TokenizerConfig("bpe", None, 300), None, tmp_path)
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        tok.load_backend(tmp_path)


def test_token_dtype():
    assert tok.token_dtype(300) == np.dtype("<u2")
    assert tok.token_dtype(65535) == np.dtype("<u2")
    assert tok.token_dtype(65536) == np.dtype("<u4")
