"""The Analyzer's prompt: one evaluated candidate, what its evaluator said, and a comparison with
its parent and the pool's best computed here (deltas and an error class), so the LLM reasons
from facts instead of doing arithmetic."""

from __future__ import annotations

import re

from evoforge.evaluators.task import Task
from evoforge.infra.artifacts import ArtifactKind
from evoforge.infra.hunks import render_hunks
from evoforge.infra.nodes import PRUNED, REJECTED, ROLLED_BACK, STALE, Node
from evoforge.infra.prompt_format import ANALYSIS_MARKER, ANALYSIS_SECTIONS, MAX_LESSONS, render_comparison
from evoforge.stages.debug import RepairData
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.population.item import Item
from evoforge.stages.prompt_fit import ANALYSIS, FEEDBACK, METRICS, Part, fit_to

SYSTEM = (  # kind-neutral: a batched prompt's (stages/analyze.py); one request has its kind's
    "You are an expert researcher analysing one experiment of an evolutionary search: a candidate "
    "was changed and evaluated. Explain what happened and why from the evidence given, in the "
    "structure asked for; keep lessons to what would hold beyond this one candidate."
)


def analysis_system(artifact: ArtifactKind) -> str:
    """The Analyzer's system message, speaking of the task's kind of artifact."""
    noun = artifact.noun
    return (f"You are an expert researcher analysing one experiment of an evolutionary search over "
            f"{noun}s: a candidate {noun} was changed and evaluated. Explain what happened and why from "
            f"the evidence given, in the structure asked for; keep lessons to what would hold beyond "
            f"this one {noun}.")


_MAX_DIFF_CHARS = 6000
_MAX_METRICS = 20
_SHOWN_ARTIFACTS = ("traceback", "stderr_tail", "stdout_tail")  # long outputs, cut to their tails
# not evaluator output (evaluated_on: the Dask worker that ran it)
_HIDDEN_ARTIFACTS = frozenset({*_SHOWN_ARTIFACTS, "analysis_by", "judge", "evaluated_on"})
_SIGNAL_RE = re.compile(r"killed by (SIG[A-Z0-9]+)")
_RAISED_RE = re.compile(r"raised ([A-Za-z_][\w.]*)")
_EXIT_RE = re.compile(r"exited with code (-?\d+)")
_INVALID_RE = re.compile(r"metric '.*' (?:missing|is not finite)|evaluator reported error|produced no "
                         r"result|unreadable result")


def error_class(node: Node) -> str:
    """What kind of outcome the node had: 'none', or e.g. 'timeout', 'exception ValueError',
    'killed by signal SIGKILL', 'invalid result', 'pruned', 'rolled back'."""
    if node.status == PRUNED:
        return "pruned"
    if node.status == ROLLED_BACK:
        return "rolled back"
    if node.status == REJECTED:
        return "rejected"
    if node.status == STALE:
        return "stale"
    return classify_error(node.error) if node.error else "none"


def classify_error(error: str) -> str:
    """The error class of an evaluation's error message (see `error_class`).

    >>> classify_error("case 3 failed: evaluator raised ZeroDivisionError: division by zero")
    'exception ZeroDivisionError'
    """
    text = " ".join(error.split())
    case = re.match(r"case \S+ failed: (.*)", text)
    if case is not None:
        return classify_error(case.group(1))
    if text.startswith("internal error"):
        return "internal error"
    if text.startswith("timed out"):
        return "timeout"
    if "ran out of memory" in text or "MemoryError" in text:
        return "out of memory"
    if (signal := _SIGNAL_RE.search(text)) is not None:
        return f"killed by signal {signal.group(1)}"
    if "sys.exit" in text:
        return "program exited (sys.exit)"
    if (raised := _RAISED_RE.search(text)) is not None:
        return f"exception {raised.group(1)}"
    if (code := _EXIT_RE.search(text)) is not None:
        return f"crashed (exit code {code.group(1)})"
    if _INVALID_RE.search(text):
        return "invalid result"
    return "failure"


def analysis_messages(item: Item, ctx: RunView) -> list[dict[str, str]]:
    """The prompt: the task, the change, its evaluation and output, and the computed comparison,
    fitted to the analysis endpoint's context window (`stages/prompt_fit.py`)."""
    llm = ctx.analysis_llm or ctx.llm
    return fit_to(llm, analysis_parts(item, ctx), ctx.config.llm.max_tokens, strict=False).messages


