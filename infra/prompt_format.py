"""The shape of the prompts that non-LLM answerers (offline proposer, simulator) read back.

The stages write these markers (research, reflection, analysis, judge, plan); the offline backend and
the LLM simulator find the current program, the requested answer form and the computed facts
through them, and the stages parse the structured parts of every answer with the parsers here.
Real LLMs just read the prose.
"""

from __future__ import annotations

import re
from typing import NamedTuple

CURRENT_HEADER = "## Current "  # then the artifact's noun: "## Current program", "## Current prompt"
PROGRAM_HEADER = CURRENT_HEADER + "program"
FORMAT_PREFIX = "Answer format:"
FORMAT_DIFF = "diff"
FORMAT_REWRITE = "rewrite"

_HEADER_RE = re.escape(CURRENT_HEADER) + r"[A-Za-z]+\b[^\n]*\n+```"
_PROGRAM_RE = re.compile(_HEADER_RE + r"[a-zA-Z0-9_+-]*\n(.*?)\n```", re.DOTALL)
_FORMAT_RE = re.compile(re.escape(FORMAT_PREFIX) + r"\s*(\w+)")


def render_program_section(code: str, language: str = "python", noun: str = "program") -> str:
    """The prompt section that carries the artifact to be improved, headed by what it is.

    >>> render_program_section("Be brief.", "prompt", "prompt").splitlines()[:2]
    ['## Current prompt', '```prompt']
    """
    return f"{CURRENT_HEADER}{noun}\n```{language}\n{code.rstrip()}\n```\n"


def search_replace_example(noun: str) -> str:
    """One SEARCH/REPLACE block, as the prompts show the diff answer form."""
    return (f"<<<<<<< SEARCH\nexact lines from the current {noun}\n=======\n"
            f"the lines that replace them\n>>>>>>> REPLACE\n")


def extract_program(prompt: str) -> str | None:
    """The current artifact quoted in a prompt (under its `## Current <noun>` header), or None."""
    match = _PROGRAM_RE.search(prompt)
    return match.group(1) + "\n" if match else None


def requested_format(prompt: str) -> str:
    """The answer form the prompt asks for: FORMAT_DIFF (default) or FORMAT_REWRITE."""
    match = _FORMAT_RE.search(prompt)
    if match and match.group(1).lower() == FORMAT_REWRITE:
        return FORMAT_REWRITE
    return FORMAT_DIFF


# Reflection prompts (staleness policy "reflective") and their one-line decision.
REFLECT_MARKER = "Reflection decision:"
DECISIONS = ("keep", "patch", "drop")
_DECISION_RE = re.compile(
    r"^\s*\**\s*decision\s*\**\s*:\s*\**\s*(" + "|".join(DECISIONS) + r")\b", re.I | re.M
)


def is_reflection_prompt(prompt: str) -> bool:
    """True for a prompt that asks to keep, patch or drop a stale candidate."""
    return REFLECT_MARKER in prompt


def render_decision(decision: str) -> str:
    """The decision line of a reflection answer."""
    return f"Decision: {decision}"


def parse_decision(answer: str) -> str | None:
    """The decision of a reflection answer (keep / patch / drop), or None when it has none."""
    match = _DECISION_RE.search(answer)
    return match.group(1).lower() if match else None


# Analysis prompts (the Analyzer): a computed comparison the prompt carries, and the structured
# report it asks for. The offline analyzer and the simulator read the comparison back.
ANALYSIS_MARKER = "Analysis request:"
COMPARISON_HEADER = "## Computed comparison"
# "Claims" last: an older answer (or a model that leaves it out) parses as before, with no claims
ANALYSIS_SECTIONS = ("What changed", "What happened", "Why it likely happened", "What to try next",
                     "Lessons", "Claims")
