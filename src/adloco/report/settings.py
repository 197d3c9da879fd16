"""What the report compares: roles of the runs and the settings of ``report:`` in the config.

``adloco report`` reads the ``report`` section (schema:
``src/adloco/schemas/config.schema.yaml``) once, here: which run the paper's
claims are about (``adloco``), the DiLoCo baseline (``diloco``), the
synchronous data-parallel anchor (``ddp``), the other baselines and the
ablations (listed, or detected from the runs' settings), the targets (fixed
before the runs), the stated rules the verdicts rest on (when a run reaches
a target, the pairing, the test, the equal-time rule), the tuning record and
the regime sweep. Every other module of the report takes a
:class:`ReportSettings` and a :class:`Roles`, so a role or a rule is decided
in one place and stated on the page.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from adloco.config import ConfigError, ReportConfig, RunSettings, TargetsConfig

# Settings whose change turns off one AdLoCo component: the ablations. Multi-instance
# training is off with one initial trainer; switch mode when it is not "switch".
ABLATION_KEYS = ("batch_test", "merge", "switch", "initial_trainers")
OFF = {"batch_test": "none", "merge": "none", "initial_trainers": 1}

# The regime sweep's default: 10 Mbit/s to 100 Gbit/s, two points a decade.
DEFAULT_BANDWIDTHS_GBIT_S = tuple(10 ** (e / 2) for e in range(-4, 5))

# The stated rules, each with its alternative: the page shows the verdicts under both.
RULES = {
    "reached": ("stays", "first"),
    "between": ("model", "interpolated"),
    "merged": ("at_merge", "next_evaluation"),
    "communications": ("messages", "trainer_rounds"),
    "pairing": ("seed", "none"),
    "paired_test": ("signed_rank", "sign"),
    "equal_time": ("fastest", "slowest"),
}


REACH_RULES = ("stays", "first")
BETWEEN_RULES = ("model", "interpolated", "round")
MERGED_RULES = ("at_merge", "next_evaluation")
COUNTED_RULES = ("messages", "trainer_rounds")


@dataclass(frozen=True)
class ReachRule:
    """When a run reaches a target (``report.reached``), how its quantities are read then
    (``report.between``), which models a merge round has (``report.merged``) and what
    counts as a communication (``report.communications``)."""

    reached: str = "stays"
    between: str = "model"
    merged: str = "at_merge"
    communications: str = "messages"

    def __post_init__(self) -> None:
        for name, allowed in (
            ("reached", REACH_RULES),
            ("between", BETWEEN_RULES),
            ("merged", MERGED_RULES),
            ("communications", COUNTED_RULES),
        ):
            if getattr(self, name) not in allowed:
                word = "reach" if name == "reached" else name
                raise ValueError(
                    f"{word} rule must be one of {allowed}, got {getattr(self, name)!r}"
                )

    @classmethod
    def of_section(cls, section: Any) -> ReachRule:
        """The rule a ``report`` section states (its reached, between, merged and
        communications keys)."""
        return cls(section.reached, section.between, section.merged, section.communications)

    @classmethod
    def of(cls, rule: ReachRule | str) -> ReachRule:
        """A rule, or a ``reached`` value alone (read under the default others)."""
        return rule if isinstance(rule, ReachRule) else cls(rule)


DEFAULT_RULE = ReachRule()


def other_choice(rule: str, value: str) -> str:
    """The alternative of a two-valued rule."""
    first, second = RULES[rule]
    return second if value == first else first


def _targets(targets: TargetsConfig) -> tuple[tuple[float, ...], float | None]:
    """``report.targets``' levels, distinct and hardest last, and its main level, as floats.

    Checked here, as the schema cannot: under ``relative_to: base`` a level is a
    fraction below 1, and a main level given is one of the levels.
    """
    levels = tuple(float(v) for v in targets.levels)
    main = float(targets.main) if targets.main is not None else None
    if targets.relative_to == "base":
        outside = [v for v in levels + ((main,) if main is not None else ()) if v >= 1]
        if outside:
            raise ConfigError(
                f"report.targets.levels: {outside[0]:g} is not a fraction below 1 of the base "
                "model's perplexity (relative_to: base); use relative_to: absolute for "
                "perplexities"
            )
    if targets.relative_to != "derived" and main is not None and main not in levels:
        raise ConfigError(
            f"report.targets.main: {main:g} is not one of report.targets.levels "
            f"({', '.join(f'{v:g}' for v in levels)})"
        )
    return tuple(sorted(set(levels), reverse=True)), main


@dataclass(frozen=True)
class ReportSettings:
    """The typed ``report`` section, and what the report reads off it once.

    Every setting is declared once, in :class:`adloco.config.ReportConfig`, and
    read from :attr:`section` (``settings.section.test_level``); this adds only
    what the report derives from it: the target levels in order, the sweep's
    bandwidths with their default, the saturation batches in order. A rule's
    alternative (:mod:`adloco.report.analysis.sensitivity`) is the same type
    with another section.
    """

    section: ReportConfig
    levels: tuple[float, ...]  # report.targets.levels, distinct, hardest (lowest) last
    main: float | None  # report.targets.main; None: the hardest level
    bandwidths_gbit_s: tuple[float, ...]  # ascending; default DEFAULT_BANDWIDTHS_GBIT_S
    saturation_batches: tuple[int, ...] | None  # distinct, ascending; None: from the runs

    @classmethod
    def from_section(cls, report: ReportConfig) -> ReportSettings:
        """From the typed ``report`` section (the schema filled its defaults)."""
        levels, main = _targets(report.targets)
        bandwidths = report.bandwidths_gbit_s
        saturation = report.saturation_batches
        return cls(
            section=report,
            levels=levels,
            main=main,
            bandwidths_gbit_s=tuple(sorted(float(b) for b in bandwidths))
            if bandwidths
            else DEFAULT_BANDWIDTHS_GBIT_S,
            saturation_batches=tuple(sorted({int(s) for s in saturation})) if saturation else None,
        )

    def with_rule(self, rule: str, value: str) -> ReportSettings:
        """The same settings with one stated rule (:data:`RULES`) set to ``value``."""
        return replace(self, section=replace(self.section, **{rule: value}))

    @property
    def reach_rule(self) -> ReachRule:
        """When a run reaches a target, its values then, a merge's models, what is counted."""
        return ReachRule.of_section(self.section)

    def rules(self) -> dict[str, str]:
        """The stated rules as configured."""
        return {rule: getattr(self.section, rule) for rule in RULES}