def analysis_parts(item: Item, ctx: RunView) -> list[Part]:
    """The named parts of the Analyzer's prompt, in order, each with its drop rank."""
    node, task = item.node, ctx.task
    assert node is not None
    limit = ctx.config.analyze.max_output_chars
    about = f" {' '.join(task.description.split())[:1000]}" if task.description.strip() else ""
    diff = node.diff.rstrip()
    where = f" (in the {node.failed_stage} stage)" if node.failed_stage else ""
    output, short_output = _evaluator_output(node, limit), _evaluator_output(node, min(limit, 400))
    return [
        Part("system", analysis_system(task.artifact), role="system"),
        Part("task", f"# Analysis of candidate {node.id} for task {task.name}\n"
                     f"Objective: {task.objective} ({task.direction}).{about}"),
        Part("change", f"## The candidate's change (on parent {item.parent.id})\n"
                       f"Motivation: {' '.join(node.motivation.split()) or 'n/a'}"),
        _change_part(node, item.parent, diff),
        Part("evaluation", f"## Its evaluation\nStatus: {node.status}{where}\nScore: {_own_score(node)}"),
        Part("metrics", f"Metrics: {_metrics(node.metrics)}", METRICS),
        *(Part(f"repair {i}", line, ANALYSIS) for i, line in enumerate(_repairs(node), 1)),
        Part("evaluator output", output, FEEDBACK, short=short_output if short_output != output else ""),
        Part("comparison", render_comparison(comparison_facts(node, item.parent, ctx.pool.best_confirmed(),
                                                              task))),
        Part("instructions", _instructions(task.artifact.noun)),
    ]


def _change_part(node: Node, parent: Node | None, diff: str) -> Part:
    """The change as numbered hunks (what the Claims section credits), else the diff as given."""
    numbered = render_hunks(parent.code, node.code, _MAX_DIFF_CHARS) if parent is not None else ""
    if numbered:
        short = render_hunks(parent.code, node.code, 800) if len(numbered) > 800 else ""
        return Part("diff", f"The change, in numbered hunks:\n{numbered}", METRICS, short=short)
    return Part("diff", f"```diff\n{_head(diff, _MAX_DIFF_CHARS) or '(no diff)'}\n```", METRICS,
                short=f"```diff\n{_head(diff, 800)}\n```" if len(diff) > 800 else "")


def comparison_facts(node: Node, parent: Node | None, best: Node | None, task: Task) -> dict[str, str]:
    """The computed comparison: status, error class, score, and deltas vs the parent and the best."""
    score = _value(node)
    facts = {"status": str(node.status), "error class": error_class(node),
             "objective": f"{task.objective} ({task.direction})",
             "score": _own_score(node)}
    for label, ref in (("parent", parent), ("pool best", best)):
        if ref is None or ref.id == node.id:
            facts[label] = "none" if ref is None else "this candidate"
            continue
        is_parent = label == "pool best" and parent is not None and ref.id == parent.id
        also = " (also its parent)" if is_parent else ""
        facts[label] = f"{ref.id}, score {_fmt(_value(ref))}{also}"
        facts[f"delta vs {label}"] = _delta(score, _value(ref))
        facts[f"verdict vs {label}"] = _verdict(score, _value(ref), task)
        facts[f"metric deltas vs {label}"] = _metric_deltas(node.metrics, ref.metrics)
    added, removed = _diff_size(node.diff)
    facts["diff size"] = f"+{added} / -{removed} lines"
    if node.error:
        facts["error"] = _head(" ".join(node.error.split()), 300)
    return facts


def _instructions(noun: str) -> str:
    """The report asked for, its sections in order."""
    return (
        f"{ANALYSIS_MARKER} write a short report on this experiment with exactly these markdown "
        f"sections, in this order:\n\n"
        + "\n".join(f"## {name}" for name in ANALYSIS_SECTIONS)
        + f"\n\nUnder `## What changed`, the change in a sentence or two; under `## What happened`, the "
        f"outcome, using the computed comparison above; under `## Why it likely happened`, your best "
        f"explanation from the evidence (say so when it is uncertain); under `## What to try next`, one "
        f"to three concrete next experiments. Under `## Lessons`, 0 to {MAX_LESSONS} bullet lines "
        f"(`- ...`), each a lesson that generalises beyond this one {noun} (not a description of "
        f"this change), or the single line `none`. Under `## Claims`, one line per causal claim "
        f"you can make about the numbered hunks, as `- hunk N: raised the score by about X` (or "
        f"`lowered`; X from the computed comparison), at most one line per hunk, or the single line "
        f"`none`; each claim will be tested by re-running the {noun} without that hunk."
    )


