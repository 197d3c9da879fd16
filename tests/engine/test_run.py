"""`adloco train`'s final model: the tokenizer's special ids, Hugging Face's conventions."""

from __future__ import annotations

import json
import os

import pytest
import torch
import yaml
from array_data import TINY_CLUSTER, TINY_MODEL, tiny_curves
from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessor

from adloco import cli

CONFIG = {
    "experiment": "run",
    "seed": 0,
    "data": {"dataset": "tiny", "source": "local", "seq_len_tokens": 16},
    "model": TINY_MODEL,
    "cluster": TINY_CLUSTER,
    "train": {"max_rounds": 1, "inner_steps": 1, "max_tokens": 10**6, "eval_sequences": 8},
    "runs": {
        "r": {"method": "diloco"},
        # On its own node slots: 2 devices x 1 slot, the batch of 2 slots x 2 kept.
        "w": {"method": "diloco", "nodes_per_device": 1, "initial_batch": 2},
    },
}


def train(root, tiny_tokenized, run: str = "r"):
    """``adloco train`` of one round of ``run`` into ``root/out``; the run folder."""
    from adloco import train_run

    config = root / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    args = ["train", "--config", str(config), "--run", run, "--seed", "0"]
    args += ["--data", str(tiny_tokenized), "--calibration", str(root / "calibration")]
    args += ["--out", str(root / "out"), "--checkpoints", str(root / "ckpt")]
    args += ["--no-progress", "--threads", "1"]
    curves, threads = train_run.step_time_curves, torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    train_run.step_time_curves = lambda cfg, _dir: tiny_curves(cfg)
    try:
        assert cli.main(args) == 0
    finally:
        train_run.step_time_curves = curves
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
    return root / "out"


@pytest.fixture(scope="module")
def final(tmp_path_factory, tiny_tokenized):
    """The final/ folder of a one-round run on the tiny data."""
    return train(tmp_path_factory.mktemp("run"), tiny_tokenized) / "final"


def test_a_run_on_its_own_node_slots_trains_on_them(tmp_path, tiny_tokenized):
    out = train(tmp_path, tiny_tokenized, "w")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    # 2 devices x 1 slot (the cluster has 2 x 2), each slot 2 sequences: the same global batch.
    assert {(r["nodes"], r["local_batch"], r["effective_batch"]) for r in rows} == {(2, 2, 4)}
    assert [w["slot"] for w in rows[0]["slot_work"]] == [0, 1]


class Scripted(LogitsProcessor):
    """Greedy decoding that emits ``tokens`` in turn, whatever the model says."""

    def __init__(self, tokens: list[int], prompt_length: int):
        self.tokens, self.prompt_length = tokens, prompt_length

    def __call__(self, input_ids, scores):
        step = input_ids.shape[1] - self.prompt_length
        forced = torch.full_like(scores, -float("inf"))
        forced[:, self.tokens[step]] = 0.0
        return forced


def test_the_saved_config_carries_the_tokenizers_special_ids(final):
    model = AutoModelForCausalLM.from_pretrained(final)
    tokenizer = AutoTokenizer.from_pretrained(final)
    assert tokenizer.eos_token_id == 0 and tokenizer.bos_token_id is None
    # No BOS token of its own: a text starts with the end of text, as GPT-2's does.
    saved = json.loads((final / "config.json").read_text())
    assert saved["bos_token_id"] == saved["eos_token_id"] == 0 and saved["pad_token_id"] == 0
    for config in (model.config, model.generation_config):
        assert config.eos_token_id == tokenizer.eos_token_id
        assert config.bos_token_id == tokenizer.eos_token_id


def test_from_pretrained_and_generate_write_text_from_the_export(final):
    # What a Hub user runs: no adloco code, the folder alone.
    model = AutoModelForCausalLM.from_pretrained(final)
    tokenizer = AutoTokenizer.from_pretrained(final)
    prompts = tokenizer(["The city", "A river runs"], return_tensors="pt", padding=True)
    out = model.generate(**prompts, max_new_tokens=6, do_sample=False)
    new = out[:, prompts.input_ids.shape[1] :]
    assert new.shape[0] == 2 and new.shape[1] >= 1
    texts = tokenizer.batch_decode(new, skip_special_tokens=True)
    assert all(isinstance(x, str) for x in texts) and any(x.strip() for x in texts), texts
    # Generated from nothing: the BOS id starts it.
    alone = model.generate(max_new_tokens=3, do_sample=False)
    assert alone[0, 0].item() == model.config.bos_token_id


