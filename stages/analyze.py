"""Analyze (ASI-Evolve's Analyzer): a structured report on every evaluated candidate — what changed,
what happened, why, what to try next — and the lessons it offers the cognition base.

The analyze stage plug-in, the last of the main line: it sees every candidate the engineer hands
on (evaluated, failed, pruned) and passes over the ones never evaluated (duplicates, stale
drops). It only fills in the node (`analysis`, `lessons`, its LLM cost): the sinks record the
report (analysis.md, MLflow) and write the lessons back. A failed LLM call leaves a report
saying so and never fails the candidate.

What analysis costs in LLM calls is a setting: `analyze.share` analyses a share of the
candidates (chosen by node id, so a resumed run picks the same ones), `analyze.batch` asks for
several candidates' reports in one call (a candidate waits at most `analyze.batch_wait_s` for
its batch to fill), and `analyze.llm` sends the calls to another endpoint (a smaller model).
Unbatched, the calls spend the LLM's spare capacity (`analyze.by_value`, stages/analysis_value.py):
with slack every candidate is analysed by the LLM; when the LLM binds, new bests and the most
telling candidates are, and the rest get the deterministic summary (AnalysisData.by says which).
"""

from __future__ import annotations

import asyncio

from evoforge.infra.claims_format import claim_lines
from evoforge.infra.config import RunConfig
from evoforge.infra.llm.authorship import LESSONS_BY, OFFLINE, answer_author, answer_kind, answer_label
from evoforge.infra.llm.scheduler import ANALYZE, SlotRefused, scheduler_of
from evoforge.infra.llm.types import Completion, LLMBackend, LLMError
from evoforge.infra.llm_traces import LLMCall, note_calls, recording
from evoforge.infra.nodes import Node
from evoforge.infra.prompt_format import (
    ANALYSIS_SECTIONS,
    EXTRA_SECTION,
    join_analysis_requests,
    parse_analysis,
    split_reports,
)
from evoforge.stages.analysis_data import BY_LLM, BY_OFFLINE, BY_SUMMARY, AnalysisData
from evoforge.stages.analysis_prompt import SYSTEM, analysis_messages
from evoforge.stages.analysis_value import NEW_BEST, Triage, Worth, summary_report
from evoforge.stages.pipeline.llm_call import ask_llm
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.pipeline.stage import Stage, StageResult
from evoforge.stages.population.item import Item

ANALYSIS_BY = "analysis_by"  # node.artifacts key: who wrote the report (LLM, offline, simulated)