EXTRA_SECTION = "Other notes"  # text of an answer outside the asked-for sections
MAX_LESSONS = 3
_NO_LESSON = re.compile(r"^(?:none|n/?a|no (?:\w+ )?lessons?)(?:$|\s*[.!,:;(\u2013\u2014-])", re.I)
_ALIASES = {  # the headings a sloppy answer may use for each section, lower case
    "what changed": 0, "the change": 0,
    "what happened": 1, "outcome": 1,
    "why it likely happened": 2, "why it happened": 2, "why": 2, "likely cause": 2,
    "what to try next": 3, "what next": 3, "next steps": 3, "try next": 3,
    "lessons": 4, "lesson": 4, "lessons learned": 4, "lessons learnt": 4,
    "claims": 5, "causal claims": 5, "claim": 5,
}
_HEADING_RE = re.compile(
    r"^[ \t]*(?P<hashes>#{1,6})?[ \t]*(?P<bold>\*\*|__)?[ \t]*(?:\d+[.)][ \t]*)?(?P<name>"
    + "|".join(sorted(map(re.escape, _ALIASES), key=len, reverse=True))
    + r")\b[ \t]*(?:\*\*|__)?[ \t]*(?P<colon>:)?[ \t]*(?:\*\*|__)?[ \t]*(?P<rest>.*)$", re.I)
_OTHER_HEADING_RE = re.compile(r"^[ \t]*(#{1,6})[ \t]+\S")
_BULLET_RE = re.compile(r"^[ \t]*(?:[-*+\u2022]|\d+[.)])[ \t]+(.*)$")
_MOTIVATION_RE = re.compile(r"^Motivation:[ \t]*(.*)$", re.M)


def is_analysis_prompt(prompt: str) -> bool:
    """True for a prompt that asks the Analyzer for a report on one evaluated candidate."""
    return re.search("^" + re.escape(ANALYSIS_MARKER), prompt, re.M) is not None


# Batched analysis (`analyze.batch`): several candidates' requests in one prompt, one report each.
CANDIDATE_LINE = "=== Candidate {} ==="  # opens each candidate's request in a batched prompt
REPORT_LINE = "=== Report {} ==="  # opens each candidate's report in the answer
_CANDIDATE_RE = re.compile(r"^=== Candidate (\S+) ===[ \t]*$", re.M)
_REPORT_RE = re.compile(r"^[ \t#*]*=== Report (\S+) ===[ \t*]*$", re.M)


def join_analysis_requests(requests: list[tuple[str, str]]) -> str:
    """One prompt asking for a report on each (node id, request text), in order.

    >>> prompt = join_analysis_requests([("a1", "Analysis request: one"), ("b2", "Analysis request: two")])
    >>> [node for node, _ in split_analysis_requests(prompt)]
    ['a1', 'b2']
    """
    head = (f"This message holds {len(requests)} analysis requests, each under a line "
            f"`{CANDIDATE_LINE.format('<id>')}`. Answer each one in turn: start its report with the "
            f"line `{REPORT_LINE.format('<id>')}` (the same id), then write the report that request "
            f"asks for.")
    return "\n\n".join([head, *(f"{CANDIDATE_LINE.format(node)}\n{text}" for node, text in requests)])


def split_analysis_requests(prompt: str) -> list[tuple[str, str]]:
    """The (node id, request text) pairs of a batched prompt; empty for a single request."""
    marks = list(_CANDIDATE_RE.finditer(prompt))
    return [(m.group(1), prompt[m.end():marks[i + 1].start() if i + 1 < len(marks) else len(prompt)].strip())
            for i, m in enumerate(marks)]


def join_reports(reports: list[tuple[str, str]]) -> str:
    """An answer to a batched prompt: each (node id, report) under its report line."""
    return "\n\n".join(f"{REPORT_LINE.format(node)}\n{text.strip()}" for node, text in reports) + "\n"


def split_reports(answer: str) -> dict[str, str]:
    """The reports of an answer to a batched prompt, by node id (a node it skipped is missing).

    >>> split_reports(join_reports([("a1", "## What happened\\nIt rose."), ("b2", "none")]))["b2"]
    'none'
    """
    marks = list(_REPORT_RE.finditer(answer))
    return {m.group(1): answer[m.end():marks[i + 1].start() if i + 1 < len(marks) else len(answer)].strip()
            for i, m in enumerate(marks)}


