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

from dataclasses import asdict, dataclass, field
from typing import Any

from adloco.config import ConfigError, RunSettings

# Settings whose change turns off one AdLoCo component: the ablations.
ABLATION_KEYS = ("batch_test", "merge", "switch")
OFF = {"batch_test": "none", "merge": "none"}  # switch is off when it is not "switch"

# The regime sweep's default: 10 Mbit/s to 100 Gbit/s, two points a decade.
DEFAULT_BANDWIDTHS_GBIT_S = tuple(10 ** (e / 2) for e in range(-4, 5))

# The stated rules, each with its alternative: the page shows the verdicts under both.
RULES = {
    "reached": ("stays", "first"),
    "pairing": ("seed", "none"),
    "paired_test": ("signed_rank", "sign"),
    "equal_time": ("fastest", "slowest"),
}


def other_choice(rule: str, value: str) -> str:
    """The alternative of a two-valued rule."""
    first, second = RULES[rule]
    return second if value == first else first


@dataclass(frozen=True)
class TargetSettings:
    """``report.targets``: how the target perplexities are fixed."""

    relative_to: str  # base, absolute or derived
    levels: tuple[float, ...]  # fractions of the base perplexity, or perplexities
    main: float | None  # one of levels; None: the hardest
    derived_levels: int
    derived_runs: tuple[str, ...] | None

    @classmethod
    def from_section(cls, section: dict | None) -> TargetSettings:
        section = section or {}
        relative_to = section.get("relative_to", "base")
        levels = tuple(float(v) for v in section.get("levels", (0.95, 0.9, 0.85)))
        main = section.get("main")
        main = float(main) if main is not None else None
        if relative_to == "base":
            outside = [v for v in levels + ((main,) if main is not None else ()) if v >= 1]
            if outside:
                raise ConfigError(
                    f"report.targets.levels: {outside[0]:g} is not a fraction below 1 of the base "
                    "model's perplexity (relative_to: base); use relative_to: absolute for "
                    "perplexities"
                )
        if relative_to != "derived" and main is not None and main not in levels:
            raise ConfigError(
                f"report.targets.main: {main:g} is not one of report.targets.levels "
                f"({', '.join(f'{v:g}' for v in levels)})"
            )
        runs = section.get("derived_runs")
        return cls(
            relative_to,
            tuple(sorted(set(levels), reverse=True)),
            main,
            int(section.get("derived_levels", 4)),
            tuple(runs) if runs else None,
        )


@dataclass(frozen=True)
class ReportSettings:
    """The ``report`` section of the configuration, defaults filled in."""

    targets: TargetSettings
    reached: str  # stays or first (adloco.report.summary.REACH_RULES)
    pairing: str  # seed or none
    paired_test: str  # signed_rank or sign
    equal_time: str  # fastest or slowest
    test_level: float
    confidence: float
    tuning: str | None
    tuning_groups: dict[str, tuple[str, ...]] | None
    bandwidths_gbit_s: tuple[float, ...]
    saturation_batches: tuple[int, ...] | None

    @classmethod
    def from_config(cls, config: dict) -> ReportSettings:
        section = config.get("report") or {}
        bandwidths = section.get("bandwidths_gbit_s")
        saturation = section.get("saturation_batches")
        groups = section.get("tuning_groups")
        return cls(
            targets=TargetSettings.from_section(section.get("targets")),
            reached=section.get("reached", "stays"),
            pairing=section.get("pairing", "seed"),
            paired_test=section.get("paired_test", "signed_rank"),
            equal_time=section.get("equal_time", "fastest"),
            test_level=float(section.get("test_level", 0.05)),
            confidence=float(section.get("confidence", 0.95)),
            tuning=section.get("tuning"),
            tuning_groups={k: tuple(v) for k, v in groups.items()} if groups else None,
            bandwidths_gbit_s=tuple(sorted(float(b) for b in bandwidths))
            if bandwidths
            else DEFAULT_BANDWIDTHS_GBIT_S,
            saturation_batches=tuple(sorted({int(s) for s in saturation})) if saturation else None,
        )

    def rules(self) -> dict[str, str]:
        """The stated rules as configured."""
        return {rule: getattr(self, rule) for rule in RULES}


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

    def all_baselines(self) -> list[str]:
        """DiLoCo first, then the other baselines."""
        return ([self.diloco] if self.diloco else []) + self.baselines

    def compared(self) -> list[str]:
        """The runs of the time and communication claims: AdLoCo and every baseline."""
        return ([self.adloco] if self.adloco else []) + self.all_baselines()

    def role_of(self, name: str) -> str:
        if name == self.adloco:
            return "AdLoCo (claims)"
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