class Analyze(Stage):
    """Writes the Analyzer's report onto every evaluated candidate (`analyze.enabled`)."""

    name = "analyze"
    task_run_name = "analyze-{label}"
    workers_like = "research"  # an LLM stage: as many calls at once as research makes

    def __init__(self) -> None:
        self._batch: list[tuple[Item, asyncio.Future[Answer]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self.triage: Triage | None = None  # what the run's candidates showed: whom the bound LLM analyses

    def enabled(self, cfg: RunConfig) -> bool:
        return cfg.analyze.enabled

    def skips(self, item: Item, ctx: RunView) -> bool:
        node = item.node
        return node is None or not node.was_evaluated or not chosen(node.id, ctx.config.analyze.share)

    async def run(self, item: Item, ctx: RunView) -> StageResult:
        if ctx.config.analyze.batch <= 1:
            return await analyze(item, ctx, self.triage_for(ctx))
        return await self._batched(item, ctx)

    def triage_for(self, ctx: RunView) -> Triage | None:
        """The run's triage (None when `analyze.by_value` is off: every candidate waits for the LLM)."""
        if not ctx.config.analyze.by_value:
            return None
        if self.triage is None:
            self.triage = Triage(ctx.config.analyze.bound_share)
        return self.triage

    async def _batched(self, item: Item, ctx: RunView) -> StageResult:
        """This item's report from a call shared with up to `analyze.batch - 1` others."""
        assert item.node is not None
        done: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._batch.append((item, done))
        cfg = ctx.config.analyze
        if len(self._batch) >= cfg.batch:
            self._send(ctx)
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(cfg.batch_wait_s, self._send, ctx)
        answer, calls = await done  # a bug there raises here: this node's internal error
        node = item.node.copy()
        if calls:
            note_calls(calls)  # the call's trace, on the first candidate of the batch
        if isinstance(answer, LLMError):
            return StageResult(_failed(node, ctx, answer))
        reports = split_reports(answer.text)
        text = reports.get(node.id)
        if text is None:
            AnalysisData.of(node).report = (f"# No analysis of node {node.id}\n_The batched analysis "
                                            f"answer had no report for it._\n")
            node.artifacts[ANALYSIS_BY] = "nobody: the batched answer skipped it"
            return StageResult(node)
        share = len(reports) or 1  # the call's cost, shared by the candidates it reported on
        node.llm_s += answer.seconds / share
        node.tokens_in += answer.tokens_in // share
        node.tokens_out += answer.tokens_out // share
        return StageResult(_reported(node, answer, text, ctx))

    def _send(self, ctx: RunView) -> None:
        """Ask for the reports of the batch gathered so far, in one call."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._batch = self._batch, []
        if batch:
            asyncio.get_running_loop().create_task(_ask_batch(batch, ctx))


def chosen(node_id: str, share: float) -> bool:
    """Whether the candidate is one of the analysed `share`: by its id, the same on every resume.

    >>> chosen("0000aaaa0000", 0.25), chosen("ffffffff0000", 0.25), chosen("ffffffff0000", 1.0)
    (True, False, True)
    """
    if share >= 1:
        return True
    try:
        return int(node_id[:8], 16) / 0x1_0000_0000 < share
    except ValueError:
        return True


async def analyze(item: Item, ctx: RunView, triage: Triage | None = None) -> StageResult:
    """Ask the LLM for a report on the item's evaluated candidate; a copy of its node comes back
    with the report, its lessons (when `analyze.write_back`) and the call's cost. With `triage`,
    a candidate the binding LLM cannot spare a slot for gets the deterministic summary instead."""
    assert item.node is not None
    if not item.node.was_evaluated:
        return StageResult(item.node)  # nothing ran, nothing to analyse
    node = item.node.copy()
    messages = analysis_messages(item, ctx)
    scheduler = scheduler_of(ctx.analysis_llm or ctx.llm)
    worth, binds = None, False
    if triage is not None:
        worth = triage.worth(item, ctx)  # remembered even with slack: the failure kinds, the groups
        binds = scheduler is not None and scheduler.binds()
    if binds and worth is not None and not triage.admit(worth):
        return StageResult(_summarised(node, messages))
    rank, keep = _place(worth, ctx) if binds and worth is not None else ((), None)
    try:
        completion = await ask_llm(ctx, node, messages, ctx.analysis_llm, priority=ANALYZE,
                                   rank=rank, keep=keep)
    except SlotRefused:  # only a refusable call, so with a triage: better-ranked ones took its place
        assert triage is not None
        triage.refused()
        return StageResult(_summarised(node, messages))
    except LLMError as exc:
        return StageResult(_failed(node, ctx, exc))
    AnalysisData.of(node).worth = worth.name if binds and worth is not None else "slack"
    return StageResult(_reported(node, completion, completion.text, ctx))


def _place(worth: Worth, ctx: RunView) -> tuple[tuple[float, ...], int | None]:
    """The call's rank among waiting analyses, and how many may wait (None, never refused: a new best)."""
    return worth.rank, (None if worth.kind == NEW_BEST else ctx.config.analyze.max_waiting)


def _summarised(node: Node, messages: list[dict[str, str]]) -> Node:
    """The node with the deterministic summary for a report (no LLM call, no lessons)."""
    AnalysisData.of(node).report = summary_report(node, messages[-1]["content"])
    node.artifacts[ANALYSIS_BY] = "the deterministic summary (no LLM: the LLM was busy)"
    AnalysisData.of(node).by = BY_SUMMARY
    return node


Answer = tuple["Completion | LLMError", list[LLMCall]]  # a batch's outcome and the call's trace


async def _ask_batch(batch: list[tuple[Item, asyncio.Future[Answer]]], ctx: RunView) -> None:
    """One call for the batch's reports; every waiting candidate gets the answer (or the LLM's
    error); any other error is raised in every waiting stage run, so none waits for ever."""
    try:
        requests = [(item.node.id, analysis_messages(item, ctx)[-1]["content"]) for item, _ in batch
                    if item.node is not None]
        messages = [{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": join_analysis_requests(requests)}]
        cost = batch[0][0].node.copy()  # where ask_llm counts the call: shared out by each candidate
        with recording("analyze") as log:
            try:
                outcome: Completion | LLMError = await ask_llm(ctx, cost, messages, ctx.analysis_llm)
            except LLMError as exc:
                outcome = exc
        first = batch[0][0].node.id
        for item, done in batch:
            if not done.done():
                done.set_result((outcome, log.calls if item.node.id == first else []))
    except Exception as exc:
        for _, done in batch:
            if not done.done():
                done.set_exception(exc)


def _reported(node: Node, completion: Completion, text: str, ctx: RunView) -> Node:
    """The node with the report `text` (of `completion`'s author) and its lessons."""
    sections, lessons = parse_analysis(text)
    AnalysisData.of(node).report = render_report(node, completion, sections, lessons)
    node.artifacts[ANALYSIS_BY] = answer_author(completion, "analyzer")
    AnalysisData.of(node).by = BY_OFFLINE if answer_kind(completion) == OFFLINE else BY_LLM
    AnalysisData.of(node).claims = claim_lines(sections.get("Claims", ""))
    if ctx.config.analyze.write_back and lessons:
        AnalysisData.of(node).lessons = lessons
        node.artifacts[LESSONS_BY] = answer_kind(completion)  # an LLM's reach the shared base
    return node


def _failed(node: Node, ctx: RunView, exc: LLMError) -> Node:
    AnalysisData.of(node).report = failed_report(node, ctx.analysis_llm or ctx.llm, exc)
    node.artifacts[ANALYSIS_BY] = f"nobody: the analysis call failed ({exc})"
    return node


def render_report(node: Node, completion: Completion, sections: dict[str, str], lessons: list[str]) -> str:
    """The report as markdown: a header naming its author ("# LLM analysis ...", "# Offline ...",
    "# Simulated ..."), the asked-for sections in order (the lessons as parsed), then any text of
    the answer outside them."""
    parts = [f"# {answer_label(completion)} analysis of node {node.id}",
             f"_Written by {answer_author(completion, 'analyzer')}._", ""]
    for name in ANALYSIS_SECTIONS:
        if name == "Lessons":
            body = "\n".join(f"- {lesson}" for lesson in lessons) or "none"
        else:
            body = sections.get(name, "").strip() or "_(not in the answer)_"
        parts += [f"## {name}", body, ""]
    extra = sections.get(EXTRA_SECTION, "").strip()
    if extra:
        parts += [f"## {EXTRA_SECTION}", extra, ""]
    return "\n".join(parts)


def failed_report(node: Node, llm: LLMBackend, exc: LLMError) -> str:
    """The report left when the analysis call failed: which backend, and why."""
    return (f"# No analysis of node {node.id}\n_The analysis call to the {llm.name} "
            f"backend (model {llm.model or 'unknown'}) failed: {exc}._\n")
