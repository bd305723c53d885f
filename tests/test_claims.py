"""The Analyzer's causal claims: the change in numbered hunks (and the two counterfactual
programs of a hunk), claim lines parsed from sloppy text, the verdict statistics, the Claims
section in the prompt and the answers, and a run on the LLM simulator over the planted-cause task
(bench/tasks/planted_cause) where the claims are checked by counterfactual runs."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from evoforge.flows.cli import main
from evoforge.infra.claims_format import BETTER, WORSE, parse_claim, parse_claims
from evoforge.infra.hunks import hunks, only, render_hunks, revert
from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
from evoforge.infra.offline.analysis import offline_analysis, simulated_analysis
from evoforge.infra.prompt_format import ANALYSIS_SECTIONS, parse_analysis
from evoforge.stages.verdicts import judge
from evoforge.stages.verify_data import ClaimsData
from tests.helpers import prefect_run_of, read_nodes, read_status

PLANTED = Path(__file__).resolve().parents[1] / "bench" / "tasks" / "planted_cause"
PARENT = "a = 1\nb = 2\nkeep = 0\nc = 3\n"
CHILD = "a = 1\nb = 20\nkeep = 0\nc = 30\nd = 4\n"


def test_a_change_splits_into_numbered_hunks_that_revert_and_apply_alone():
    found = hunks(PARENT, CHILD)
    assert [(h.index, h.removed, h.added) for h in found] == [
        (1, ("b = 2\n",), ("b = 20\n",)), (2, ("c = 3\n",), ("c = 30\n", "d = 4\n"))]
    assert revert(PARENT, CHILD, 1) == "a = 1\nb = 2\nkeep = 0\nc = 30\nd = 4\n"
    assert revert(PARENT, CHILD, 2) == "a = 1\nb = 20\nkeep = 0\nc = 3\n"
    assert only(PARENT, CHILD, 1) == "a = 1\nb = 20\nkeep = 0\nc = 3\n"
    assert only(PARENT, CHILD, 2) == "a = 1\nb = 2\nkeep = 0\nc = 30\nd = 4\n"
    assert hunks(PARENT, PARENT) == [] and render_hunks(PARENT, PARENT) == ""
    shown = render_hunks(PARENT, CHILD)
    assert "### Hunk 1 (parent line 2)\n```diff\n-b = 2\n+b = 20\n```" in shown
    assert "### Hunk 2 (parent line 4)\n```diff\n-c = 3\n+c = 30\n+d = 4\n```" in shown
    with pytest.raises(ValueError, match="no hunk 3: the change has 2 hunk"):
        revert(PARENT, CHILD, 3)


def test_adjacent_changed_lines_are_one_hunk_and_an_insertion_is_a_hunk():
    assert len(hunks("x = 1\ny = 2\n", "x = 5\ny = 6\n")) == 1
    inserted = hunks("a\nb\n", "a\nnew\nb\n")
    assert [(h.removed, h.added) for h in inserted] == [((), ("new\n",))]
    assert revert("a\nb\n", "a\nnew\nb\n", 1) == "a\nb\n"
    assert only("a\nb\n", "a\nnew\nb\n", 1) == "a\nnew\nb\n"


@pytest.mark.parametrize(("line", "maximize", "expected"), [
    ("hunk 2: raised the score by about 0.05", True, (2, BETTER, 0.05)),
    ("Hunk #1 lowered the score (-0.3)", True, (1, WORSE, 0.3)),
    ("**Hunk 3** improved the objective by 12", False, (3, BETTER, 12.0)),
    ("hunk 1 -> score went up 0.2", False, (1, WORSE, 0.2)),  # up is worse when minimizing
    ("(hunk 4) made it worse", True, (4, WORSE, None)),
    ("hunk 2: +0.5", True, (2, BETTER, 0.5)),
    ("hunk 1 raised the score from 0.5 to 0.75", True, (1, BETTER, 0.25)),
    ("hunk 5: raised the score by 10%", True, (5, BETTER, None)),  # a share: no magnitude
    ("The increase in hunk 2 is about 0.1", True, (2, BETTER, 0.1)),
])
def test_claim_lines_are_read_from_sloppy_text(line, maximize, expected):
    claim = parse_claim(line, maximize)
    assert claim is not None and (claim.hunk, claim.direction, claim.magnitude) == expected


def test_lines_that_are_no_claim_are_kept_as_text_and_none_means_none():
    parsed = parse_claims("* hunk 1: raised the score by 0.1\n- I think the change helped.\n"
                          "- hunks 1 and 2 raised it together\n- hunk three went up\n\nnone", True)
    assert [(c.hunk, c.direction) for c in parsed.claims] == [(1, BETTER)]
    assert parsed.unparsed == ["I think the change helped.", "hunks 1 and 2 raised it together",
                               "hunk three went up"]
    assert parse_claims("none", True).claims == [] and parse_claims("None.", True).unparsed == []
    assert parse_claims("", True) == parse_claims("n/a", False)


def test_verdicts_deterministic_and_noisy():
    confirmed = judge([3.0], [2.0], better=True, maximize=True, magnitude=1.0)
    assert (confirmed.verdict, confirmed.effect, confirmed.se, confirmed.n) == ("confirmed", 1.0, 0.0, 1)
    assert judge([3.0], [3.0], better=True, maximize=True, magnitude=1.0).verdict == "refuted"
    assert judge([3.0], [2.0], better=False, maximize=True, magnitude=1.0).verdict == "refuted"  # wrong way
    assert judge([2.0], [3.0], better=True, maximize=False, magnitude=None).verdict == "confirmed"
    noisy = {"noisy": True, "better": True, "maximize": True}
    sure = judge([3.0, 3.01, 2.99], [2.0, 2.01, 1.99], magnitude=1.0, **noisy)
    assert sure.verdict == "confirmed" and abs(sure.effect - 1.0) < 1e-9 and 0 < sure.se < 0.02
    assert judge([3.0, 3.01, 2.99], [3.0, 2.99, 3.01], magnitude=1.0, **noisy).verdict == "refuted"
    wrong_way = judge([3.0, 3.01, 2.99], [3.4, 3.41, 3.39], magnitude=0.4, **noisy)
    assert wrong_way.verdict == "refuted" and wrong_way.effect < 0
    # an effect within its noise, against a claim no larger than the noise: inconclusive
    assert judge([3.0, 3.3, 2.7], [2.9, 2.6, 3.2], magnitude=0.1, **noisy).verdict == "inconclusive"


def test_old_answers_without_claims_parse_as_before_and_claims_are_a_section():
    sections, lessons = parse_analysis("## What happened\nIt rose.\n## Lessons\n- Keep it small.\n")
    assert sections["Claims"] == "" and lessons == ["Keep it small."] and ANALYSIS_SECTIONS[-1] == "Claims"
    sections, lessons = parse_analysis("## Lessons\n- Keep it small.\n## Claims\n- hunk 1: raised the "
                                       "score by about 0.5\n")
    assert lessons == ["Keep it small."] and sections["Claims"] == "- hunk 1: raised the score by about 0.5"
    assert parse_analysis("**Claims:** none\n")[0]["Claims"] == "none"


def _prompt(delta: str) -> str:
    return ("Analysis request: write a report\nThe change, in numbered hunks:\n### Hunk 1 (parent line 2)\n"
            "```diff\n-a\n+b\n```\n### Hunk 2 (parent line 9)\n```diff\n-c\n+d\n```\n"
            f"## Computed comparison\n- status: evaluated\n- error class: none\n- delta vs parent: {delta}\n")


def test_the_offline_analyzer_makes_no_claims_and_the_simulator_one_per_moved_candidate():
    offline = parse_analysis(offline_analysis(_prompt("+0.5 (+10.0%)")))[0]["Claims"]
    assert offline.startswith("none") and parse_claims(offline, True).claims == []
    rng = random.Random(3)
    hunks_credited = set()
    for _ in range(20):
        section = parse_analysis(simulated_analysis(_prompt("-0.25 (-5.0%)"), rng, "Sim"))[0]["Claims"]
        claims = parse_claims(section, True).claims
        assert len(claims) == 1 and claims[0].direction == WORSE and claims[0].magnitude == 0.25
        hunks_credited.add(claims[0].hunk)
    assert hunks_credited == {1, 2}  # the rng credits either: sometimes wrongly, on purpose
    unmoved = parse_analysis(simulated_analysis(_prompt("+0 (+0.0%)"), rng, "Sim"))[0]["Claims"]
    assert parse_claims(unmoved, True).claims == []


def _causal(parent: str, child: str, hunk: int) -> bool:
    """Whether reverting `hunk` changes the value of CAUSE (the planted cause)."""
    value = re.compile(r"^CAUSE = (.+)$", re.M)
    return value.findall(revert(parent, child, hunk)) != value.findall(child)


@pytest.mark.slow
def test_a_simulated_run_checks_claims_within_its_share_and_the_verdicts_follow_the_cause(tmp_path):
    share = 0.25
    config = tmp_path / "c.yaml"
    config.write_text(f"analyze:\n  by_value: false\n  verify_share: {share}\n")
    run_dir = tmp_path / "run"
    with SimulatorProcess(SimConfig(median_s=0.02, sigma=0.2, slots=8, seed=4)) as sim:
        code = main(["run", str(PLANTED), "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                     "--config", str(config), "--llm-base-url", sim.base_url, "--max-evals", "90",
                     "--seed", "2", "--quiet"])
    assert code == 0
    nodes = {n.id: n for n in read_nodes(run_dir)}
    status = read_status(run_dir)
    made = [(n, c) for n in nodes.values() for c in ClaimsData.peek(n).claims]
    checked = [(n, c) for n, c in made if c["verdict"] != "unchecked"]
    assert len(made) >= 10 and checked, (len(made), len(checked))
    spent = sum(ClaimsData.peek(n).evaluations for n in nodes.values())
    assert spent > 0 and status["verify_evals"] == spent and status["claims"]["made"] == len(made)
    assert status["claims"]["checked"] == len(checked)
    candidates = status["evaluations"]
    assert spent <= share * candidates + 6  # the allowance, plus at most one claim (6 runs when noisy)
    # counterfactual runs are spent from the evaluation budget, held for their worst case before
    # they start, so the run never spends past it
    reached = int(re.search(r"max_evals reached \((\d+)\)", status["stop_reason"]).group(1))
    assert reached == candidates + spent == 90
    for node, claim in checked:
        parent = nodes[node.parent_id]
        if claim["verdict"] == "confirmed":
            assert _causal(parent.code, node.code, claim["hunk"]), claim
        if not _causal(parent.code, node.code, claim["hunk"]):
            assert claim["verdict"] in ("refuted", "inconclusive"), claim
    report = (run_dir / "report.md").read_text()
    assert "## Analyzer claims" in report and f"- made: {len(made)}" in report
    _, names = prefect_run_of(run_dir)  # each counterfactual run is a Prefect task run of the flow
    verify_runs = [n for n in names if n.startswith("verify-")]
    assert len(verify_runs) == spent and all(n.split("-")[1] in nodes for n in verify_runs)
    assert not [n for n in nodes if n.startswith("verify")]  # and none became a node
