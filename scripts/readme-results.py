"""Write the README's "What the default run shows" block from a report's files.

    python scripts/readme-results.py results/default/report [--readme README.md] [--check]

Reads ``claims.json`` and ``summary.csv`` of the report folder and replaces
the block between the README's two markers (``<!-- results:begin -->`` and
``<!-- results:end -->``) with: the base and the reference perplexities, one
row per run (median over seeds, min – max) of the final perplexity, its ratio
to the base, communications, simulated time and optimizer steps, the targets,
each claim's verdict (supported, not supported, no meaningful difference,
inconclusive, not testable) with the report's own reason, the rules a headline
verdict turns on, and the claim's power warnings (a comparison it rests on
whose test cannot reach the level or lacks power at the smallest effect), and
the numerics mode the runs beside the report (``<report>/../runs``) computed
in (docs/numerics.md), with what a reader on another CPU gets. So the README
cannot drift from the report it quotes.
``--check`` writes nothing and exits 1 when the block differs from what the
report gives (the README then quotes another run). A report it cannot read (no
``claims.json`` or ``summary.csv``, a file that is not JSON, a key or a column
missing, a value of another type) is one line naming the file and saying to
write the report again, not a traceback.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

from adloco.core import numerics
from adloco.core.io import read_json_object

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_blocks import write_or_check  # noqa: E402

PROGRAM = "readme-results"

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
COLUMNS = (
    ("final_val_perplexity", "final val. perplexity", "{:.1f}"),
    ("messages_total", "network messages", "{:g}"),
    ("communications", "trainer rounds", "{:g}"),
    ("sim_time_s", "simulated time (s)", "{:.1f}"),
    ("optimizer_steps", "optimizer steps", "{:g}"),
)


def _number(text: str) -> float | None:
    return float(text) if text not in ("", None) else None


def write_again(report: Path) -> str:
    """What to do about a report folder this script cannot read."""
    return f"write the report again (adloco report --out {report})"


def per_run(summary_csv: Path) -> dict[str, dict]:
    """Run -> its method, seeds and, per column, the values over seeds (in file order)."""
    runs: dict[str, dict] = {}
    fix = write_again(summary_csv.parent)
    if not summary_csv.is_file():
        raise FileNotFoundError(f"{summary_csv}: not found; {fix}")
    with open(summary_csv, newline="") as fh:
        reader = csv.DictReader(fh)
        needed = ["run", "seed", "method", *(key for key, _, _ in COLUMNS)]
        missing = [key for key in needed if key not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{summary_csv}: no column {missing[0]!r}; {fix}")
        for line, row in enumerate(reader, start=2):
            run = runs.setdefault(row["run"], {"method": row["method"], "seeds": []})
            try:
                run["seeds"].append(int(row["seed"]))
                for key, _, _ in COLUMNS:
                    value = _number(row[key])
                    if value is not None:
                        run.setdefault(key, []).append(value)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{summary_csv}: line {line}: {exc}; {fix}") from None
    return runs


def spread(values: list[float], form: str) -> str:
    """Median, with (min–max) when the seeds differ."""
    mid = form.format(statistics.median(values))
    low, high = form.format(min(values)), form.format(max(values))
    return mid if low == high else f"{mid} ({low}–{high})"


def runs_table(
    runs: dict[str, dict], base: float | None, shares: dict[str, float], climbs: dict[str, float]
) -> list[str]:
    header = ["run", "method", "seeds", COLUMNS[0][1], "× base", "highest × base",
              "share of ddp's gain"]  # fmt: skip
    header += [c[1] for c in COLUMNS[1:]]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for name, run in runs.items():
        final = run.get("final_val_perplexity", [])
        ratio = f"{statistics.median(final) / base:.3f}" if final and base else ""
        cells = [name, run["method"], str(len(run["seeds"]))]
        cells.append(spread(final, COLUMNS[0][2]) if final else "")
        cells.append(ratio)
        cells.append(f"{climbs[name]:.3f}" if name in climbs else "")
        cells.append(f"{shares[name]:.0%}" if name in shares else "")
        for key, _, form in COLUMNS[1:]:
            cells.append(spread(run[key], form) if run.get(key) else "")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _level(doc: dict, target: float) -> str:
    level = doc.get("target_levels", {}).get(str(target))
    return f"{level:g} × base ({target:.1f})" if level is not None else f"{target:.4g}"


def rule_changes(claim: dict) -> list[str]:
    """The rules whose other choice changes a headline verdict of the claim."""
    out = []
    for c in claim["comparisons"]:
        if not c["headline"]:
            continue
        for rule, alt in c["under_alternative_rules"].items():
            if alt["verdict"] != c["verdict"]:
                out.append(
                    f"{rule}: {alt['value']} makes it {alt['verdict']} against {c['against']}"
                )
    return out


def block(report: Path) -> str:
    """The README's block from the report folder ``report``; one-line errors naming its file."""
    path = report / "claims.json"
    fix = write_again(report)
    doc = read_json_object(path, f"{path}: not found; {fix}", fix=fix)
    runs = per_run(report / "summary.csv")
    try:
        return _block(report, doc, runs)
    except KeyError as exc:
        raise ValueError(f"{path}: no key {exc.args[0]!r}, which the block quotes; {fix}") from None
    except (TypeError, AttributeError, ValueError) as exc:
        raise ValueError(
            f"{path}: a value of another type than adloco report writes ({exc}); {fix}"
        ) from None