def render_comparison(facts: dict[str, str]) -> str:
    """The computed comparison section: one `- key: value` line per fact."""
    return "\n".join([COMPARISON_HEADER, *(f"- {key}: {value}" for key, value in facts.items())]) + "\n"


def parse_comparison(prompt: str) -> dict[str, str]:
    """The facts of a prompt's computed comparison section (empty when it has none)."""
    at = prompt.find(COMPARISON_HEADER)
    if at < 0:
        return {}
    facts: dict[str, str] = {}
    for line in prompt[at + len(COMPARISON_HEADER):].lstrip("\n").splitlines():
        if not line.startswith("- "):
            break
        key, _, value = line[2:].partition(": ")
        facts[key.strip()] = value.strip()
    return facts


def extract_motivation(prompt: str) -> str:
    """The first `Motivation:` line of a prompt ('' when it has none)."""
    match = _MOTIVATION_RE.search(prompt)
    return match.group(1).strip() if match else ""


def _heading(line: str) -> tuple[int, int, str] | None:
    """(section index, heading level, text after the heading) when `line` heads a section."""
    match = _HEADING_RE.match(line)
    if match is None:
        return None
    rest = match.group("rest").strip()
    if rest and not (match.group("hashes") or match.group("colon")):
        return None  # a sentence that happens to start with "What happened ...", not a heading
    level = len(match.group("hashes") or "") or 6  # bold or plain headings: any `#` heading ends them
    inline = rest if match.group("colon") and re.search(r"\w", rest) else ""  # "Lessons: none"
    return _ALIASES[match.group("name").lower()], level, inline


def parse_analysis(answer: str) -> tuple[dict[str, str], list[str]]:
    """The sections of an Analyzer answer (every asked-for one, '' when missing; text outside
    them under EXTRA_SECTION) and its lessons (at most MAX_LESSONS; 'none' gives none).

    >>> sections, lessons = parse_analysis("Sure.\\n## What happened\\nIt got faster.\\n"
    ...                                    "**Lessons:**\\n- Cache results.\\n- none")
    >>> sections["What happened"], sections["What changed"], sections["Other notes"], lessons
    ('It got faster.', '', 'Sure.', ['Cache results.'])
    """
    buffers: dict[str, list[str]] = {name: [] for name in (*ANALYSIS_SECTIONS, EXTRA_SECTION)}
    current, level, fenced = EXTRA_SECTION, 0, False
    for line in answer.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        found = None if fenced or line.lstrip().startswith("```") else _heading(line)
        if found is not None:
            index, level, rest = found
            current = ANALYSIS_SECTIONS[index]
            if rest:
                buffers[current].append(rest)
            continue
        other = None if fenced else _OTHER_HEADING_RE.match(line)
        if other is not None and current != EXTRA_SECTION and len(other.group(1)) <= level:
            current = EXTRA_SECTION  # a section of the answer's own: kept, outside the asked-for ones
        buffers[current].append(line)
    sections = {name: "\n".join(lines).strip() for name, lines in buffers.items()}
    return sections, parse_lessons(sections["Lessons"])


def parse_lessons(text: str) -> list[str]:
    """The lessons of a Lessons section: its bullets (or its paragraphs when it has none)."""
    lines = text.splitlines()
    items: list[str] = []
    if any(_BULLET_RE.match(line) for line in lines):
        for line in lines:
            bullet = _BULLET_RE.match(line)
            if bullet is not None:
                items.append(bullet.group(1))
            elif items and line.strip() and line[:1].isspace():
                items[-1] += " " + line.strip()  # a bullet's continuation line
    else:
        items = re.split(r"\n[ \t]*\n", text)
    lessons: list[str] = []
    for item in items:
        lesson = " ".join(item.split()).strip("*_ ")
        if lesson and not _NO_LESSON.match(lesson) and lesson.lower() not in map(str.lower, lessons):
            lessons.append(lesson[:500])
    return lessons[:MAX_LESSONS]


# Judge prompts (the optional LLM judge) and their one-line score.
JUDGE_MARKER = "Judge request:"
_SCORE_RE = re.compile(
    r"^[ \t>*_`-]*score[ \t*_`]*[:=][ \t*_`]*(\d+(?:\.\d+)?)[ \t*_`]*(?:/[ \t]*(\d+(?:\.\d+)?))?",
    re.I | re.M)


