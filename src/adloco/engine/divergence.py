"""Which learning rate a diverged round most likely owes its failure to.

Part of ``adloco train``: when a trainer's round stays non-finite after every
retry (:meth:`adloco.engine.loop.RoundLoop.train`), the message names the key to
lower first. A trainer's round starts from θ, which the previous round's outer
step made. If that θ predicts the validation tokens no better than a uniform
guess over the vocabulary (its loss at least ln V, or not finite) while the
previous round's inner steps, from the θ before, trained at a loss below ln V,
the inner steps were sound and the outer step broke the model: the outer lr
comes first. Otherwise the inner steps themselves diverged (or the round is
the first, with no outer step behind it): the inner lr comes first.
"""

from __future__ import annotations

import math

# The failure of a round whose outer step itself overflowed (adloco.engine.loop).
OUTER_STEP_FAILURE = "parameters after the outer step"
# Losses within this relative distance of ln V count as a uniform guess: a
# model whose weights the outer step blew up predicts uniformly, up to rounding.
UNIFORM_TOLERANCE = 1e-6


def no_better_than_uniform(loss: float, vocab_size: int) -> bool:
    """A mean loss per token (nats) not finite, or at least that of a uniform guess."""
    uniform = math.log(vocab_size)
    return not math.isfinite(loss) or loss >= uniform * (1 - UNIFORM_TOLERANCE)


def outer_step_suspected(
    failure: str, start_loss: float | None, previous_train_loss: float | None, vocab_size: int
) -> bool:
    """Whether the outer lr, not the inner lr, is the likely cause of a diverged round.

    ``failure``: what turned non-finite; ``start_loss``: the validation loss of
    θ at the start of the round (None: not measured); ``previous_train_loss``:
    the trainer's mean inner loss in its previous round (None: none yet).
    """
    if failure == OUTER_STEP_FAILURE:
        return True
    if start_loss is None or previous_train_loss is None:
        return False
    return no_better_than_uniform(start_loss, vocab_size) and not no_better_than_uniform(
        previous_train_loss, vocab_size
    )


def advice(
    failure: str,
    start_loss: float | None,
    previous_train_loss: float | None,
    vocab_size: int,
    lr_keys: tuple[str, str],
) -> str:
    """What to do about a diverged round, the likely key first (``lr_keys``: inner, outer).

    When θ's loss points at the outer step, the message says so with the numbers.
    """
    inner_key, outer_key = lr_keys
    if not outer_step_suspected(failure, start_loss, previous_train_loss, vocab_size):
        return f"lower {inner_key} (or {outer_key}) or check the data"
    why = ""
    if failure != OUTER_STEP_FAILURE:
        why = (
            f"the last outer step left the model no better than a uniform guess (validation "
            f"loss {start_loss:.4g}, ln {vocab_size} = {math.log(vocab_size):.4g}) after "
            f"inner steps at loss {previous_train_loss:.4g}; "
        )
    return f"{why}lower {outer_key} (or {inner_key}) or check the data"