def test_generate_stops_at_the_end_of_text_not_at_a_quote_mark(final):
    model = AutoModelForCausalLM.from_pretrained(final)
    tokenizer = AutoTokenizer.from_pretrained(final)
    # A Llama's config says EOS 2 unless told otherwise: in this vocabulary, '"'.
    quote, bang, eos = 2, 1, tokenizer.eos_token_id
    assert tokenizer.decode([quote]) == '"' and tokenizer.decode([bang]) == "!"
    prompt = torch.tensor([tokenizer("The city").input_ids])
    script = [quote, bang, eos, 5, 6, 7]
    out = model.generate(
        prompt,
        max_new_tokens=len(script),
        do_sample=False,
        logits_processor=[Scripted(script, prompt.shape[1])],
        pad_token_id=eos,
    )
    assert out[0, prompt.shape[1] :].tolist() == [quote, bang, eos]


def test_the_final_folder_pads_with_the_end_of_text_and_knows_its_length(final):
    model = AutoModelForCausalLM.from_pretrained(final)
    tokenizer = AutoTokenizer.from_pretrained(final)
    assert tokenizer.pad_token_id == tokenizer.eos_token_id == model.generation_config.pad_token_id
    # A final model, which no stage trains further: config.json names its pad token too.
    assert model.config.pad_token_id == tokenizer.eos_token_id
    assert tokenizer.model_max_length == CONFIG["data"]["seq_len_tokens"]
    saved = json.loads((final / "tokenizer_config.json").read_text())
    assert saved["tokenizer_class"] == "PreTrainedTokenizerFast"  # transformers 4 and 5
    mask = os.umask(0)
    os.umask(mask)
    assert (final / "model.safetensors").stat().st_mode & 0o777 == 0o666 & ~mask


def test_the_final_folder_has_a_model_card_with_the_runs_numbers(final):
    summary = json.loads((final.parent / "summary.json").read_text())
    rows = [json.loads(line) for line in (final.parent / "metrics.jsonl").read_text().splitlines()]
    best = [r for r in rows if r["trainer"] == summary["final_trainer"]][-1]
    card = (final / "README.md").read_text()
    meta = yaml.safe_load(card.split("---\n")[1])
    assert meta["library_name"] == "transformers" and {"adloco", "diloco"} <= set(meta["tags"])
    assert meta["adloco"] == {
        "experiment": "run",
        "model": "run r, seed 0",
        "tokens": summary["tokens_total"],
        "val_perplexity": best["val_perplexity"],
        "seq_len_tokens": 16,
        "corpus": "tiny: local C4-format files (data/raw); their licence was not recorded",
    }
    assert f"| Validation perplexity | {best['val_perplexity']:.4f} |" in card
    assert "adloco train --config " in card and " --run-name r --seed 0 --data " in card
    assert f"--out {final.parent} --checkpoints " in card


def test_the_final_folders_card_metadata_reads_back_with_the_hubs_library(final):
    from huggingface_hub import ModelCard

    meta = ModelCard.load(final / "README.md").data
    # data.source local (C4's English files), model.source config (a random start): no Hub
    # data set id (the local name is none), a licence the card cannot know.
    assert meta.datasets is None and meta.language == ["en"]
    assert meta.base_model is None and meta.license == "other"
    assert meta.to_dict()["license_name"] == "licence-of-the-local-corpus-not-recorded"
    assert meta.tags == ["adloco", "llama", "diloco"]


@pytest.mark.parametrize(
    ("override", "named"),
    [({"inner_lr": 0.02}, "runs.r.inner_lr"), ({}, "train.inner_lr")],
    ids=["run's own lr", "train's lr"],
)
def test_a_diverged_run_names_the_key_that_set_its_learning_rate(
    tmp_path, tiny_tokenized, monkeypatch, capsys, override, named
):
    from adloco import train_run
    from adloco.engine import inner as inner_mod

    monkeypatch.setattr(train_run, "step_time_curves", lambda cfg, _dir: tiny_curves(cfg))
    real = inner_mod.batch_loss
    monkeypatch.setattr(inner_mod, "batch_loss", lambda m, x: (real(m, x)[0] * float("nan"), 1))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({**CONFIG, "runs": {"r": {"method": "diloco", **override}}}))
    args = ["train", "--config", str(config), "--run", "r", "--seed", "0"]
    args += ["--data", str(tiny_tokenized), "--calibration", str(tmp_path / "calibration")]
    args += ["--out", str(tmp_path / "out"), "--checkpoints", str(tmp_path / "ckpt")]
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    try:
        code = cli.main([*args, "--no-progress", "--threads", "1"])
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1, err
    assert err.startswith("adloco train: error: r seed 0 diverged: trainer 0: non-finite")
    assert f"lower {named} (or train.outer_lr) or check the data" in err
