"""The batch test's step of a round: a trainer's next global batch from its statistics.

:func:`apply_test` runs after a trainer's round is trained
(:meth:`adloco.engine.loop.RoundLoop.run_round`): this round's estimate joins
the trainer's running one, the run's batch test
(:mod:`adloco.algo.batch_tests`) acts only on a trustworthy estimate
(:mod:`adloco.algo.trust`), and what it decided goes into the round's metrics
row (``res.test``).
"""

from __future__ import annotations

import math

from adloco.algo import batch_tests, trust
from adloco.config import RunSettings
from adloco.engine.trainers import TrainerRound


def apply_test(
    res: TrainerRound, batch_test: batch_tests.BatchTest, test_settings, settings: RunSettings
) -> None:
    """The trainer's next global batch from its running estimate, and the row's test fields.

    ``test_settings``: the batch test's own settings (``batch_test.settings_from``).
    """
    trainer = res.trainer
    if res.round_stats is None:
        return
    trainer.smoothed = trust.smooth(trainer.smoothed, res.estimate, settings.stats_decay)
    usable, abstain = trust.usable(trainer.smoothed, settings.stats_min_dof, trainer.global_batch)
    new_batch, requested = batch_tests.next_batch(
        batch_test.name,
        usable,
        trainer.global_batch,
        test_settings,
        max_growth=settings.max_batch_growth,
    )
    if batch_test.needs_reference:
        # The next round's reference direction: the pooled statistics
        # gradient, or (scalars) the pseudo-gradient every node already holds.
        source = (
            res.round_stats.pooled_sum()
            if settings.stats_reduce == "vector"
            else res.pseudo_gradient
        )
        trainer.direction = [g.detach().clone() for g in source]
    if new_batch != trainer.global_batch:
        trainer.events.append(
            {"type": "batch_change", "from": trainer.global_batch, "to": new_batch}
        )
    res.test = {"groups": res.round_stats.groups, "samples": 0, "dof": 0}
    if res.estimate is not None:
        res.test.update(res.estimate.as_dict())
        res.test["noise_scale"] = trust.noise_scale(
            res.estimate.trace_cov, res.estimate.grad_sqnorm
        )
    res.test["smoothed"] = None if trainer.smoothed is None else trainer.smoothed.as_dict()
    res.test["requested_global"] = requested
    res.test["decision"] = decision(abstain, trainer.global_batch, new_batch, requested)
    trainer.global_batch = new_batch


def decision(abstain: str, old: int, new: int, requested: float | None) -> str:
    """Why the batch test changed the batch or not, for the metrics row."""
    if abstain:
        return f"kept: {abstain}"
    if requested is None:
        return "kept: the test could not say"
    if new > old:
        return "raised" if new >= math.ceil(requested) else "raised to the growth cap"
    return "kept: the test asks for no more"