@dataclass
class Roles:
    """Which configured run plays which part in the comparisons, and why."""

    adloco: str | None
    diloco: str | None
    baselines: list[str]  # other baselines (DiLoCo variants, LocalSGD), not the DiLoCo one
    ablations: list[str]
    variants: list[str]  # other AdLoCo runs: shown, not part of the claims
    ablation_labels: dict[str, str] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # role -> "config" or how detected
    # The synchronous data-parallel anchor: the quality every DiLoCo-family method trades
    # for fewer communications. Compared and shown, but not a baseline AdLoCo must beat:
    # the paper's claims are about low-communication training.
    ddp: str | None = None
    # AdLoCo in the paper's configuration, when the AdLoCo run is tuned away from it:
    # claim 1 is answered for it too (report.paper_adloco).
    paper: str | None = None

    def all_baselines(self) -> list[str]:
        """DiLoCo first, then the other baselines."""
        return ([self.diloco] if self.diloco else []) + self.baselines

    def compared(self) -> list[str]:
        """The runs of the time and communication claims: AdLoCo and every baseline."""
        return ([self.adloco] if self.adloco else []) + self.all_baselines()

    def role_of(self, name: str) -> str:
        if name == self.adloco:
            return "AdLoCo (claims)"
        if name == self.paper:
            return "AdLoCo, the paper's configuration"
        if name == self.diloco:
            return "DiLoCo baseline"
        if name == self.ddp:
            return "data-parallel anchor"
        if name in self.baselines:
            return "baseline"
        if name in self.ablations:
            return f"ablation: {self.ablation_labels.get(name, '')}".rstrip(": ")
        if name in self.variants:
            return "AdLoCo variant"
        return ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "adloco": self.adloco,
            "diloco": self.diloco,
            "ddp": self.ddp,
            "paper_adloco": self.paper,
            "baselines": self.baselines,
            "ablations": self.ablations,
            "variants": self.variants,
            "ablation_labels": self.ablation_labels,
            "sources": self.sources,
        }