def _label(settings: RunSettings, full: RunSettings) -> str:
    mine, theirs = asdict(settings), asdict(full)
    diffs = [f"{k}={mine[k]}" for k in sorted(mine) if k != "name" and mine[k] != theirs[k]]
    return ", ".join(diffs) if diffs else "same settings as the full run"


def assign_roles(config: dict, settings: dict[str, RunSettings]) -> Roles:
    """Roles from ``report.adloco``/``diloco``/``baselines``/``ablations``, else detected.

    ``settings`` maps every configured run to its resolved settings
    (:func:`adloco.config.resolve_run`). Detection, for a role left null:
    AdLoCo is the run named ``adloco``, else the first adloco run with a batch
    test, merging and switch mode all on, else the first adloco run; DiLoCo the
    run named ``diloco``, else the first diloco run; the data-parallel anchor
    the run named ``ddp``, else the first ddp run; the other baselines every
    other run of method diloco or localsgd; the ablations every other adloco
    run that turns off one of the components the AdLoCo run has on (batch
    test, merging, switch mode). Remaining adloco runs are variants. A run of
    any other method plays no role (it is shown, never compared).
    """
    section = config.get("report") or {}
    names = list(settings)
    by_method: dict[str, list[str]] = {}
    for name in names:
        by_method.setdefault(settings[name].method, []).append(name)
    sources: dict[str, str] = {}

    def check(key: str, value: str, methods: tuple[str, ...]) -> str:
        if value not in settings:
            raise ConfigError(f"report.{key}: no run named {value!r} (runs: {', '.join(names)})")
        if settings[value].method not in methods:
            raise ConfigError(
                f"report.{key}: run {value!r} is of method {settings[value].method}, "
                f"expected {' or '.join(methods)}"
            )
        return value

    adloco = section.get("adloco")
    if adloco is not None:
        check("adloco", adloco, ("adloco",))
        sources["adloco"] = "report.adloco"
    else:
        candidates = by_method.get("adloco", [])
        full = [n for n in candidates if _is_full(settings[n])]
        if "adloco" in candidates:
            adloco, sources["adloco"] = "adloco", "the run named adloco"
        elif full:
            adloco, sources["adloco"] = full[0], "first adloco run with every component on"
        elif candidates:
            adloco, sources["adloco"] = candidates[0], "first adloco run"

    def one_of(key: str, method: str) -> str | None:
        """``report.<key>``, else the run named ``method``, else the first run of it."""
        value = section.get(key)
        if value is not None:
            sources[key] = f"report.{key}"
            return check(key, value, (method,))
        candidates = by_method.get(method, [])
        if method in candidates:
            sources[key] = f"the run named {method}"
            return method
        if candidates:
            sources[key] = f"first {method} run"
            return candidates[0]
        return None

    diloco = one_of("diloco", "diloco")
    ddp = one_of("ddp", "ddp")

    baselines = section.get("baselines")
    if baselines is not None:
        baselines = [check("baselines", b, ("diloco", "localsgd")) for b in baselines]
        sources["baselines"] = "report.baselines"
    else:
        baselines = [
            n for n in names if settings[n].method in ("diloco", "localsgd") and n != diloco
        ]
        sources["baselines"] = "every other diloco or localsgd run"
    baselines = [b for b in baselines if b != diloco]

    ablations = section.get("ablations")
    labels = {}
    if ablations is not None:
        ablations = [check("ablations", a, ("adloco",)) for a in ablations]
        if adloco in ablations:
            raise ConfigError(f"report.ablations: {adloco!r} is the AdLoCo run of the claims")
        sources["ablations"] = "report.ablations"
    elif adloco is not None:
        ablations = [
            n
            for n in by_method.get("adloco", [])
            if n != adloco and _turned_off(settings[n], settings[adloco])
        ]
        sources["ablations"] = "adloco runs that turn off a batch test, merging or switch mode"
    else:
        ablations = []
    if adloco is not None:
        labels = {a: _label(settings[a], settings[adloco]) for a in ablations}
    variants = [n for n in by_method.get("adloco", []) if n != adloco and n not in ablations]
    return Roles(adloco, diloco, baselines, ablations, variants, labels, sources, ddp)
