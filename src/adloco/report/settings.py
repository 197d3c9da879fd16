"""What the report compares: roles of the runs and the settings of ``report:`` in the config.

``adloco report`` reads the ``report`` section (schema:
``src/adloco/schemas/config.schema.yaml``) once, here: which run the paper's
claims are about (``adloco``), the DiLoCo baseline (``diloco``), the other
baselines and the ablations (listed, or detected from the runs' settings),
the perplexity targets, the bandwidths of the regime sweep and the bootstrap.
Every other module of the report takes a :class:`ReportSettings` and a
:class:`Roles`, so a role is decided in one place and stated on the page.
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


@dataclass(frozen=True)
class ReportSettings:
    """The ``report`` section of the configuration, defaults filled in."""

    targets: tuple[float, ...] | None  # None: derive a ladder from the runs
    target_levels: int
    target_runs: tuple[str, ...] | None  # None: the AdLoCo run and the DiLoCo baseline
    main_target: float | None  # None: the lowest (hardest) target of the ladder
    bandwidths_gbit_s: tuple[float, ...]
    bootstrap_samples: int
    bootstrap_seed: int
    confidence: float

    @classmethod
    def from_config(cls, config: dict) -> ReportSettings:
        section = config.get("report") or {}
        targets = section.get("targets")
        legacy = section.get("target_perplexity")
        if legacy is not None:
            if targets is not None:
                raise ConfigError(
                    "report.target_perplexity: replaced by report.targets; set only report.targets"
                )
            # The old single target is a one-level ladder.
            targets = [legacy]
        bandwidths = section.get("bandwidths_gbit_s")
        return cls(
            targets=tuple(sorted({float(t) for t in targets}, reverse=True)) if targets else None,
            target_levels=int(section.get("target_levels", 4)),
            target_runs=tuple(section["target_runs"]) if section.get("target_runs") else None,
            main_target=(
                float(section["main_target"]) if section.get("main_target") is not None else None
            ),
            bandwidths_gbit_s=tuple(sorted(float(b) for b in bandwidths))
            if bandwidths
            else DEFAULT_BANDWIDTHS_GBIT_S,
            bootstrap_samples=int(section.get("bootstrap_samples", 2000)),
            bootstrap_seed=int(section.get("bootstrap_seed", 0)),
            confidence=float(section.get("confidence", 0.95)),
        )


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
    run named ``diloco``, else the first diloco run; the other baselines every
    other run of method diloco or localsgd; the ablations every other adloco
    run that turns off one of the components the AdLoCo run has on (batch
    test, merging, switch mode). Remaining adloco runs are variants.
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

    diloco = section.get("diloco")
    if diloco is not None:
        check("diloco", diloco, ("diloco",))
        sources["diloco"] = "report.diloco"
    else:
        candidates = by_method.get("diloco", [])
        if "diloco" in candidates:
            diloco, sources["diloco"] = "diloco", "the run named diloco"
        elif candidates:
            diloco, sources["diloco"] = candidates[0], "first diloco run"

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
    return Roles(adloco, diloco, baselines, ablations, variants, labels, sources)
