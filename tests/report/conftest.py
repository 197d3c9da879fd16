"""Builders for the report tests: small result trees written from compact specs.

A run is given as rounds, each a list of trainer rows in shorthand
(``ppl``, ``req``, ``eff``, ``mode``, ``events``, ``trainer``, ``stats``,
``slot_work``, ``sync``, ``messages``);
cumulative fields (tokens_total, communications, messages_total, sim_time_s)
are filled the way the engine fills them (a row's network messages are its
``messages``, 1 unless given: a trainer that all-reduces over its slots), so
each test can state its expected numbers by hand. A run whose seeds differ from
the others' gets its own ``seeds``.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
import yaml
from results_folder import analysed

from adloco.model.base import DATA_KEY
from adloco.report.analysis.claims import evaluate_claims
from adloco.report.inputs.references import References

FIXTURES = Path(__file__).parent / "fixtures"
ENGINE_FIXTURE = FIXTURES / "engine"  # real engine runs, three seeds (make_engine_fixture.py)

BASE_CONFIG = {
    "data": {"dataset": "t", "source": "local"},
    "model": {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
    },
    "cluster": {
        "nodes_per_device": 2,
        "devices": [{"name": "cpu-t", "count": 2, "memory_gib": 0.5, "max_batch": 8}],
    },
    "train": {"max_rounds": 10, "inner_steps": 2},
}

FULL_ADLOCO = {
    "method": "adloco",
    "initial_trainers": 2,
    "batch_test": "norm",
    "merge": "smallest_batch",
}


def single(ppls: list[float | None], req: int = 8) -> list[list[dict]]:
    """One trainer per round with these perplexities."""
    return [[{"ppl": p, "req": req}] for p in ppls]


def pair(ppls_a: list[float | None], ppls_b: list[float | None]) -> list[list[dict]]:
    """Two trainers per round."""
    return [[{"ppl": a}, {"ppl": b}] for a, b in zip(ppls_a, ppls_b, strict=True)]


def make_rows(
    run: str,
    seed: int,
    method: str,
    rounds: list[list[dict]],
    sim_s_per_round: float = 1.0,
    tokens_per_row: int = 100,
) -> list[dict]:
    rows, tokens, comms, messages = [], 0, 0, 0
    for index, trainers in enumerate(rounds, start=1):
        tokens += tokens_per_row * len(trainers)
        for position, t in enumerate(trainers):
            comms += 1
            messages += t.get("messages", 1)
            req = t.get("req", 4)
            rows.append(
                {
                    "run": run,
                    "seed": seed,
                    "method": method,
                    "round": index,
                    "trainer": t.get("trainer", position),
                    "active_trainers": len(trainers),
                    "nodes": t.get("nodes", 1),
                    "requested_batch": req,
                    "effective_batch": t.get("eff", req),
                    "micro_batch": t.get("micro", min(req, 8)),
                    "accum_steps": 1,
                    "switch_mode": t.get("mode", "plain"),
                    "tokens": tokens_per_row,
                    "tokens_total": tokens,
                    "communications": comms,
                    "messages_total": messages,
                    "bytes": 10,
                    "bytes_total": 10 * comms,
                    "val_perplexity": t.get("ppl"),
                    "sim_time_s": sim_s_per_round * index,
                    "wall_time_s": 0.1 * index,
                    "stats": t.get("stats"),
                    "events": t.get("events", []),
                    # What the clock charged, for the regime sweeps (absent unless given).
                    **{k: t[k] for k in ("slot_work", "sync", "lr_scale", "local_batch") if k in t},
                }
            )
    return rows


class Workspace:
    """A results tree in a temporary folder: config, runs, calibration, variance."""

    FULL_ADLOCO = FULL_ADLOCO
    single = staticmethod(single)
    pair = staticmethod(pair)

    def __init__(self, root: Path):
        self.root = root
        self.runs_dir = root / "runs"
        self.settings: dict[str, dict] = {}
        self.seeds: set[int] = set()
        self.run_seeds: dict[str, list[int]] = {}

    def run(
        self,
        name: str,
        settings: dict,
        per_seed: dict[int, list[list[dict]]],
        sim_s_per_round: float | dict[int, float] = 1.0,
    ) -> None:
        self.settings[name] = settings
        self.run_seeds[name] = sorted(per_seed)
        for seed, rounds in per_seed.items():
            self.seeds.add(seed)
            sim = sim_s_per_round[seed] if isinstance(sim_s_per_round, dict) else sim_s_per_round
            rows = make_rows(name, seed, settings["method"], rounds, sim)
            folder = self.runs_dir / name / f"seed{seed}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            last = [r for r in rows if r["round"] == len(rounds)]
            ppls = [r["val_perplexity"] for r in rows if r["val_perplexity"] is not None]
            final = [r["val_perplexity"] for r in last if r["val_perplexity"] is not None]
            summary = {
                "run": name,
                "seed": seed,
                "method": settings["method"],
                "rounds": len(rounds),
                "final_val_perplexity": min(final) if final else None,
                "best_val_perplexity": min(ppls) if ppls else None,
                "tokens_total": last[-1]["tokens_total"],
                "communications": last[-1]["communications"],
                "bytes_total": last[-1]["bytes_total"],
                "sim_time_s": last[-1]["sim_time_s"],
                "wall_time_s": last[-1]["wall_time_s"],
                "final_trainers": len(last),
            }
            (folder / "summary.json").write_text(json.dumps(summary))

    def write(
        self,
        targets: list[float] | None = None,
        main: float | None = None,
        derived_levels: int | None = None,
        derived_runs: list[str] | None = None,
        targets_section: dict | None = None,
        cluster: dict | None = None,
        **report,
    ) -> Path:
        """The config: absolute ``targets`` (None: derived from the runs) and ``report`` keys.

        ``targets_section``: report.targets as written, instead of the above;
        ``cluster``: instead of the base config's.
        """
        if targets_section is not None:
            chosen = targets_section
        elif targets is None:
            chosen = {"relative_to": "derived"}
            if derived_levels is not None:
                chosen["derived_levels"] = derived_levels
            if derived_runs is not None:
                chosen["derived_runs"] = derived_runs
        else:
            chosen = {"relative_to": "absolute", "levels": targets, "main": main}
        seeds = sorted(self.seeds)
        runs = {
            name: {**s, "seeds": self.run_seeds[name]} if self.run_seeds[name] != seeds else s
            for name, s in self.settings.items()
        }
        config = {
            "experiment": "report-test",
            **BASE_CONFIG,
            **({"cluster": cluster} if cluster else {}),
            "seeds": seeds,
            "runs": runs,
            "report": {"targets": chosen, **report},
        }
        path = self.root / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        variance = self.root / "variance"
        variance.mkdir(exist_ok=True)
        (variance / "variance.json").write_text(json.dumps({"trace_cov": 10.0, "grad_sqnorm": 0.5}))
        (self.root / "calibration").mkdir(exist_ok=True)
        return path

    def load(self, targets: list[float] | None = None, references=None, base=None, **report):
        from adloco.config import load_config

        config = load_config(self.write(targets, **report))
        refs = references or References.unavailable("none in this test")
        return analysed(config, self.runs_dir, base, refs)

    def claims(
        self, targets: list[float] | None = None, clock_reason: str = "", references=None, **report
    ):
        runs, roles, ladder, settings = self.load(targets, references, **report)
        return {c.number: c for c in evaluate_claims(runs, roles, ladder, settings, clock_reason)}

    def two_seed_runs(self) -> None:
        """diloco, adloco and localsgd, two seeds each, with hand-checkable curves.

        diloco: best 60 (seed 0) and 70 (seed 1), first evaluations 100 and 110;
        adloco: best 50 and 65, first (run-level) 90 and 95; localsgd stalls at 95.
        """
        self.run("diloco", {"method": "diloco"},
                 {0: single([100, 80, 60]), 1: single([110, 90, 70])})  # fmt: skip
        self.run("adloco", FULL_ADLOCO,
                 {0: pair([90, 50], [95, 55]), 1: pair([95, 65], [99, 66])})  # fmt: skip
        self.run("localsgd", {"method": "localsgd"},
                 {0: single([120, 95]), 1: single([120, 96])})  # fmt: skip

    def manifest(self, **reference) -> Path:
        """A tokenized data folder whose manifest has ``reference_perplexity`` (none if empty)."""
        folder = self.root / "data"
        folder.mkdir(exist_ok=True)
        manifest = {"format_version": 1, "vocab_size": 512}
        if reference:
            manifest["reference_perplexity"] = {
                "split": "validation",
                "counts_from": ["train"],
                "predicted_tokens": 1000,
                "unigram_smoothing": "add-one",
                "bigram_smoothing": "interpolated with the unigram",
                **reference,
            }
        (folder / "manifest.json").write_text(json.dumps(manifest))
        return folder

    def base(self, val_perplexity: float, curve: list[dict] | None = None) -> Path:
        """A base model folder: base.json and, when given, its metrics.jsonl."""
        folder = self.root / "base"
        folder.mkdir(exist_ok=True)
        fields = {
            "val_perplexity": val_perplexity,
            "val_loss": math.log(val_perplexity),
            "val_loss_stderr": 0.01,
            "tokens": 100000,
            "steps": 500,
            "model_dir": "model",
            "model_sha256": {"model.safetensors": "0" * 64},
        }
        (folder / "base.json").write_text(json.dumps(fields))
        if curve is not None:
            (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in curve))
        return folder


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


@pytest.fixture(scope="session")
def engine_fixture() -> Path:
    """Real engine runs on tiny data, three seeds (tests/report/fixtures/engine)."""
    return ENGINE_FIXTURE


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The hand-made results tree of tests/report/fixtures."""
    return FIXTURES