def is_judge_prompt(prompt: str) -> bool:
    """True for a prompt that asks the judge to score a candidate's code."""
    return re.search("^" + re.escape(JUDGE_MARKER), prompt, re.M) is not None


def render_judge_score(points: int) -> str:
    """The score line of a judge answer."""
    return f"Score: {points}/10"


def parse_judge_score(answer: str) -> float | None:
    """The judge's score scaled to [0, 1] (the last `Score: N/10` line), or None when it has
    none or it is out of range.

    >>> parse_judge_score("Clean code.\\nScore: 7/10"), parse_judge_score("Score: 12/10")
    (0.7, None)
    """
    matches = list(_SCORE_RE.finditer(answer))
    if not matches:
        return None
    points, out_of = float(matches[-1].group(1)), float(matches[-1].group(2) or 10)
    if out_of <= 0 or not 0 <= points <= out_of:
        return None
    return round(points / out_of, 6)


# Plan prompts (the plan agent): the branches in their slots, and one decision line per slot.
PLAN_MARKER = "Plan request:"
_PLAN_SLOT_RE = re.compile(r"^### Slot (\d+) \((B\d+)(, KILLED)?\): (.*)$", re.M)


class PlanSlot(NamedTuple):
    """One slot of a plan prompt, as the simulator reads it back."""

    slot: int
    branch_id: str
    hypothesis: str
    killed: bool


def is_plan_prompt(prompt: str) -> bool:
    """True for a prompt that asks the plan agent to revise the research plan's slots."""
    return re.search("^" + re.escape(PLAN_MARKER), prompt, re.M) is not None


def render_plan_slot(slot: PlanSlot) -> str:
    """The heading of one slot in a plan prompt.

    >>> render_plan_slot(PlanSlot(2, "B5", "try boosting", True))
    '### Slot 2 (B5, KILLED): try boosting'
    """
    killed = ", KILLED" if slot.killed else ""
    return f"### Slot {slot.slot} ({slot.branch_id}{killed}): {' '.join(slot.hypothesis.split())}"


def parse_plan_slots(prompt: str) -> list[PlanSlot]:
    """The slots a plan prompt shows, in order."""
    return [PlanSlot(int(m.group(1)), m.group(2), m.group(4).strip(), m.group(3) is not None)
            for m in _PLAN_SLOT_RE.finditer(prompt)]


# Text artifacts (kind `text`): the program section's fence language tells a prompt from code, and
# the research prompt carries the task's feedback on the parent's failed cases, one line each.
FEEDBACK_HEADER = "## Feedback on the parent's cases"
_LANGUAGE_RE = re.compile(_HEADER_RE + r"([a-zA-Z0-9_+-]*)\n")
_FEEDBACK_RE = re.compile("^" + re.escape(FEEDBACK_HEADER) + r"[^\n]*\n", re.M)


def program_language(prompt: str) -> str | None:
    """The fence language of the prompt's program section ('' when untagged), or None without one.

    >>> program_language(render_program_section("Be brief.", "prompt")), program_language("Hi.")
    ('prompt', None)
    """
    match = _LANGUAGE_RE.search(prompt)
    return match.group(1) if match else None


def render_feedback_section(lines: list[str]) -> str:
    """The section that carries the feedback on the parent's cases, one line each."""
    return "\n".join([FEEDBACK_HEADER, *(line.strip() for line in lines if line.strip())]) + "\n"


def extract_feedback(prompt: str) -> list[str]:
    """The non-empty lines of the prompt's feedback section (up to the next `## ` line), or [].

    >>> extract_feedback("Intro.\\n" + render_feedback_section(["[val-3] Too long.", ""]) + "## Next\\nx")
    ['[val-3] Too long.']
    """
    match = _FEEDBACK_RE.search(prompt)
    if match is None:
        return []
    lines: list[str] = []
    for line in prompt[match.end():].splitlines():
        if line.startswith("## "):
            break
        if line.strip():
            lines.append(line.strip())
    return lines
