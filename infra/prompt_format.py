"""The shape of a research prompt that non-LLM answerers (offline proposer, simulator) read back.

The researcher writes these markers; the offline proposer and the LLM simulator find the
current program and the requested answer form through them. Real LLMs just read the prose.
"""

from __future__ import annotations

import re

PROGRAM_HEADER = "## Current program"
FORMAT_PREFIX = "Answer format:"
FORMAT_DIFF = "diff"
FORMAT_REWRITE = "rewrite"

_PROGRAM_RE = re.compile(
    re.escape(PROGRAM_HEADER) + r"[^\n]*\n+```[a-zA-Z0-9_+-]*\n(.*?)\n```", re.DOTALL
)
_FORMAT_RE = re.compile(re.escape(FORMAT_PREFIX) + r"\s*(\w+)")


def render_program_section(code: str, language: str = "python") -> str:
    """The prompt section that carries the program to be improved."""
    return f"{PROGRAM_HEADER}\n```{language}\n{code.rstrip()}\n```\n"


def extract_program(prompt: str) -> str | None:
    """The current program quoted in a research prompt, or None if there is none."""
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
