"""The size of the configured model, computed from its configuration alone.

:func:`adloco.config.validate` refuses, before any job, a model whose
training state cannot fit a device's node slot; building it to find out would
hand the allocator (or calibration, after tokenization) a model of any size.
This module counts the parameters of :func:`adloco.model.llama.build_model`'s Llama
from the ``model`` section and the vocabulary, with the standard library only,
because the Snakemake workflow validates the configuration while it parses.
``tests/formats/test_model_size.py`` checks the count against the built model.
"""

from __future__ import annotations

from typing import Protocol

GIB = 1024**3
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Weights, gradients and AdamW's two moments, all live at an inner step (as
# calibration measures them); activations come on top and depend on the batch.
TRAINING_COPIES = 4


class ModelShape(Protocol):
    """What the count reads of the configuration's ``model`` section."""

    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    num_hidden_layers: int
    tie_word_embeddings: bool


def parameter_count(model: ModelShape, vocab_size: int) -> int:
    """Parameters of the Llama that ``model`` describes, over ``vocab_size`` tokens.

    Per layer: the query and output projections (hidden x hidden), key and
    value projections (hidden x key/value heads x head size), the gated MLP
    (3 x hidden x intermediate) and two RMS norms; then the final norm, the
    embedding and, unless tied, the LM head. No biases.
    """
    hidden = model.hidden_size
    head_dim = hidden // model.num_attention_heads
    kv = model.num_key_value_heads * head_dim
    layer = 2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * model.intermediate_size
    layer += 2 * hidden
    embeddings = vocab_size * hidden * (1 if model.tie_word_embeddings else 2)
    return model.num_hidden_layers * layer + hidden + embeddings


def training_state_bytes(parameters: int, dtype: str) -> int:
    """Bytes of weights, gradients and AdamW's moments of ``parameters`` at ``dtype``."""
    return parameters * DTYPE_BYTES[dtype] * TRAINING_COPIES