def _block(report: Path, doc: dict, runs: dict[str, dict]) -> str:
    base = (doc.get("base") or {}).get("val_perplexity")
    gains = doc.get("gain_shares") or {}
    refs = doc.get("reference_perplexity") or {}
    lines = [
        BEGIN,
        f"<!-- written by `python scripts/readme-results.py {report}`; do not edit by hand -->",
        "",
    ]
    lines += in_short(doc)
    facts = []
    if base is not None:
        facts.append(f"The base's validation perplexity is {base:.1f}")
    if refs:
        known = {k: v for k, v in refs.items() if isinstance(v, (int, float))}
        words = ", ".join(f"{k} {v:.0f}" for k, v in sorted(known.items(), key=lambda kv: -kv[1]))
        facts.append(f"the validation split's reference perplexities: {words}")
    if facts:
        lines += ["; ".join(facts) + ".", ""]
    lines += [
        "Medians over seeds (min–max), from `summary.csv`:",
        "",
        *runs_table(runs, base, gains.get("shares") or {}, gains.get("climbs") or {}),
        "",
        "Highest × base: the run's highest evaluated perplexity over the base's (median over "
        "seeds; near 1: it continues the base without climbing above it first). Share of ddp's "
        "gain: the run's log-perplexity gain over the base as a share of the ddp anchor's, at "
        "the same tokens (median final perplexities).",
        "",
    ]
    lines += workers_lines(doc.get("workers_map") or {})
    targets = doc.get("targets") or []
    main = doc.get("target_perplexity")
    if targets and main is not None:
        rules = doc.get("rules", {})
        lines += [
            f"Targets ({doc.get('target_source')}): "
            + ", ".join(_level(doc, t) for t in targets)
            + f"; the main one {_level(doc, main)}. A run reaches a target when it "
            + ("stays at or below it" if rules.get("reached") == "stays" else "first gets to it")
            + {
                "interpolated": "; its time and communications there are interpolated in "
                "log-perplexity between the evaluations either side of it.",
                "model": "; its time and communications are those of the first model that "
                "does: at the end of that round for a method with an outer step (its model "
                "changes only there), interpolated between evaluations for ddp.",
            }.get(
                rules.get("between"),
                "; its time and communications are those at the end of that round.",
            )  # fmt: skip
            + (
                " A merge is credited in its round, by the merged model's own evaluation."
                if rules.get("merged") == "at_merge"
                else ""
            )
            + (
                " Communications are network messages (all-reduces over two or more slots "
                "and merge transfers; a trainer on one slot sends nothing)."
                if rules.get("communications") == "messages"
                else ""
            ),
            "",
            "The verdicts, as `claims.json` gives them:",
            "",
        ]
    for claim in doc.get("claims", []):
        lines.append(
            f"{claim['number']}. {claim['statement'].rstrip('.')} — **{claim['verdict']}**: "
            f"{claim['reason']}"
        )
        changes = rule_changes(claim)
        if changes:
            lines.append(f"   Under another rule: {'; '.join(changes)}.")
        for warning in claim.get("warnings") or []:
            lines.append(f"   Power: {warning}")
    lines += [
        "",
        numerics_sentence(runs_numerics(report.parent / "runs"))
        + " The regime map's clock measured on this machine differs. A fresh clone's own "
        "report, `results/default/report/index.html`, is the reference.",
        END,
    ]
    return "\n".join(lines) + "\n"


def runs_numerics(runs_folder: Path) -> set[tuple[str, str | None]]:
    """(mode, MKL branch) of every run's ``summary.json`` in ``runs_folder`` (pinned: portable)."""
    found = set()
    for path in sorted(runs_folder.glob("*/*/summary.json")):
        try:
            record = read_json_object(path, f"{path}: not found").get("numerics") or {}
        except (OSError, ValueError):
            continue
        mode = str(record.get("mode") or "unknown")
        found.add((numerics.ALIASES.get(mode, mode), record.get("mkl_branch")))
    return found


