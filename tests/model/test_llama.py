"""Loss, perplexity and the model factory against manual computations."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from adloco.model.llama import batch_loss, build_model, causal_lm_loss, evaluate, load_pretrained


def manual_next_token_loss(logits: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor | None):
    """Position t predicts token t+1, summed over valid pairs, with explicit loops."""
    total, count = 0.0, 0
    for b in range(ids.size(0)):
        for t in range(ids.size(1) - 1):
            if mask is not None and not (mask[b, t] and mask[b, t + 1]):
                continue
            log_probs = torch.log_softmax(logits[b, t].double(), dim=-1)
            total -= float(log_probs[ids[b, t + 1]])
            count += 1
    return total, count


def test_loss_shifts_labels_exactly_once():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 7, 11, generator=gen)
    ids = torch.randint(0, 11, (3, 7), generator=gen)
    loss_sum, n = causal_lm_loss(logits, ids)
    expected, count = manual_next_token_loss(logits, ids, None)
    assert int(n) == count == 3 * 6
    assert math.isclose(float(loss_sum), expected, rel_tol=1e-5)
    # A double shift (the reference code's bug) predicts t+2 and gives another number.
    double = F.cross_entropy(
        logits[:, :-2].reshape(-1, 11), ids[:, 2:].reshape(-1), reduction="sum"
    )
    assert not math.isclose(float(double), expected, rel_tol=1e-3)


def test_padding_is_masked():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 6, 9, generator=gen)
    ids = torch.randint(0, 9, (2, 6), generator=gen)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    loss_sum, n = causal_lm_loss(logits, ids, mask)
    expected, count = manual_next_token_loss(logits, ids, mask)
    assert int(n) == count == 3 + 5
    assert math.isclose(float(loss_sum), expected, rel_tol=1e-5)
    # Changing a padded token changes nothing.
    ids2 = ids.clone()
    ids2[0, 5] = (ids2[0, 5] + 1) % 9
    assert torch.equal(causal_lm_loss(logits, ids2, mask)[0], loss_sum)


def test_evaluate_perplexity_is_exp_of_mean_token_loss(tiny_model_cfg):
    model = build_model(tiny_model_cfg, 32, 8, seed=0)
    seqs = torch.randint(0, 32, (5, 8), generator=torch.Generator().manual_seed(2))
    result = evaluate(model, seqs, batch_size=2)
    with torch.no_grad():
        loss_sum, n = batch_loss(model, seqs)
    assert result["tokens"] == int(n) == 5 * 7  # n - 1 predicted tokens per sequence
    assert math.isclose(result["loss"], float(loss_sum) / 35, rel_tol=1e-5)
    assert math.isclose(result["perplexity"], math.exp(result["loss"]), rel_tol=1e-12)
    # Standard error of the mean over the 5 sequences, each its own mean token loss.
    with torch.no_grad():
        per_seq = torch.stack([batch_loss(model, seqs[i : i + 1])[0] / 7 for i in range(5)])
    assert math.isclose(result["loss_stderr"], float(per_seq.std() / math.sqrt(5)), rel_tol=1e-4)


def test_seeded_init_is_reproducible_and_seed_dependent(tiny_model_cfg):
    a = build_model(tiny_model_cfg, 32, 8, seed=3)
    b = build_model(tiny_model_cfg, 32, 8, seed=3)
    c = build_model(tiny_model_cfg, 32, 8, seed=4)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), c.parameters(), strict=True))
    # Building a model does not move the global RNG.
    torch.manual_seed(9)
    before = torch.rand(1)
    torch.manual_seed(9)
    build_model(tiny_model_cfg, 32, 8, seed=5)
    assert torch.equal(torch.rand(1), before)


def test_pretrained_source_loads_a_local_folder(tmp_path, tiny_model_cfg):
    model = build_model(tiny_model_cfg, 32, 8, seed=0)
    model.save_pretrained(tmp_path)
    pretrained = dataclasses.replace(tiny_model_cfg, source="pretrained", name=str(tmp_path))
    loaded = build_model(pretrained, 32, 8, seed=1)
    assert all(
        torch.equal(p, q) for p, q in zip(model.parameters(), loaded.parameters(), strict=True)
    )


@pytest.mark.reliability("model files")
def test_a_model_that_does_not_load_is_one_line_naming_the_folder(tmp_path, tiny_model_cfg):
    import json
    import os
    import pickle

    model = build_model(tiny_model_cfg, 32, 8, seed=0)
    # An edited config.json: the weights no longer fit it.
    edited = tmp_path / "edited"
    model.save_pretrained(edited)
    config = json.loads((edited / "config.json").read_text())
    config["hidden_size"] *= 2
    (edited / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError) as err:
        load_pretrained(str(edited), torch.float32)
    assert str(err.value).startswith(f"{edited}: the model does not load (RuntimeError: ")
    assert str(err.value).endswith("run adloco pretrain again") and "\n" not in str(err.value)

    # A pickle that would run code: torch's safe loader refuses it, and so do we, in one line.
    class Payload:
        def __reduce__(self):
            return (os.system, ("echo pwned > " + str(tmp_path / "ran"),))

    bad = tmp_path / "pickled"
    model.save_pretrained(bad)
    (bad / "model.safetensors").unlink()
    (bad / "pytorch_model.bin").write_bytes(pickle.dumps(Payload()))
    with pytest.raises(ValueError, match=r"pickled: the model does not load \(UnpicklingError"):
        load_pretrained(str(bad), torch.float32)
    assert not (tmp_path / "ran").exists()
