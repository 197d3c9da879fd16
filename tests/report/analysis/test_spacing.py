"""Evaluation spacing of the headline runs (analysis/spacing.py), from rows counted by hand."""

from __future__ import annotations

from layout import body_rows
from results_folder import report_request

from adloco.report import claims_document, compute_findings, make_page, read_inputs
from adloco.report.analysis.spacing import eval_spacing, seed_spacing
from adloco.report.inputs.results import RunSeed
from adloco.report.page.evidence import rules_section
from adloco.report.page.verdicts import answer_section


def rows_at(tokens: list[int], evaluated: list[bool], trainers: int = 1) -> list[dict]:
    """One round per entry of ``tokens`` (tokens_total at its end), ``trainers`` rows each."""
    out = []
    for k, (t, ev) in enumerate(zip(tokens, evaluated, strict=True), start=1):
        for trainer in range(trainers):
            ppl = 100.0 - k - trainer if ev else None
            # A trainer's row carries the round's tokens so far; the last row the whole round's.
            so_far = t - (trainers - 1 - trainer) * 10
            row = {"round": k, "trainer": trainer, "tokens_total": so_far}
            out.append({**row, "val_perplexity": ppl})
    return out


def test_three_evaluations_at_36_72_and_100_percent_are_36_percent_apart():
    s = seed_spacing(rows_at([108_000, 216_000, 300_000], [True] * 3))
    # Gaps from 0: 108,000, 108,000, 84,000; the largest over the 300,000 tokens trained.
    assert (s.evaluations, s.largest_gap_tokens, s.tokens_total) == (3, 108_000, 300_000)
    assert s.largest_gap_share == 108_000 / 300_000 == 0.36
    assert s.every_round


def test_a_round_without_an_evaluation_widens_the_gap_and_is_said():
    # Rounds end at 10, 20, 30, 40 tokens; round 2 is not evaluated: gaps 10, 20, 10.
    s = seed_spacing(rows_at([10, 20, 30, 40], [True, False, True, True]))
    assert (s.evaluations, s.largest_gap_tokens, s.largest_gap_share) == (3, 20, 0.5)
    assert not s.every_round


def test_a_round_of_several_trainers_is_read_at_its_largest_tokens_total():
    # Two trainers: rows at 90 and 100, then 190 and 200; the round ends at 100 and 200.
    s = seed_spacing(rows_at([100, 200], [True, True], trainers=2))
    assert (s.largest_gap_tokens, s.tokens_total, s.largest_gap_share) == (100, 200, 0.5)


def run_seed(name: str, method: str, seed: int, tokens: list[int]) -> RunSeed:
    rows = [{**r, "run": name, "seed": seed} for r in rows_at(tokens, [True] * len(tokens))]
    return RunSeed(name, seed, method, rows, {}, None, None)


def evenly(rounds: int, per_round: int = 100) -> list[int]:
    return [per_round * k for k in range(1, rounds + 1)]


def test_the_widest_seed_and_the_warning_only_for_a_stepwise_run_above_the_limit():
    runs = [
        run_seed("ddp", "ddp", 0, evenly(20)),  # 100 of 2,000 tokens: 5 % exactly
        run_seed("ddp", "ddp", 1, evenly(19)),  # 100 of 1,900: 5.26 %
        run_seed("diloco", "diloco", 0, evenly(3)),  # 33 %, but an outer step per round
    ]
    ddp, diloco = eval_spacing(runs, ["ddp", "diloco", "absent"], 0.05)
    assert (ddp.widest.seed, ddp.seeds, ddp.outer_step_only) == (1, 2, False)
    assert ddp.widest.largest_gap_share == 100 / 1900
    assert ddp.warning.startswith("ddp (ddp) is evaluated up to 5.3% of its tokens apart (100 of")
    assert "above report.max_eval_gap 5.0%" in ddp.warning
    assert diloco.outer_step_only and diloco.every_outer_step and diloco.warning == ""
    assert diloco.rule.startswith("exact under between: round")
    # At the limit itself no warning: 5 % is not above 5 %.
    (at_limit,) = eval_spacing(runs[:1], ["ddp"], 0.05)
    assert at_limit.widest.largest_gap_share == 0.05 and at_limit.warning == ""
    # A looser limit silences the 5.26 % seed.
    (loose,) = eval_spacing(runs, ["ddp"], 0.06)
    assert loose.warning == ""
    assert loose.as_dict()["warning"] is None
    assert ddp.as_dict()["warning"] == ddp.warning


def report_of(workspace, **report):
    workspace.run("diloco", {"method": "diloco"}, {0: workspace.single([100, 80, 60])})
    workspace.run("adloco", workspace.FULL_ADLOCO, {0: workspace.pair([90, 50], [95, 55])})
    ppls = [100.0 - 2 * k for k in range(19)]  # 19 rounds of 100 tokens: 5.26 % apart
    workspace.run("ddp", {"method": "ddp"}, {0: workspace.single(ppls)})
    ws = workspace
    config = ws.write([70], **report)
    # The report's folder is never written: the inputs are only read.
    inputs = read_inputs(report_request(ws.root, ws.root / "report", config=config))
    found = compute_findings(inputs)
    page = make_page(inputs, found, {})
    return found, page, claims_document(inputs, found)


def test_claims_json_and_the_page_state_each_headline_runs_spacing(workspace):
    found, page, doc = report_of(workspace)
    assert doc["rules"]["max_eval_gap"] == 0.05
    spacing = {s["run"]: s for s in doc["eval_spacing"]}
    assert list(spacing) == ["adloco", "diloco", "ddp"]
    # conftest's rows: 100 tokens a trainer row; adloco's two trainers make a round 200.
    assert spacing["adloco"]["largest_gap_share"] == 200 / 400
    assert spacing["diloco"]["largest_gap_share"] == 100 / 300
    assert spacing["diloco"]["evaluations"] == 3
    assert spacing["diloco"]["model_changes_only_at_outer_step"] is True
    assert spacing["diloco"]["every_outer_step_evaluated"] is True
    assert spacing["ddp"]["model_changes_only_at_outer_step"] is False
    assert spacing["ddp"]["largest_gap_tokens"] == 100 and spacing["ddp"]["tokens_total"] == 1900
    warning = spacing["ddp"]["warning"]
    assert "5.3% of its tokens apart" in warning
    assert warning in answer_section(page).replace("&#39;", "'")
    html = rules_section(page)
    table = body_rows(html, 1)
    assert [r[0] for r in table] == ["adlocoadloco", "diloco" * 2, "ddp" * 2]
    assert table[1][1:5] == ["at an outer step", "3", "100", "33.3%"]
    assert table[2][1:5] == ["at every step", "19", "100", "5.3%above the limit"]
    # The rules table has the between: round verdict of AdLoCo against every other headline run.
    rules = body_rows(html, 0)
    between = [r[1] for r in rules]
    assert "simulated time against diloco at 70" in between
    assert "simulated time against ddp anchor (ddp) at 70" in between
    assert "communications against ddp anchor (ddp) at 70" in between
    assert all(r[4] != "–" for r in rules)  # between: round, the fifth column


def test_a_looser_limit_takes_the_warning_off_the_page(workspace):
    found, page, doc = report_of(workspace, max_eval_gap=0.06)
    assert all(s["warning"] is None for s in doc["eval_spacing"])
    assert "evaluated up to" not in answer_section(page)
    assert "6.0%" in rules_section(page)
