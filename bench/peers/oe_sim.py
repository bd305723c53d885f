"""Let evoforge's LLM simulator answer OpenEvolve's prompts: a request rewrite for a counting lane.

The simulator edits only a program quoted in evoforge's own prompt section; to anything else it
answers as a task model, so OpenEvolve would get no usable edit from it. This rewrite copies the
program of OpenEvolve's "# Current Program" block into evoforge's program section and asks for a
diff, so the simulator answers with the same SEARCH/REPLACE mutations (and the same latency) it
gives evoforge, in the diff format that OpenEvolve parses. Only for --sim runs.
"""

from __future__ import annotations

import re
from typing import Any

from evoforge.infra.prompt_format import FORMAT_DIFF, FORMAT_PREFIX, render_program_section

_CURRENT = re.compile(r"# Current Program\n```[a-zA-Z0-9_+-]*\n(.*?)\n```", re.DOTALL)


def openevolve_to_sim(body: dict[str, Any]) -> dict[str, Any]:
    """The chat request with evoforge's program section appended to its last user message."""
    messages = body.get("messages") or []
    for message in reversed(messages):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            found = _CURRENT.search(message["content"])
            if found:
                message["content"] += ("\n\n" + render_program_section(found.group(1) + "\n")
                                       + f"\n{FORMAT_PREFIX} {FORMAT_DIFF}\n")
            break
    return body
