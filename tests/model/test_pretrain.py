"""The base model: a plain AdamW loop, exact resume, verified outputs, runs starting from it."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import re

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from adloco.config import ConfigError, section, validate
from adloco.data.reader import TokenData
from adloco.data.tokenize import tokenize_corpus
from adloco.model import pretrain
from adloco.model.base import DATA_KEY, start_model
from adloco.model.hf_export import HubMetadata
from adloco.model.llama import batch_loss, build_model, evaluate, evaluation_sample
from live_events import read_scalars

SETTINGS = {
    "max_tokens": 6 * 6 * 16 + 5 * 16,  # six full steps of 6 sequences of 16, then 5 sequences
    "batch_size": 6,
    "lr": 0.01,
    "min_lr_ratio": 0.1,
    "warmup_fraction": 0.2,
    "weight_decay": 0.1,
    "betas": [0.9, 0.95],
    "grad_clip_norm": 1.0,
    "eval_every_steps": 3,
    "checkpoint_every_steps": 2,
}


@pytest.fixture(scope="module")
def based(tmp_path_factory, tiny_data_config):
    """Tiny data with a base split."""
    out = tmp_path_factory.mktemp("based") / "tiny"
    tokenize_corpus(tiny_data_config(base_fraction=0.4), 0, out, progress=False)
    return TokenData.open(out)


@pytest.fixture()
def cfg(tiny_model_cfg):
    """The ``model`` section of a base experiment."""
    return dataclasses.replace(tiny_model_cfg, source="base")


def pretraining(model, data, folder) -> pretrain.Pretraining:
    """The base model's training of SETTINGS, seed 3, evaluated on 8 sequences in batches of 4."""
    settings = section("pretrain", copy.deepcopy(SETTINGS))
    return pretrain.Pretraining(settings, model, 3, data, folder, eval_sequences=8, eval_batch=4)


def test_the_loop_is_plain_adamw_on_the_base_split(based, cfg, tmp_path, one_thread):
    training = pretraining(cfg, based, tmp_path / "ckpt")
    drawn = []
    original = training.split.get
    training.split.get = lambda idx: drawn.append(original(idx)) or drawn[-1]
    history = training.run(progress=False)

    model = build_model(dataclasses.replace(cfg, source="config"), based.vocab_size, 16, 3)
    s = SETTINGS
    opt = torch.optim.AdamW(model.parameters(), lr=s["lr"], betas=s["betas"], weight_decay=0.1)
    seen = 0
    for batch in drawn:
        lr = pretrain.inner_lr(
            seen, s["max_tokens"], s["lr"], s["warmup_fraction"], s["min_lr_ratio"]
        )
        for group in opt.param_groups:
            group["lr"] = lr
        loss_sum, n = batch_loss(model, batch)
        (loss_sum / n).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        seen += batch.numel()
    assert [b.size(0) for b in drawn] == [6] * 6 + [5]
    assert training.tokens == seen == s["max_tokens"] and training.step == 7
    for p, q in zip(training.model.parameters(), model.parameters(), strict=True):
        assert torch.equal(p, q)
    # Evaluations at steps 3, 6 and the last, on the runs' validation sample.
    assert [r["step"] for r in history] == [3, 6, 7]
    sample = evaluation_sample(based.split("validation"), 8)
    assert history[-1]["val_perplexity"] == evaluate(model, sample, 4)["perplexity"]
    # The base split only: every drawn sequence is one of its sequences.
    base_rows = {
        tuple(r) for r in based.split("base").get(range(len(based.split("base")))).tolist()
    }
    assert all(tuple(row) in base_rows for b in drawn for row in b.tolist())


def test_one_line_and_one_curve_point_per_evaluation_equal_to_the_rows(
    based, cfg, tmp_path, one_thread, caplog
):
    training = pretraining(cfg, based, tmp_path / "ckpt")
    with caplog.at_level(logging.INFO):
        history = training.run(progress=True, live_dir=tmp_path / "live")  # stderr: no terminal
    lines = [r.getMessage() for r in caplog.records if r.name == "adloco.engine.progress"]
    total = SETTINGS["max_tokens"]
    pattern = r"base: step (\d+), tokens (\d+) of (\d+) \((\d+)%\), val ppl ([\d.]+), [\d.]+ s"
    assert [re.fullmatch(pattern, line).groups() for line in lines] == [
        (str(r["step"]), str(r["tokens"]), str(total), f"{100 * r['tokens'] / total:.0f}",
         f"{r['val_perplexity']:.2f}")
        for r in history
    ]  # fmt: skip
    assert len(history) == 3
    keys = {"val/perplexity": "val_perplexity", "val/loss": "val_loss", "train/loss": "train_loss",
            "train/lr": "lr"}  # fmt: skip
    assert read_scalars(tmp_path / "live") == {
        tag: [(r["tokens"], float(np.float32(r[key]))) for r in history]
        for tag, key in keys.items()
    }