def _value(node: Node) -> float | None:
    """The node's score: full, else pilot (a gated task's search level), else the partial score
    on its validation prefix."""
    for value in (node.score_full, node.score_pilot, node.score_partial):
        if value is not None:
            return value
    return None


def _own_score(node: Node) -> str:
    if node.score_full is not None:
        return _fmt(node.score_full)
    if node.score_pilot is not None:
        return f"{_fmt(node.score_pilot)} (pilot level, best of its Optuna trials)"
    if node.score_partial is not None:
        return f"{_fmt(node.score_partial)} (partial, on its first {node.cases_done} validation cases)"
    return "none"


def _fmt(value: float | None) -> str:
    return "none" if value is None else f"{value:.6g}"


def _delta(score: float | None, ref: float | None) -> str:
    if score is None or ref is None:
        return "n/a (no score)"
    change = score - ref
    share = f" ({change / abs(ref):+.1%})" if ref != 0 else ""
    return f"{change:+.6g}{share}"


def _verdict(score: float | None, ref: float | None, task: Task) -> str:
    if score is None or ref is None:
        return "n/a (no score)"
    if score == ref:
        return "equal"
    return "better" if task.better(score, ref) else "worse"


def _metric_deltas(mine: dict[str, float], theirs: dict[str, float]) -> str:
    shared = sorted(set(mine) & set(theirs))
    if not shared:
        return "no shared metrics"
    moved = [f"{k} {mine[k] - theirs[k]:+.4g}" for k in shared if mine[k] != theirs[k]]
    if not moved:
        return "none changed"
    more = f", ... ({len(moved) - _MAX_METRICS} more)" if len(moved) > _MAX_METRICS else ""
    return ", ".join(moved[:_MAX_METRICS]) + more


def _metrics(metrics: dict[str, float]) -> str:
    shown = ", ".join(f"{k}={v:.6g}" for k, v in sorted(metrics.items())[:_MAX_METRICS])
    return shown or "none"


def _diff_size(diff: str) -> tuple[int, int]:
    lines = diff.splitlines()
    added = sum(1 for ln in lines if ln.startswith("+") and not ln.startswith("+++"))
    removed = sum(1 for ln in lines if ln.startswith("-") and not ln.startswith("---"))
    return added, removed


def _repairs(node: Node) -> list[str]:
    """A line per earlier try that crashed and was repaired before this evaluation."""
    attempts = RepairData.peek(node).attempts
    return [f"Earlier try {i} crashed ({classify_error(a.get('error', ''))}) and was repaired: "
            f"{_head(' '.join(a.get('error', '').split()), 300)}" for i, a in enumerate(attempts, 1)]


def _evaluator_output(node: Node, limit: int) -> str:
    """The evaluator's error and output tails, each cut to `limit` characters."""
    parts = [f"## Evaluator output (each part cut to at most {limit} characters)"]
    parts.append(f"Error: {_head(node.error.strip(), limit)}" if node.error else "Error: none")
    for key in _SHOWN_ARTIFACTS:
        text = node.artifacts.get(key, "").strip()
        if text:
            parts.append(f"### {key.replace('_', ' ')}\n```text\n{_tail(text, limit)}\n```")
    others = [f"{k}: {' '.join(str(v).split())[:300]}" for k, v in sorted(node.artifacts.items())
              if k not in _HIDDEN_ARTIFACTS]
    if others:
        parts.append("Other artifacts: " + _head("; ".join(others), limit))
    if len(parts) == 2 and not node.error:
        parts.append("(no output captured)")
    return "\n".join(parts)


def _head(text: str, limit: int) -> str:
    """The first `limit` characters of `text`, saying how much was cut."""
    return text if len(text) <= limit else f"{text[:limit]} [... {len(text) - limit} characters cut]"


def _tail(text: str, limit: int) -> str:
    """The last `limit` characters of `text`, saying how much was cut."""
    return text if len(text) <= limit else f"[... {len(text) - limit} characters cut]\n{text[-limit:]}"
