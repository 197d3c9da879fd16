"""The ``report`` section: which runs ``adloco report`` compares and the rules of its verdicts.

Each field is declared once with :func:`~adloco.config.fields.setting` (its
schema, default and description); :mod:`adloco.report.settings` reads the
typed section.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from adloco.config.fields import setting


@dataclasses.dataclass(frozen=True)
class TargetsConfig:
    """``report.targets``: the perplexity targets of the verdicts."""

    relative_to: str = setting(
        "base",
        (
            "base: levels are fractions of the base model's validation perplexity "
            "(results/<experiment>/base/base.json); absolute: levels are perplexities; "
            "derived: derived_levels levels read off the runs after the fact (for experiments"
            " without a base model; the page says the targets were not fixed before the runs)"
        ),
        type="string",
        enum=["base", "absolute", "derived"],
    )
    levels: tuple[float, ...] = setting(
        [0.95, 0.9, 0.85],
        (
            "the target levels: fractions in (0, 1) of the base perplexity (relative_to base)"
            " or perplexities (absolute)"
        ),
        type="array",
        items={"type": "number", "exclusiveMinimum": 0},
        minItems=1,
    )
    main: float | None = setting(
        None,
        (
            "the headline level, one of levels (a fraction or a perplexity as levels are); "
            "null: the hardest (lowest) level"
        ),
        type=["number", "null"],
        exclusiveMinimum=0,
    )
    derived_levels: int = setting(
        4,
        (
            "relative_to derived: levels of the derived ladder (the hardest is the highest "
            "best perplexity of any seed of derived_runs; the headline is the hardest)"
        ),
        type="integer",
        minimum=1,
    )
    derived_runs: tuple[str, ...] | None = setting(
        None,
        (
            "relative_to derived: runs every seed of which must reach every derived level; "
            "null: the AdLoCo run and the DiLoCo baseline"
        ),
        type=["array", "null"],
        items={"type": "string"},
    )


@dataclasses.dataclass(frozen=True)
class ReportConfig:
    """``report``: the runs' roles, the targets and the rules of the verdicts."""

    adloco: str | None = setting(
        None,
        (
            "the AdLoCo run the paper's claims are tested on; null: the run named adloco, "
            "else the first adloco run with batch test, merging and switch mode on"
        ),
        type=["string", "null"],
    )
    diloco: str | None = setting(
        None,
        (
            "the DiLoCo baseline of the claims; null: the run named diloco, else the first "
            "diloco run"
        ),
        type=["string", "null"],
    )
    paper_adloco: str | None = setting(
        None,
        (
            "an adloco run in the paper's own configuration (its initial trainers on the "
            "paper's nodes_per_gpu) when the AdLoCo run of the claims is tuned away from it: "
            "claim 1 is answered for it too, with the settings that tell them apart; null: "
            "none (the AdLoCo run is the paper's configuration)"
        ),
        type=["string", "null"],
    )
    ddp: str | None = setting(
        None,
        (
            "the synchronous data-parallel anchor (all-reduce every step): shown in the "
            "headline table and compared, not a baseline of the claims; null: the run named "
            "ddp, else the first ddp run"
        ),
        type=["string", "null"],
    )
    baselines: tuple[str, ...] | None = setting(
        None,
        (
            "other baselines (diloco or localsgd runs) compared too, alone and as the best "
            "baseline; null: every other diloco and localsgd run"
        ),
        type=["array", "null"],
        items={"type": "string"},
    )
    ablations: tuple[str, ...] | None = setting(
        None,
        (
            "adloco runs that each turn off one component; null: every other adloco run that "
            "turns off the batch test, merging or switch mode of the AdLoCo run (other adloco"
            " runs are shown as variants)"
        ),
        type=["array", "null"],
        items={"type": "string"},
    )
    targets: TargetsConfig = setting(
        {}, ("the validation perplexities at which runs are compared, fixed before the runs")
    )
    reached: str = setting(
        "stays",
        (
            "when a run reaches a target: stays: at the first evaluation from which every "
            "later evaluation is at or below it; first: at the first evaluation at or below "
            "it"
        ),
        type="string",
        enum=["stays", "first"],
    )
    between: str = setting(
        "model",
        (
            "how the tokens, communications, bytes and simulated time to a target are read: "
            "model: at a model that exists, so at the end of the round whose outer step "
            "reaches it for the methods with an outer step (their global model changes only "
            "there), interpolated for ddp (its model changes at every step); interpolated: "
            "linear in log-perplexity between the evaluation before the one that reaches it "
            "(above the target) and that one, for every method; round: the run's values at "
            "the end of the round that reaches it, for every method"
        ),
        type="string",
        enum=["model", "interpolated", "round"],
    )
    merged: str = setting(
        "at_merge",
        (
            "the run-level perplexity of a round with a merge: at_merge: the models that exist "
            "after it, the merged model's own evaluation in place of its parents' (so a merge "
            "is credited in its round, at its time, tokens and messages); next_evaluation: the "
            "parents' evaluations before the merge, the merged model counted from its next "
            "round"
        ),
        type="string",
        enum=["at_merge", "next_evaluation"],
    )
    communications: str = setting(
        "messages",
        (
            "what claim 2 counts as a communication: messages: network messages, the "
            "all-reduces of trainers on two or more node slots and the transfers of merged "
            "trainers' states (a trainer on one slot sends nothing); trainer_rounds: the "
            "paper's count, one per trainer per round (ddp: one per all-reduce)"
        ),
        type="string",
        enum=["messages", "trainer_rounds"],
    )
    pairing: str = setting(
        "seed",
        (
            "seed: compare runs seed by seed on the seeds both have (exact sign-flip test of "
            "the per-seed log ratios, median paired ratio); none: as independent samples "
            "(exact two-sample permutation test, ratio of medians)"
        ),
        type="string",
        enum=["seed", "none"],
    )
    paired_test: str = setting(
        "signed_rank",
        (
            "statistic of the exact sign-flip test over all 2^n sign patterns: signed_rank "
            "(Wilcoxon: signed ranks of the per-seed log ratios) or sign (the count of seeds "
            "on each side)"
        ),
        type="string",
        enum=["signed_rank", "sign"],
    )
    equal_time: str = setting(
        "fastest",
        (
            "simulated time at which the headline runs' perplexities are compared: fastest: "
            "when the first seed of the headline runs finishes (every run still holds the "
            "model it has then); slowest: when the last one finishes (with equal token "
            "budgets, every run's final model)"
        ),
        type="string",
        enum=["fastest", "slowest"],
    )
    test_level: float = setting(
        0.05,
        (
            "one-sided level of the exact test: supported when p <= test_level in AdLoCo's "
            "favour, not supported when p <= test_level against it"
        ),
        type="number",
        exclusiveMinimum=0,
        exclusiveMaximum=0.5,
    )
    smallest_effect: float = setting(
        0.1,
        (
            "smallest effect of interest m: a ratio of 1 + m or 1 / (1 + m) in time and in "
            "communications; within it the verdict is no meaningful difference when the "
            "equivalence test (two one-sided exact tests at test_level) shows it, and each "
            "comparison's power is that to detect a true ratio of 1 / (1 + m)"
        ),
        type="number",
        exclusiveMinimum=0,
        exclusiveMaximum=1,
    )
    power_goal: float = setting(
        0.8,
        (
            "the power a comparison a claim rests on should have at the smallest effect of "
            "interest; the page warns below it and gives the paired seeds that would reach it"
        ),
        type="number",
        exclusiveMinimum=0,
        exclusiveMaximum=1,
    )
    max_eval_gap: float = setting(
        0.05,
        (
            "largest gap between consecutive evaluations of a headline run whose model changes"
            " at every step (ddp), as a share of its tokens, before the page warns that its "
            "crossing of a target is known only within that gap (a run with an outer step is "
            "evaluated at every outer step, where its model changes)"
        ),
        type="number",
        exclusiveMinimum=0,
        maximum=1,
    )
    confidence: float = setting(
        0.95,
        (
            "nominal coverage of the order-statistic interval of the median paired ratio (its"
            " exact coverage is shown; with few seeds it is the range over seeds)"
        ),
        type="number",
        exclusiveMinimum=0.5,
        exclusiveMaximum=1,
    )
    tuning: str | None = setting(
        None,
        (
            "tuning record shown as a table (config/tuning.json, written by the tuning "
            "experiment's report); null: none"
        ),
        type=["string", "null"],
    )
    tuning_groups: Mapping[str, tuple[str, ...]] | None = setting(
        None,
        (
            "in the tuning experiment: run of the default config -> the runs of this config "
            "that try its settings (inner lr, outer lr, outer momentum); the report then "
            "writes tuning.json (per group the point tuning_metric chooses among the points "
            "within tuning_max_climb; a tie goes to the smaller lrs and momentum); null: none"
        ),
        type=["object", "null"],
        additionalProperties={"type": "array", "items": {"type": "string"}, "minItems": 1},
    )
    tuning_max_climb: float | None = setting(
        None,
        (
            "in the tuning experiment: a grid point whose highest evaluated perplexity "
            "(median over seeds) is above this times the base's is not chosen; null: no limit"
        ),
        type=["number", "null"],
        minimum=1,
    )
    tuning_metric: str = setting(
        "time_to_main",
        (
            "in the tuning experiment: how a grid point is chosen among those within "
            "tuning_max_climb: time_to_main: the lowest median simulated time to the main "
            "target (the claims' metric; the target is fixed first from the points final "
            "perplexity chooses; a point that never reaches it ranks after every point that "
            "does, then by final perplexity); final_perplexity: the lowest median final "
            "validation perplexity"
        ),
        type="string",
        enum=["time_to_main", "final_perplexity"],
    )
    bandwidths_gbit_s: tuple[float, ...] | None = setting(
        None,
        (
            "bandwidths of the regime sweep in Gbit/s (cluster.network.bandwidth_gbit_s is "
            "added); null: 10 Mbit/s to 100 Gbit/s, two per decade"
        ),
        type=["array", "null"],
        items={"type": "number", "exclusiveMinimum": 0},
        minItems=1,
    )
    saturation_batches: tuple[int, ...] | None = setting(
        None,
        (
            "saturation batches of the roofline swept against bandwidth (sequences per pass "
            "from which a device is compute-bound; 1: a clock linear in tokens); null: 1, 2, "
            "4, ... up to twice the largest pass the runs logged"
        ),
        type=["array", "null"],
        items={"type": "integer", "minimum": 1},
        minItems=1,
    )