def numerics_sentence(found: set[tuple[str, str | None]]) -> str:
    """Which numerics mode computed the runs, and what a fresh clone on another CPU gets."""
    modes = {mode for mode, _ in found}
    portable = (
        "`ADLOCO_NUMERICS=portable` computes floats that are the same on every x86-64 CPU with AVX2"
    )
    if modes == {numerics.PORTABLE}:
        return (
            "These numbers were computed in the `portable` numerics mode (docs/numerics.md): "
            "a fresh clone on any x86-64 CPU with AVX2 gives them to the bit with "
            "`ADLOCO_NUMERICS=portable` (tests/test_fingerprint.py checks a committed "
            "fingerprint); `make run` in the default `fast` mode is meant to give the same "
            "verdicts, with other last digits."
        )
    branches = {branch for _, branch in found}
    if modes == {numerics.FAST} and len(branches) == 1:
        return (
            f"These numbers were computed in the default `fast` numerics mode on MKL branch "
            f"`{branches.pop()}` (docs/numerics.md): a fresh clone gives them to the bit on "
            "a CPU of that branch (tests/test_fingerprint.py names the machine's); on another "
            f"CPU the verdicts are meant to be the same and the last digits differ. {portable}."
        )
    named = ", ".join(sorted(f"{m} ({b})" if b else m for m, b in found)) or "none recorded"
    return (
        f"The runs' numerics modes (docs/numerics.md): {named}; the last digits are those of "
        f"the machines that ran them, the verdicts are meant to be the same elsewhere. "
        f"{portable}."
    )


def in_short(doc: dict) -> list[str]:
    """The answer, its power and its device, a sentence each (none without claims)."""
    claims = doc.get("claims") or []
    if not claims:
        return []
    names = {1: "in time", 2: "in network messages", 3: "the ablations"}
    answer = ", ".join(
        f"claim {c['number']} ({names.get(c['number'], '')}) **{c['verdict']}**" for c in claims
    )
    lines = [f"- The answer: {answer}."]
    head = next((k for k in claims[0].get("comparisons") or [] if k.get("headline")), {})
    power = head.get("power") or {}
    if power.get("superiority") is not None:

        def below(k: dict) -> bool:
            pw = k.get("power") or {}
            return pw.get("superiority") is not None and pw["superiority"] < pw["goal"]

        def beside(c: dict, k: dict) -> bool:
            """Another baseline at the claim's headline target and quantity (context)."""
            top = next((x for x in c.get("comparisons") or [] if x.get("headline")), {})
            where = ("target_perplexity", "quantity")
            same = all(k.get(w) == top.get(w) for w in where)
            return same and not k.get("claim_rests_on") and k.get("against") != "ddp anchor"

        compared = [(c, k) for c in claims for k in c.get("comparisons") or []]
        short = sum(1 for _, k in compared if k.get("claim_rests_on") and below(k))
        context = sum(1 for c, k in compared if beside(c, k) and below(k))
        lines.append(
            f"- Its power: at {power['pairs']} paired seeds, claim 1's test against "
            f"{head.get('against')} detects a true ratio of 1/{1 + power['smallest_effect']:g} "
            f"(the smallest effect of interest, {power['smallest_effect']:.0%}) with "
            f"{power['superiority']:.0%} power and shows no meaningful difference at a ratio "
            f"of 1 with {power['equivalence']:.0%} (per-seed log-ratio SD "
            f"{power['sd_log_ratio']:.2g}); "
            + (
                f"{short} comparison(s) a claim rests on fall short of the "
                f"{power['goal']:.0%} goal (the warnings below)"
                if short
                else f"every comparison a claim rests on reaches the {power['goal']:.0%} goal"
            )
            + (
                f"; {context} comparison(s) with other baselines, context beside the verdicts, "
                "are below it too."
                if context
                else "."
            )
        )
    context = doc.get("claim_1_context")
    if context:
        lines.append(f"- The device: {context}")
    return ["In short:", "", *lines, ""]


def workers_lines(found: dict) -> list[str]:
    """The workers map in one sentence (report section "Workers"); none without a map."""
    points = [p for p in found.get("points") or [] if p.get("share") is not None]
    if len(points) < 2:
        return []
    splits = ", ".join(
        f"{p['workers']} × {p['local_batch']} {p['share']:.0%}"
        for p in sorted(points, key=lambda p: p["workers"])
    )
    words = (
        f"Where DiLoCo keeps ddp's gain (the report's workers map): ddp's global batch of "
        f"{found['global_batch']} split as workers × local batch keeps {splits}"
    )
    if found.get("effective_lr") is not None:
        words += f", all at an effective peak inner lr of {found['effective_lr']:g}"

    if found.get("b_simple"):
        words += f"; the base's noise scale B_simple is {found['b_simple']:.0f} sequences"
    batches = found.get("adloco_batches")
    if batches:
        words += (
            f"; AdLoCo's local batches run {batches['min']:g}–{batches['max']:g} "
            f"(median {batches['median']:g})"
        )
    return [words + ".", ""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report", type=Path, help="a report folder (claims.json, summary.csv)")
    ap.add_argument("--readme", type=Path, default=Path("README.md"))
    ap.add_argument("--check", action="store_true", help="exit 1 when the README differs")
    args = ap.parse_args(argv)
    try:
        text = block(args.report)
        return write_or_check(args.readme, text, BEGIN, END, args.report, args.check)
    except (OSError, ValueError) as exc:
        print(f"{PROGRAM}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
