"""How often the verify stage's verdicts on the Analyzer's causal claims are right, on the
planted-cause task (bench/tasks/planted_cause: the score is CAUSE plus Gaussian noise, INERT
changes nothing).

Part 1, the issue's measure: `--pairs` children each with two edits (CAUSE and INERT, two hunks),
evaluated in the sandbox; the LLM simulator's analysis of the real analysis prompt makes one claim
per child (it credits a hunk drawn by its rng with the observed change, so about half the claims
credit the inert hunk), and the verify stage (verify_share 1.0, the evaluator's noise detected)
checks every claim. A claim crediting the CAUSE hunk is right when confirmed; one crediting the
INERT hunk is right when refuted.
With `--analyzer-url URL --analyzer-model NAME` part 1's claims come from a real model instead
(e.g. `evoforge serve-llm --model smollm2`): the share of its claims that survive checking.
Part 2: full runs on the simulator with `analyze.verify_share: 1.0` (`--runs` seeds of `--evals`),
where children have one edit or more as the simulator's mutations fall; verdicts by what the
credited hunk is and how many hunks the child had.

    python bench/claims_verdicts.py --pairs 30 --runs 2 --evals 60
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="evoforge-bench-prefect-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from evoforge.evaluators.sandbox import SandboxLimits  # noqa: E402
from evoforge.evaluators.task import Task, load_task  # noqa: E402
from evoforge.flows.cli import main  # noqa: E402
from evoforge.infra.claims_format import claim_lines  # noqa: E402
from evoforge.infra.config import AnalyzeConfig, RunConfig  # noqa: E402
from evoforge.infra.hunks import hunks, revert  # noqa: E402
from evoforge.infra.llm_sim.answers import PREFACE  # noqa: E402
from evoforge.infra.llm_sim.process import SimulatorProcess  # noqa: E402
from evoforge.infra.llm_sim.server import SimConfig  # noqa: E402
from evoforge.infra.nodes import EVALUATED, Node  # noqa: E402
from evoforge.infra.nodestore import NodeStore  # noqa: E402
from evoforge.infra.offline.analysis import simulated_analysis  # noqa: E402
from evoforge.infra.offline.backend import OfflineBackend  # noqa: E402
from evoforge.infra.prompt_format import parse_analysis  # noqa: E402
from evoforge.stages.analysis_data import AnalysisData  # noqa: E402
from evoforge.stages.analysis_prompt import analysis_messages  # noqa: E402
from evoforge.stages.evaluation.job import InlineEvaluations  # noqa: E402
from evoforge.stages.pipeline.requests import request_for  # noqa: E402
from evoforge.stages.pipeline.run_view import RunView  # noqa: E402
from evoforge.stages.population.item import Item  # noqa: E402
from evoforge.stages.population.pool import Pool  # noqa: E402
from evoforge.stages.sample import make_sampler  # noqa: E402
from evoforge.stages.verify import Verify  # noqa: E402
from evoforge.stages.verify_data import ClaimsData  # noqa: E402
from evoforge.stages.verify_ledger import Ledger  # noqa: E402

TASK_DIR = Path(__file__).resolve().parent / "tasks" / "planted_cause"
_CAUSE = re.compile(r"^CAUSE = (.+)$", re.M)


def causal(parent: str, child: str, hunk: int) -> bool:
    """Whether putting `hunk` back as in the parent changes CAUSE (the planted cause)."""
    return _CAUSE.findall(revert(parent, child, hunk)) != _CAUSE.findall(child)


def right(verdict: str, on_cause: bool) -> bool:
    """A claim on the cause is right when confirmed; one on the inert hunk, when refuted."""
    return verdict == ("confirmed" if on_cause else "refuted")


async def _score(ctx: RunView, node: Node) -> float:
    outcome = (await ctx.evaluations.run(request_for(node, ctx), None)).outcome
    assert outcome.ok and outcome.score is not None, outcome.error
    return outcome.score


def _real_answer(messages: list[dict[str, str]], url: str, model: str) -> str:
    """A real model's answer to the analysis prompt (an OpenAI-compatible server)."""
    from openai import OpenAI  # only this option needs it

    answer = OpenAI(base_url=url, api_key="none").chat.completions.create(
        model=model, messages=messages, max_tokens=400, temperature=0.0)  # type: ignore[arg-type]
    return answer.choices[0].message.content or ""


