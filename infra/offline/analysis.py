"""Answers to analysis prompts from the non-LLM answerers, in the Analyzer's structured form.

The offline analyzer writes a mechanical report from the prompt's computed comparison: no
judgement of its own, and a lesson only where the comparison shows a clear effect (an error
class that any program would meet the same way); it makes no causal claims (it cannot tell which
hunk did what). The simulator writes the same facts plus seeded, plausible explanations and
lessons, so that runs over it exercise the lesson write-back, and one causal claim per candidate
whose change has hunks and a score that moved: a hunk drawn by its seeded rng is credited with the
observed parent→child change (so it is sometimes wrong on purpose: verification is for that).
"""

from __future__ import annotations

import random
import re

from evoforge.infra.claims_format import claim_line
from evoforge.infra.prompt_format import (
    ANALYSIS_SECTIONS,
    extract_motivation,
    join_reports,
    parse_comparison,
    split_analysis_requests,
)

OFFLINE_ANALYZER = "Offline analyzer (no LLM)"
NO_OFFLINE_CLAIMS = ("none (the offline analyzer makes no causal claims: it sees what the comparison "
                     "shows, not which hunk caused it)")
_HUNK_LINE_RE = re.compile(r"^### Hunk (\d+)\b", re.M)
_DELTA_RE = re.compile(r"^([+-]?\d+\.?\d*(?:[eE][+-]?\d+)?)")

_CAUSES = {  # error class (its start) -> (why, what to try next, lesson or None)
    "timeout": ("The program ran past the evaluation's time limit, so it produced no score.",
                "Cut the work per evaluation (fewer iterations, a cheaper step), then retry the idea.",
                "A change that makes the program run past the evaluation's time limit scores nothing: "
                "keep the running time well under the limit."),
    "out of memory": ("The program went over the sandbox's memory limit.",
            "Use less memory (smaller buffers, no large intermediate copies), then retry the idea.",
            "A change that goes over the sandbox's memory limit is killed and scores nothing: keep "
            "memory use bounded."),
    "killed by signal": ("The evaluation process was killed by a signal (a resource limit or a crash).",
               "Find which limit it hit (CPU, memory, file size) and stay under it.",
               "A change that trips a sandbox resource limit is killed and scores nothing."),
    "invalid result": ("The evaluator did not get a usable, finite value of the objective.",
                "Make sure the program always returns a finite value of the objective.",
                "A program must return a finite value of the objective; anything else counts as a "
                "failure, however good the idea."),
    "exception": ("The program raised an exception during evaluation (see the error in the prompt).",
                  "Fix the error shown in the prompt, then retry the idea.", None),
    "crashed": ("The program exited without writing a result.", "Fix the crash, then retry the idea.",
                None),
    "program exited": ("The program called sys.exit during evaluation.",
                       "Remove the exit, then retry.", None),
    "pruned": ("Its first validation cases scored too low to beat the pool's best, so the "
               "evaluation was stopped early.", "Try a different direction from the parent.", None),
    "rolled back": ("It looked better on a prefix of the validation cases, but the full evaluation did "
               "not confirm it.", "Treat the idea as unproven; test it on the full evaluation.", None),
}
_SIMULATED_LESSONS = (
    "Small, targeted edits make the effect of each change easy to attribute: change one thing at a time.",
    "Tuning numeric parameters gives small gains; large jumps in score need structural changes.",
    "An improvement in the objective can hide a regression in another metric: check every metric.",
    "Extra work per evaluation must pay for itself in score, or it slows the whole search down.",
    "Refining the current best pays off more often than restarting from a weak parent.",
    "Keeping the program's structure simple makes later edits less likely to break it.",
    "Most failures come from edge cases of the input: guard them explicitly.",
    "A larger step size speeds up early progress but costs precision near the optimum.",
)
_SIMULATED_WHY = (
    "The change shifts the balance between exploration and precision in the program.",
    "The edit touches the part of the program that dominates the objective.",
    "The change interacts with the program's initial layout more than its motivation suggests.",
    "Numeric settings near their current values have a small, noisy effect on the score.",
)
_SIMULATED_NEXT = (
    "Try the same idea with a smaller change, to see whether the effect is monotone.",
    "Combine this change with the pool's best program.",
    "Change the program's structure instead of its constants.",
    "Revisit the parent and move in the opposite direction.",
)


