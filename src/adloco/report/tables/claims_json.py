"""claims.json: what the report found, as one JSON document for other programs.

The targets and how they were fixed, the references and the base model, the
roles, the runs' clock, the stated rules, each headline run's evaluation
spacing, the seeds, the gain shares and the workers map, the headline table,
each claim's verdict with every comparison (per-seed values, effect,
interval, exact test, the verdict under each alternative rule), the regime
sweeps in a sentence and as a map, claim 1's context and the mechanism
checks. ``adloco report`` adds ``scale`` when given another model size.
"""

from __future__ import annotations

from adloco.report.analysis.findings import Findings
from adloco.report.analysis.scale import model_parameters
from adloco.report.analysis.words import clock_words, regime_summary
from adloco.report.inputs import Inputs


def claims_document(inputs: Inputs, found: Findings) -> dict:
    """claims.json: targets, roles, clock, rules, headline, verdicts, regimes, mechanisms."""
    ladder, settings, base, references = (
        found.ladder,
        inputs.settings,
        inputs.base,
        inputs.references,
    )
    return {
        "target_perplexity": ladder.main,
        "targets": list(ladder.targets),
        "target_source": ladder.source,
        "target_note": ladder.note,
        "target_levels": {str(t): v for t, v in ladder.levels.items()},
        "untestable_targets": {str(t): why for t, why in ladder.untestable.items()},
        "unigram_rule": ladder.caveat or "applied",
        "reference_perplexity": references.levels or None,
        "reference_note": references.note or None,
        "base": {"val_perplexity": base.val_perplexity, "folder": str(base.folder)}
        if base
        else None,
        "model": {"parameters": model_parameters(inputs.config, references.corpus)},
        "roles": found.roles.as_dict(),
        "clock": {**found.clock, "not_testable_reason": found.clock_reason or None},
        "rules": {
            **settings.rules(),
            "test_level": settings.section.test_level,
            "confidence": settings.section.confidence,
            "max_eval_gap": float(settings.section.max_eval_gap),  # 1 may be read as an int
        },
        "eval_spacing": [s.as_dict() for s in found.spacing],
        "seeds": found.seeds,
        "gain_shares": found.gains.as_dict(),
        "workers_map": found.workers.as_dict(),
        "headline": found.headline.as_dict() if found.headline else None,
        "claims": [c.as_dict() for c in found.claims],
        "regimes": regime_summary(found, settings),
        "regime_map": found.regimes.as_dict(),
        # Claim 1's context as the first screen says it: the clock's device, tokens, the knee.
        "claim_1_context": clock_words(found) or None,
        "mechanisms": [c.as_dict() for c in found.checks],
    }
