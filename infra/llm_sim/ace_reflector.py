"""The simulator as ACE's Reflector: it tags the bullet each conversion case relied on.

For each trajectory of a reflector prompt (infra/ace_format.py: ``### Case <id>`` with ``Input:``
and ``Score:`` lines) whose input asks a conversion (playbook_model.QUESTION_RE), the bullet that
states that unit pair's factor (playbook_model.stated_factors over each bullet's line, the first
bullet stating it wins, as the simulated task model reads the playbook) is tagged ``helpful`` when
the case scored 1 and ``harmful`` when it scored less; a bullet is tagged once per answer (its
first case decides). The key insight names the pairs of the failed cases whose factor no bullet
states ("the playbook lacks the factor for pound -> kg"), or says every case passed. Nothing is
drawn at random: the same prompt gets the same answer.

>>> prompt = ("# ACE reflector: diagnose the generator's trajectories\\n## Playbook the generator used\\n"
...           "[conv-1] helpful=0 harmful=0 :: 1 mile = 1.609 km\\n"
...           "### Case train-1\\nInput: Convert 12 miles to km.\\nOutput: 19.308 km\\nScore: 1\\n"
...           "### Case train-2\\nInput: Convert 3 pounds to kg.\\nOutput: I do not know\\nScore: 0\\n")
>>> answer = reflector_answer(prompt)
>>> answer.splitlines()[0]
'Simulated reflector (evoforge llm-sim, no real LLM): 2 cases, 1 failed.'
>>> from evoforge.infra.ace_format import parse_reflection
>>> reflection = parse_reflection(answer)
>>> reflection.insight, reflection.tags
('The playbook lacks the factor for pound -> kg.', [('conv-1', 'helpful')])
"""

from __future__ import annotations

import re

from evoforge.infra.ace_format import CASE_PREFIX, PLAYBOOK_HEADER, Reflection, render_reflection
from evoforge.infra.llm_sim.playbook_model import QUESTION_RE, stated_factors, unit_name

PREFACE = "Simulated reflector (evoforge llm-sim, no real LLM)"
_BULLET_ID = re.compile(r"^\[([A-Za-z0-9_.-]+)\]")
_FIELD = re.compile(r"^(Input|Score):\s*(.*)$", re.M)


def reflector_answer(prompt: str) -> str:
    """The simulated reflection on the trajectories the prompt quotes."""
    owners = _factor_owners(prompt)
    tags: dict[str, str] = {}
    lacking: list[str] = []
    cases = prompt.split(f"\n{CASE_PREFIX}")[1:]
    failed = 0
    for case in cases:
        fields = dict(_FIELD.findall(case))
        score = _number(fields.get("Score", "0"))
        failed += score < 1
        question = QUESTION_RE.search(fields.get("Input", ""))
        if question is None:
            continue
        pair = (unit_name(question.group("unit")), unit_name(question.group("to")))
        owner = owners.get(pair)
        if owner is not None:
            tags.setdefault(owner, "helpful" if score >= 1 else "harmful")
        elif score < 1 and f"{pair[0]} -> {pair[1]}" not in lacking:
            lacking.append(f"{pair[0]} -> {pair[1]}")
    insight = (f"The playbook lacks the factor for {', '.join(lacking)}." if lacking
               else "Every case passed; keep the bullets that served." if not failed
               else "The failed cases used a factor the playbook states; check that bullet.")
    reflection = Reflection(insight, f"{failed} of {len(cases)} cases failed.", list(tags.items()))
    return render_reflection(reflection, f"{PREFACE}: {len(cases)} cases, {failed} failed.")


def _factor_owners(prompt: str) -> dict[tuple[str, str], str]:
    """The bullet that states each unit pair's factor, first one first, in the quoted playbook."""
    start = prompt.find(PLAYBOOK_HEADER)
    end = prompt.find(f"\n{CASE_PREFIX}", start)
    owners: dict[tuple[str, str], str] = {}
    for line in prompt[start:end if end >= 0 else None].splitlines():
        found = _BULLET_ID.match(line.strip())
        if found:
            for pair in stated_factors(line.split("::", 1)[-1]):
                owners.setdefault(pair, found.group(1))
    return owners


def _number(text: str) -> float:
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return 0.0