def offline_analysis(prompt: str, preface: str = OFFLINE_ANALYZER) -> str:
    """The offline analyzer's report on the candidate of an analysis prompt (a report on each,
    under its report line, for a batched prompt)."""
    batch = split_analysis_requests(prompt)
    if batch:
        return join_reports([(node, offline_analysis(part, preface)) for node, part in batch])
    facts = parse_comparison(prompt)
    cause = _cause(facts)
    why = cause[0] if cause else ("No judgement offline: the offline analyzer sees what the comparison "
                                  "shows, not why the change had that effect.")
    lesson = cause[2] if cause else None
    body = {
        "What changed": _what_changed(prompt, facts),
        "What happened": _what_happened(facts),
        "Why it likely happened": why,
        "What to try next": cause[1] if cause else _next_by_verdict(facts),
        "Lessons": f"- {lesson}" if lesson else "none",
        "Claims": NO_OFFLINE_CLAIMS,
    }
    opening = f"{preface}: a mechanical report computed from the prompt's comparison; it makes no judgement."
    return _render(opening, body)


def simulated_analysis(prompt: str, rng: random.Random, preface: str) -> str:
    """The simulator's report: the facts of the prompt, seeded explanations and 1-2 lessons (a
    report on each candidate of a batched prompt)."""
    batch = split_analysis_requests(prompt)
    if batch:
        return join_reports([(node, simulated_analysis(part, rng, preface)) for node, part in batch])
    facts = parse_comparison(prompt)
    cause = _cause(facts)
    lessons = [cause[2]] if cause and cause[2] else []
    lessons += rng.sample(_SIMULATED_LESSONS, rng.randint(1, 2))
    body = {
        "What changed": _what_changed(prompt, facts),
        "What happened": _what_happened(facts),
        "Why it likely happened": cause[0] if cause else rng.choice(_SIMULATED_WHY),
        "What to try next": (cause[1] + " " if cause else "") + rng.choice(_SIMULATED_NEXT),
        "Lessons": "\n".join(f"- {lesson}" for lesson in lessons[:3]),
        "Claims": simulated_claims(prompt, facts, rng),
    }
    return _render(f"{preface}: a seeded analysis, not a real LLM's.", body)


def simulated_claims(prompt: str, facts: dict[str, str], rng: random.Random) -> str:
    """The simulator's Claims section: a hunk drawn by `rng` credited with the observed change vs
    the parent ('none' when the prompt shows no hunks or the score did not move)."""
    count = len(set(_HUNK_LINE_RE.findall(prompt)))
    delta = _DELTA_RE.match(facts.get("delta vs parent", ""))
    if not count or delta is None or float(delta.group(1)) == 0:
        return "none"
    change = float(delta.group(1))
    return "- " + claim_line(rng.randint(1, count), change > 0, abs(change))


def _render(opening: str, body: dict[str, str]) -> str:
    return opening + "\n\n" + "\n\n".join(f"## {name}\n{body[name]}" for name in ANALYSIS_SECTIONS) + "\n"


def _cause(facts: dict[str, str]) -> tuple[str, str, str | None] | None:
    kind = facts.get("error class", "none")
    return next((cause for start, cause in _CAUSES.items() if kind.startswith(start)), None)


def _what_changed(prompt: str, facts: dict[str, str]) -> str:
    motivation = extract_motivation(prompt)
    said = f"Its motivation: {motivation}" if motivation and motivation != "n/a" else "It gave no motivation."
    return f"The diff changes {facts.get('diff size', 'an unknown number of lines')}. {said}"


def _what_happened(facts: dict[str, str]) -> str:
    status, kind = facts.get("status", "unknown"), facts.get("error class", "none")
    score = facts.get("score", "none")
    if kind == "none":
        objective = facts.get("objective", "the objective").split(" (")[0]
        lines = [f"It was {status}: {objective} = {score}."]
    elif kind == "pruned":
        lines = [f"Its evaluation was stopped early (pruned): {score}."]
    else:
        error = facts.get("error", "no error message")
        lines = [f"It {'failed' if status == 'failed' else f'ended {status}'} ({kind}): {error}"]
    for label, who in (("parent", "its parent"), ("pool best", "the pool's best")):
        verdict = facts.get(f"verdict vs {label}")
        if verdict is None or verdict.startswith("n/a"):
            continue
        relation = "equal to" if verdict == "equal" else f"{verdict} than"
        lines.append(f"It is {relation} {who} ({facts.get(label, '?')}; delta "
                     f"{facts.get(f'delta vs {label}', '?')}).")
    moved = facts.get("metric deltas vs parent")
    if moved and kind == "none":
        lines.append(f"Metric deltas vs its parent: {moved}.")
    return " ".join(lines)


def _next_by_verdict(facts: dict[str, str]) -> str:
    if facts.get("verdict vs pool best") == "better" or facts.get("pool best") == "this candidate":
        return "Build on this candidate: it beats the pool's best."
    if facts.get("verdict vs parent") == "better":
        return "Keep the idea, and try it on the pool's best program."
    return "Revert this change, or try a different direction from the parent."
