"""ACE's Reflector turn: the prompt's marker and the answer's form, shared by the reflector stage
(stages/reflector.py) and the LLM simulator (infra/llm_sim/ace_reflector.py).

The prompt starts with REFLECTOR_MARKER, quotes the playbook under PLAYBOOK_HEADER and each
generator trajectory under a ``### Case <id>`` line with ``Input:``, ``Output:``, ``Score:``
and ``Feedback:`` lines. The answer is one JSON object (fenced or bare), ACE's reflector fields:

    {"error_identification": "...", "root_cause_analysis": "...", "key_insight": "...",
     "bullet_tags": [{"id": "conv-1", "tag": "helpful" | "harmful" | "neutral"}]}

>>> body = '{"key_insight": "State factors.", "bullet_tags": [{"id": "c-1", "tag": "harmful"}]}'
>>> answer = 'Thinking.\\n```json\\n' + body + '\\n```'
>>> parse_reflection(answer)
Reflection(insight='State factors.', diagnosis='', tags=[('c-1', 'harmful')])
>>> parse_reflection("no JSON here")
Traceback (most recent call last):
...
evoforge.infra.evolve_block.EditError: the reflector's answer holds no JSON object
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from evoforge.infra.evolve_block import EditError
from evoforge.infra.failure_reasons import MALFORMED, NO_EDIT

REFLECTOR_MARKER = "# ACE reflector: diagnose the generator's trajectories"
PLAYBOOK_HEADER = "## Playbook the generator used"
CASE_PREFIX = "### Case "
TAGS = ("helpful", "harmful", "neutral")
_FENCED = re.compile(r"```(?:json)?\s*\n(.*?)\n```", re.S)


@dataclass
class Reflection:
    """What the Reflector concluded: the insight for the curator, and a tag per bullet it judged."""

    insight: str
    diagnosis: str = ""
    tags: list[tuple[str, str]] = field(default_factory=list)


def is_reflector_prompt(prompt: str) -> bool:
    return prompt.lstrip().startswith(REFLECTOR_MARKER)


def parse_reflection(answer: str) -> Reflection:
    """The reflection in `answer`; EditError naming what is wrong with it (its `reason`: NO_EDIT
    for an answer without JSON, MALFORMED for JSON that is not a reflection)."""
    fenced = _FENCED.search(answer)
    text = fenced.group(1) if fenced else answer[answer.find("{"):answer.rfind("}") + 1]
    if not text.strip():
        raise EditError("the reflector's answer holds no JSON object", NO_EDIT)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EditError(f"the reflector's JSON does not parse ({exc.msg} at line {exc.lineno})",
                        MALFORMED) from None
    if not isinstance(data, dict):
        raise EditError("the reflector's JSON is not an object", MALFORMED)
    insight = data.get("key_insight")
    if not isinstance(insight, str):
        raise EditError("the reflector's JSON has no 'key_insight' text", MALFORMED)
    tags: list[tuple[str, str]] = []
    for entry in data.get("bullet_tags") or []:
        judged = isinstance(entry, dict) and isinstance(entry.get("id"), str) and entry.get("tag") in TAGS
        if judged and entry["tag"] != "neutral":
            tags.append((entry["id"], entry["tag"]))
    diagnosis = " ".join(str(data.get(k, "")).strip() for k in ("error_identification",
                                                                "root_cause_analysis"))
    return Reflection(insight.strip(), diagnosis.strip(), tags)


def render_reflection(reflection: Reflection, preface: str = "") -> str:
    """An answer in the form parse_reflection reads (the simulator's)."""
    body = {"error_identification": reflection.diagnosis, "root_cause_analysis": "",
            "key_insight": reflection.insight,
            "bullet_tags": [{"id": i, "tag": t} for i, t in reflection.tags]}
    return f"{preface}\n```json\n{json.dumps(body)}\n```\n".lstrip()