def test_a_killed_pretraining_resumes_to_the_same_bits(based, cfg, tmp_path, one_thread):
    whole = pretraining(cfg, based, tmp_path / "whole")
    whole.run(progress=False)
    # Killed in step 5 (the last checkpoint is step 4's), then the same command again.
    first = pretraining(cfg, based, tmp_path / "cut")
    step = first.train_step

    def killed_in_step_5():
        if first.step == 4:
            raise KeyboardInterrupt
        return step()

    first.train_step = killed_in_step_5
    with pytest.raises(KeyboardInterrupt):
        first.run(progress=False)
    again = pretraining(cfg, based, tmp_path / "cut")
    assert again.resume() and again.step == 4
    again = pretraining(cfg, based, tmp_path / "cut")
    again.run(progress=False)
    assert again.history == whole.history
    for p, q in zip(again.model.parameters(), whole.model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_outputs_are_checksummed_and_a_run_starts_from_exactly_the_base(
    based, cfg, tmp_path, one_thread
):
    training = pretraining(cfg, based, tmp_path / "ckpt")
    training.run(progress=False)
    summary = pretrain.write_base(
        training, based, tmp_path / "base", 1.0, experiment="tiny", command="adloco pretrain",
        hub=HubMetadata(("tiny",), ("en",)),
    )  # fmt: skip
    assert summary["val_perplexity"] == training.history[-1]["val_perplexity"]
    assert summary["tokens"] == SETTINGS["max_tokens"] and summary["split"] == "base"
    # What made it, which the stages that start from it check (adloco.model.base.check_made_for).
    assert summary["seed"] == 3 and summary["settings"]["max_tokens"] == SETTINGS["max_tokens"]
    # The data it was pretrained on: the sha256 of the data's manifest.json.
    manifest = (based.folder / "manifest.json").read_bytes()
    assert summary[DATA_KEY] == hashlib.sha256(manifest).hexdigest()
    assert start_model(cfg, tmp_path / "base", data=based.folder).base_sha256
    rows = [json.loads(x) for x in (tmp_path / "base" / "metrics.jsonl").read_text().splitlines()]
    assert rows == training.history
    start = start_model(cfg, tmp_path / "base")
    assert start.model.source == "pretrained" and start.base_sha256 == summary["model_sha256"]
    loaded = build_model(start.model, based.vocab_size, 16, seed=123)  # the seed plays no part
    for (name, p), q in zip(loaded.named_parameters(), training.model.parameters(), strict=True):
        assert torch.equal(p, q), name
    direct = AutoModelForCausalLM.from_pretrained(tmp_path / "base" / "model")
    assert all(
        torch.equal(a, b) for a, b in zip(direct.parameters(), loaded.parameters(), strict=True)
    )
    # A changed file is refused, naming it.
    weights = tmp_path / "base" / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    with pytest.raises(ValueError, match="model.safetensors: changed since adloco pretrain"):
        start_model(cfg, tmp_path / "base")
    with pytest.raises(ConfigError, match="--base"):
        start_model(cfg, None)


def test_a_base_experiment_needs_a_base_split_and_a_pretrain_section():
    from pathlib import Path

    import yaml

    raw = yaml.safe_load((Path(__file__).parents[2] / "config" / "test.yaml").read_text())
    raw["model"]["source"] = "base"
    raw.pop("pretrain", None)
    raw["data"]["base_fraction"] = 0.3
    with pytest.raises(ConfigError, match="pretrain: required"):
        validate(copy.deepcopy(raw))
    raw["pretrain"] = {}
    raw["data"]["base_fraction"] = 0.0
    with pytest.raises(ConfigError, match="data.base_fraction: must be above 0"):
        validate(copy.deepcopy(raw))


@pytest.mark.reliability("checkpoints")
def test_pretrain_refuses_a_checkpoint_folder_holding_a_users_file(based, tmp_path, capsys):
    from pathlib import Path

    import yaml

    from adloco import cli

    raw = yaml.safe_load((Path(__file__).parents[2] / "config" / "test.yaml").read_text())
    raw["model"]["source"] = "base"
    raw["data"].update(base_fraction=0.4, seq_len_tokens=based.seq_len_tokens)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw))
    ckpt = tmp_path / "mywork" / "h"
    ckpt.mkdir(parents=True)
    (ckpt / "thesis.tex").write_text("x")
    args = ["pretrain", "--config", str(config), "--data", str(based.folder), "--out"]
    args += [str(tmp_path / "base"), "--checkpoints", str(ckpt), "--no-progress"]
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert f"--checkpoints {ckpt}: holds 1 file(s) adloco did not write (thesis.tex)" in err
    assert [p.name for p in ckpt.iterdir()] == ["thesis.tex"] and not (tmp_path / "base").exists()