def _is_full(settings: RunSettings) -> bool:
    return (
        settings.batch_test != "none" and settings.merge != "none" and settings.switch == "switch"
    )


def _turned_off(settings: RunSettings, full: RunSettings) -> list[str]:
    """The AdLoCo components ``settings`` turns off relative to the full run ``full``."""
    out = []
    for key in ABLATION_KEYS:
        mine, theirs = getattr(settings, key), getattr(full, key)
        off = mine != "switch" if key == "switch" else mine == OFF[key]
        on = theirs == "switch" if key == "switch" else theirs != OFF[key]
        if off and on:
            out.append(key)
    return out


def changed_settings(settings: RunSettings, full: RunSettings) -> list[str]:
    """The settings of ``settings`` that differ from the full run's, sorted."""
    mine, theirs = asdict(settings), asdict(full)
    return [k for k in sorted(mine) if k != "name" and mine[k] != theirs[k]]


def ablation_problem(settings: RunSettings, full: RunSettings) -> str:
    """Why ``settings`` is not one ablation of ``full`` (empty: it turns off one component
    and changes nothing else), so that each ablation's verdict is one mechanism's."""
    changed, off = changed_settings(settings, full), _turned_off(settings, full)
    if len(off) != 1:
        return f"turns off {len(off)} components ({', '.join(off) or 'none'}), not one"
    extra = [k for k in changed if k != off[0]]
    if extra:
        return f"turns off {off[0]} and also changes {', '.join(extra)}"
    return ""


def _label(settings: RunSettings, full: RunSettings) -> str:
    mine = asdict(settings)
    diffs = [f"{k}={mine[k]}" for k in changed_settings(settings, full)]
    return ", ".join(diffs) if diffs else "same settings as the full run"


def _check(key: str, value: str, methods: tuple[str, ...], settings: dict[str, RunSettings]) -> str:
    """``report.<key>`` names a configured run of one of ``methods``."""
    if value not in settings:
        raise ConfigError(f"report.{key}: no run named {value!r} (runs: {', '.join(settings)})")
    if settings[value].method not in methods:
        raise ConfigError(
            f"report.{key}: run {value!r} is of method {settings[value].method}, "
            f"expected {' or '.join(methods)}"
        )
    return value


def _by_method(settings: dict[str, RunSettings]) -> dict[str, list[str]]:
    by_method: dict[str, list[str]] = {}
    for name, run in settings.items():
        by_method.setdefault(run.method, []).append(name)
    return by_method


def _adloco_role(
    report: ReportConfig, settings: dict[str, RunSettings], sources: dict[str, str]
) -> str | None:
    """``report.adloco``, else the run named adloco, else the first full one, else the first."""
    if report.adloco is not None:
        sources["adloco"] = "report.adloco"
        return _check("adloco", report.adloco, ("adloco",), settings)
    candidates = _by_method(settings).get("adloco", [])
    full = [n for n in candidates if _is_full(settings[n])]
    if "adloco" in candidates:
        sources["adloco"] = "the run named adloco"
        return "adloco"
    if full:
        sources["adloco"] = "first adloco run with every component on"
        return full[0]
    if candidates:
        sources["adloco"] = "first adloco run"
        return candidates[0]
    return None


def _one_of(
    key: str, value: str | None, settings: dict[str, RunSettings], sources: dict[str, str]
) -> str | None:
    """``report.<key>`` (``value``), else the run named ``key``, else the first run of it."""
    if value is not None:
        sources[key] = f"report.{key}"
        return _check(key, value, (key,), settings)
    candidates = _by_method(settings).get(key, [])
    if key in candidates:
        sources[key] = f"the run named {key}"
        return key
    if candidates:
        sources[key] = f"first {key} run"
        return candidates[0]
    return None


