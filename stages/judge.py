"""Judge: an optional LLM judge that scores a fully evaluated candidate's code for quality and
promise, in [0, 1], kept apart from the task score (`JudgeData.score`, stages/judge_data.py).

The judge stage plug-in, on when `judge.weight > 0`. The pool blends the judge score into the
selection fitness (stages/population/pool.py says how it is normalised); the raw task score stays in
`score_full`. Without an LLM there is no judgement: the offline backend answers with no score and
the node's judge score stays None. Every outcome is noted in `node.artifacts["judge"]`.

It is spliced in behind the engineer, like the Analyzer: whichever of the two the run lists later
runs first, and it works with the Analyzer on or off (a splice behind a stage the run leaves out
would not start).
"""

from __future__ import annotations

from evoforge.evaluators.task import Task
from evoforge.infra.artifacts import ArtifactKind
from evoforge.infra.config import RunConfig
from evoforge.infra.llm.authorship import OFFLINE, answer_author, answer_kind
from evoforge.infra.llm.scheduler import JUDGE
from evoforge.infra.llm.types import LLMError
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.infra.prompt_format import JUDGE_MARKER, parse_judge_score
from evoforge.stages.judge_data import JudgeData
from evoforge.stages.pipeline.llm_call import ask_llm
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.pipeline.stage import Stage, StageResult
from evoforge.stages.population.item import Item
from evoforge.stages.prompt_fit import METRICS, Part, fit_to

JUDGE_NOTE = "judge"  # node.artifacts key: the judge's score and who gave it, or why there is none

def judge_system(artifact: ArtifactKind) -> str:
    """The judge's system message, speaking of the task's kind of artifact."""
    noun = artifact.noun
    return (f"You are an expert reviewer of {noun}s evolved by an automated search. You judge the "
            f"quality of a {noun} and how promising it is as a starting point for further improvement.")


_MAX_BLOCK_CHARS = 12000


class Judge(Stage):
    """Scores fully evaluated candidates with the LLM (`judge.weight > 0`)."""

    name = "judge"
    task_run_name = "judge-{label}"
    workers_like = "research"  # an LLM stage: as many calls at once as research makes

    def enabled(self, cfg: RunConfig) -> bool:
        return cfg.judge.weight > 0


    def skips(self, item: Item, ctx: RunView) -> bool:
        return item.node is None or item.node.status != EVALUATED or ctx.pool.value(item.node) is None

    async def run(self, item: Item, ctx: RunView) -> StageResult:
        return await judge(item, ctx)


def judge_messages(node: Node, task: Task, llm: object = None, max_tokens: int = 0) -> list[dict[str, str]]:
    """The prompt: the candidate's evolvable part, its score and metrics, and the one-line answer
    form; fitted to `llm`'s context window when it is given (metrics dropped, then the part cut)."""
    artifact = task.artifact
    block = artifact.evolvable(node.code)
    if len(block) > _MAX_BLOCK_CHARS:
        block = block[:_MAX_BLOCK_CHARS] + "\n[... cut]"
    metrics = ", ".join(f"{k}={v:.6g}" for k, v in sorted(node.metrics.items())[:20]) or "none"
    value = node.score_full if node.score_full is not None else node.score_pilot
    level = " (pilot level)" if node.score_full is None else ""
    score = "none" if value is None else f"{value:.6g}{level}"
    heading = f"## Candidate {artifact.noun}" + (f" ({artifact.evolvable_part})" if artifact.evolvable_part
                                                 else "")
    thing = artifact.noun
    parts = [
        Part("system", judge_system(artifact), role="system"),
        Part("task", f"# Judging candidate {node.id} for task {task.name}\n"
             f"Objective: {task.objective} ({task.direction}); the candidate's score: {score}"),
        Part("metrics", f"Metrics: {metrics}", METRICS),
        Part("candidate", f"{heading}\n```{artifact.fence()}\n{block.rstrip()}\n```",
             short=f"{heading}\n```{artifact.fence()}\n{block[:2000].rstrip()}\n[... cut]\n```"
             if len(block) > 2000 else ""),
        Part("rules", f"{JUDGE_MARKER} rate this {thing}'s quality and its promise as a starting point "
             f"for further improvement, from 0 (poor) to 10 (excellent): judge the {thing}, not only its "
             f"score. Give at most two sentences of reasons, then one line `Score: N/10`."),
    ]
    return fit_to(llm, parts, max_tokens, strict=False).messages


async def judge(item: Item, ctx: RunView) -> StageResult:
    """Ask the LLM for the candidate's judge score; a copy of its node comes back with the score
    (or None), a note saying who gave it, and the call's cost."""
    assert item.node is not None
    if item.node.status != EVALUATED or ctx.pool.value(item.node) is None:
        return StageResult(item.node)  # only evaluated candidates (at the search level) are judged
    node = item.node.copy()
    JudgeData.of(node).score = None
    try:
        messages = judge_messages(node, ctx.task, ctx.llm, ctx.config.llm.max_tokens)
        completion = await ask_llm(ctx, node, messages, priority=JUDGE)
    except LLMError as exc:
        node.artifacts[JUDGE_NOTE] = f"no score: the judge call failed ({exc})"
        return StageResult(node)
    score = parse_judge_score(completion.text)
    author = answer_author(completion, "judge")
    if score is not None:
        JudgeData.of(node).score = score
        node.artifacts[JUDGE_NOTE] = f"{score * 10:.3g}/10 by {author}"
    elif answer_kind(completion) == OFFLINE:
        node.artifacts[JUDGE_NOTE] = "no score: the offline backend has no judgement of code quality"
    else:
        answer = " ".join(completion.text.split())[:200]
        node.artifacts[JUDGE_NOTE] = (f"no score: no usable `Score: N/10` line in the answer of "
                                      f"{author}: {answer!r}")
    return StageResult(node)