@pytest.fixture
def drawn(monkeypatch):
    """The matplotlib figures the figure functions draw, kept open for the test to read back.

    Each figure module's ``to_png`` is replaced by one that keeps the figure
    and returns a marker, so a test reads the drawn data from the axes.
    """
    import matplotlib.pyplot as plt

    from adloco.report.figures import (
        headline_figure,
        noise_figures,
        regime_figures,
        run_figures,
    )

    kept = []

    def keep(fig):
        kept.append(fig)
        return b"drawn"

    for module in (run_figures, regime_figures, noise_figures, headline_figure):
        monkeypatch.setattr(module, "to_png", keep)
    yield kept
    for fig in kept:
        plt.close(fig)


def write_references_and_base(root: Path) -> tuple[Path, Path]:
    """A data folder whose manifest has reference perplexities, and a base model folder."""
    data, base = root / "data", root / "base"
    data.mkdir(parents=True)
    base.mkdir(parents=True)
    reference = {"split": "validation", "counts_from": ["train"], "predicted_tokens": 960,
                 "uniform": 256.0, "unigram": 120.0, "bigram": 55.0,
                 "unigram_smoothing": "add-one", "bigram_smoothing": "add-one"}  # fmt: skip
    (data / "manifest.json").write_text(json.dumps({"reference_perplexity": reference}))
    base_record = {"val_perplexity": 64.0, "val_loss": 4.16, "val_loss_stderr": 0.01,
                   "tokens": 9600, "steps": 40}  # fmt: skip
    # Pretrained on this data, as adloco pretrain records it.
    base_record[DATA_KEY] = hashlib.sha256((data / "manifest.json").read_bytes()).hexdigest()
    (base / "base.json").write_text(json.dumps(base_record))
    return data, base


@pytest.fixture(scope="session")
def references_and_base():
    """:func:`write_references_and_base`, for a test to write them where it wants."""
    return write_references_and_base


@pytest.fixture(scope="session")
def engine_report(tmp_path_factory):
    """The report's inputs, findings and page on the engine fixture, before anything is drawn.

    With reference perplexities and a base model (:func:`write_references_and_base`);
    the page's figures are left undrawn (None), so its sections say "Not drawn".
    """
    from results_folder import report_request

    from adloco.report import compute_findings, make_page, read_inputs

    data, base = write_references_and_base(tmp_path_factory.mktemp("engine-inputs"))
    f = ENGINE_FIXTURE
    # The report's folder is never written: the inputs are only read.
    inputs = read_inputs(report_request(f, f / "report", data=data, base=base))
    found = compute_findings(inputs)
    return inputs, found, make_page(inputs, found, {})