def _baselines(
    report: ReportConfig,
    settings: dict[str, RunSettings],
    diloco: str | None,
    sources: dict[str, str],
) -> list[str]:
    """``report.baselines``, else every diloco or localsgd run; never the DiLoCo one."""
    if report.baselines is not None:
        baselines = [
            _check("baselines", b, ("diloco", "localsgd"), settings) for b in report.baselines
        ]
        sources["baselines"] = "report.baselines"
    else:
        # A run on its own node slots splits the batch differently: the workers map's, not
        # a baseline (adloco.report.analysis.workers_map).
        baselines = [
            n
            for n, s in settings.items()
            if s.method in ("diloco", "localsgd") and n != diloco and s.nodes_per_device is None
        ]
        sources["baselines"] = "every other diloco or localsgd run on the cluster's node slots"
    return [b for b in baselines if b != diloco]


def _ablations(
    report: ReportConfig,
    settings: dict[str, RunSettings],
    adloco: str | None,
    sources: dict[str, str],
) -> list[str]:
    """``report.ablations``, else the adloco runs that turn off a component AdLoCo has on."""
    if report.ablations is not None:
        ablations = [_check("ablations", a, ("adloco",), settings) for a in report.ablations]
        if adloco in ablations:
            raise ConfigError(f"report.ablations: {adloco!r} is the AdLoCo run of the claims")
        sources["ablations"] = "report.ablations"
        return ablations
    if adloco is None:
        return []
    sources["ablations"] = "adloco runs that turn off a batch test, merging or switch mode"
    return [
        n
        for n in _by_method(settings).get("adloco", [])
        if n != adloco and _turned_off(settings[n], settings[adloco])
    ]


def assign_roles(report: ReportConfig, settings: dict[str, RunSettings]) -> Roles:
    """Roles from ``report.adloco``/``diloco``/``baselines``/``ablations``, else detected.

    ``report``: the typed ``report`` section; ``settings`` maps every
    configured run to its resolved settings (:meth:`adloco.config.Config.run`).
    Detection, for a role left null:
    AdLoCo is the run named ``adloco``, else the first adloco run with a batch
    test, merging and switch mode all on, else the first adloco run; DiLoCo the
    run named ``diloco``, else the first diloco run; the data-parallel anchor
    the run named ``ddp``, else the first ddp run; the other baselines every
    other run of method diloco or localsgd on the cluster's node slots (a run
    with its own ``nodes_per_device`` belongs to the workers map); the ablations every other adloco
    run that turns off one of the components the AdLoCo run has on (batch
    test, merging, switch mode). Remaining adloco runs are variants. A run of
    any other method plays no role (it is shown, never compared).
    """
    sources: dict[str, str] = {}
    adloco = _adloco_role(report, settings, sources)
    diloco = _one_of("diloco", report.diloco, settings, sources)
    ddp = _one_of("ddp", report.ddp, settings, sources)
    baselines = _baselines(report, settings, diloco, sources)
    paper = None
    if report.paper_adloco is not None:
        paper = _check("paper_adloco", report.paper_adloco, ("adloco",), settings)
        if paper == adloco:
            raise ConfigError(
                f"report.paper_adloco: {paper!r} is the AdLoCo run of the claims (leave it null)"
            )
        sources["paper_adloco"] = "report.paper_adloco"
    ablations = [a for a in _ablations(report, settings, adloco, sources) if a != paper]
    labels = (
        {a: _label(settings[a], settings[adloco]) for a in ablations} if adloco is not None else {}
    )
    adloco_runs = _by_method(settings).get("adloco", [])
    variants = [n for n in adloco_runs if n not in (adloco, paper) and n not in ablations]
    return Roles(adloco, diloco, baselines, ablations, variants, labels, sources, ddp, paper)