def pairs(task: Task, n: int, seed: int, scratch: Path,
          analyzer: tuple[str, str] | None = None) -> list[dict]:
    """Part 1: `n` two-edit children, each claim checked (the simulator's, or a real model's)."""
    rng = random.Random(seed)
    cfg = RunConfig(analyze=AnalyzeConfig(verify_share=1.0))
    rows: list[dict] = []
    unread: list[str] = []
    for i in range(n):
        cause, inert = round(rng.uniform(1, 5), 3), round(rng.uniform(1, 9), 3)
        parent_code = task.initial_code.replace("CAUSE = 2.0", f"CAUSE = {cause}").replace(
            "INERT = 5.0", f"INERT = {inert}")
        new_cause = round(cause * math.exp(rng.choice((-1, 1)) * rng.uniform(0.03, 0.3)), 4)
        child_code = parent_code.replace(f"CAUSE = {cause}", f"CAUSE = {new_cause}").replace(
            f"INERT = {inert}", f"INERT = {round(inert * rng.uniform(0.5, 1.5), 4)}")
        pool = Pool()
        ctx = RunView("bench", task, cfg, OfflineBackend(), pool, make_sampler(cfg.search), random.Random(i),
                      SandboxLimits(), scratch, evaluations=InlineEvaluations())
        parent = Node(id=f"p{i:03d}", run_id="bench", code=parent_code, status=EVALUATED)
        parent.score_full = asyncio.run(_score(ctx, parent))
        pool.add(parent)
        child = Node(id=f"c{i:03d}", run_id="bench", code=child_code, parent_id=parent.id, status=EVALUATED,
                     evaluated_at=time.time())
        child.score_full = asyncio.run(_score(ctx, child))
        item = Item(v_i=1, parent=parent)
        item.node = child
        messages = analysis_messages(item, ctx)
        answer = (_real_answer(messages, *analyzer) if analyzer is not None
                  else simulated_analysis(messages[-1]["content"], rng, PREFACE))
        sections, _ = parse_analysis(answer)
        AnalysisData.of(child).claims = claim_lines(sections["Claims"])
        stage = Verify()
        stage.ledger = Ledger(1.0, candidates=10_000)
        node = asyncio.run(stage.run(item, ctx)).node
        unread.extend(ClaimsData.peek(node).unparsed)
        if not sections["Claims"].strip():
            unread.append("(no Claims section)")
        for claim in ClaimsData.peek(node).claims:
            on_cause = causal(parent_code, child_code, claim["hunk"])
            rows.append({"on_cause": on_cause, "verdict": claim["verdict"],
                         "right": right(claim["verdict"], on_cause), "effect": claim.get("effect"),
                         "se": claim.get("se"), "claimed": claim["magnitude"]})
    return rows + [{"unread": line} for line in unread]


def runs(seeds: int, evals: int, root: Path) -> tuple[list[dict], list[dict]]:
    """Part 2: full simulator runs with every claim checked."""
    rows, statuses = [], []
    config = root / "verify.yaml"
    config.write_text(json.dumps({"analyze": {"by_value": False, "verify_share": 1.0}}))
    with SimulatorProcess(SimConfig(median_s=0.02, sigma=0.2, slots=8, seed=4)) as sim:
        for seed in range(seeds):
            run_dir = root / f"run-{seed}"
            code = main(["run", str(TASK_DIR), "--run-dir", str(run_dir), "--workspace", str(root / "ws"),
                         "--config", str(config), "--llm-base-url", sim.base_url, "--max-evals", str(evals),
                         "--seed", str(seed), "--quiet"])
            assert code == 0
            with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
                nodes = {n.id: n for n in store.all()}
            statuses.append(json.loads((run_dir / "status.json").read_text())["claims"])
            for node in nodes.values():
                for claim in ClaimsData.peek(node).claims:
                    if claim["verdict"] == "unchecked" or node.parent_id not in nodes:
                        continue
                    parent = nodes[node.parent_id].code
                    on_cause = causal(parent, node.code, claim["hunk"])
                    rows.append({"on_cause": on_cause, "hunks": len(hunks(parent, node.code)),
                                 "verdict": claim["verdict"], "right": right(claim["verdict"], on_cause),
                                 "claimed": claim["magnitude"]})
    return rows, statuses


def _summary(rows: list[dict]) -> dict:
    unread = [r["unread"] for r in rows if "unread" in r]
    rows = [r for r in rows if "unread" not in r]
    checked = [r for r in rows if r["verdict"] != "unchecked"]
    return {"claims_made": len(rows), "lines_unread": len(unread), "unread_examples": unread[:3],
            "claims_checked": len(checked), "right": sum(r["right"] for r in checked),
            "right_share": round(sum(r["right"] for r in checked) / len(checked), 3) if checked else None,
            "by_credited_hunk_and_verdict": dict(Counter(
                f"{'cause' if r['on_cause'] else 'inert'}:{r['verdict']}" for r in checked))}


def main_bench(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--evals", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--analyzer-url", default=None, help="a real model's server for part 1's claims")
    parser.add_argument("--analyzer-model", default=None)
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    task = load_task(TASK_DIR)
    root = Path(tempfile.mkdtemp(prefix="evoforge-claims-bench-"))
    started = time.monotonic()
    analyzer = (args.analyzer_url, args.analyzer_model or "") if args.analyzer_url else None
    result = {"pairs": _summary(pairs(task, args.pairs, args.seed, root, analyzer))}
    result["pairs"]["seconds"] = round(time.monotonic() - started, 1)
    if args.runs:
        started = time.monotonic()
        rows, statuses = runs(args.runs, args.evals, root)
        result["runs"] = _summary(rows)
        result["runs"]["two_or_more_hunks"] = _summary([r for r in rows if r["hunks"] >= 2])
        result["runs"]["one_hunk"] = _summary([r for r in rows if r["hunks"] == 1])
        result["runs"]["status_claims"] = statuses
        result["runs"]["seconds"] = round(time.monotonic() - started, 1)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main_bench(sys.argv[1:]))
