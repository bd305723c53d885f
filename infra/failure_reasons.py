"""Why a proposal or a candidate failed: one reason from a documented set, recorded on its node.

`evoforge status`, status.json (`failures_by_reason`) and report.md count failures by these
reasons; the set and what each means is documented in docs/guide/watching.md (`MEANING` holds the
same lines). A reason says where the failure came from (the answer, the server, the guard, the
evaluation), so a user can tell a model that writes no edit from a server that timed out at a
glance. Every failed, rejected or stale node carries exactly one.

    >>> sorted(MEANING) == sorted(ALL)
    True
"""

from __future__ import annotations

# the answer came back but holds no usable change
NO_EDIT = "no edit found"  # no SEARCH/REPLACE block, fenced block or FILE section (or an unterminated one)
FROZEN = "frozen region changed"  # the edit touched text outside the evolvable region
SYNTAX = "syntax error"  # the edited artifact does not parse
TRUNCATED = "truncated at max_tokens"  # finish_reason 'length', also after the one retry with more room
EMPTY = "empty"  # an empty answer, or an edit that changes nothing
UNCHANGED = EMPTY
MALFORMED = "malformed answer"  # an edit that cannot be applied as written, or not a chat completion
# the answer never came
SERVER_ERROR = "server error"  # HTTP 4xx/5xx, refused connection, after the retries
TIMEOUT = "timeout"  # no answer within the endpoint's timeout
BUDGET = "budget"  # not sent: the money or token budget would be crossed, or the prompt does not fit
PROMPT_TOO_LONG = "prompt over the context window"  # not sent: the prompt leaves too little room to answer
# stopped before or by evaluation
GUARD = "guard"  # the static check, the quick test or GEPA's minibatch gate stopped it
DUPLICATE = "duplicate"  # the same (or nearly the same) candidate was evaluated already
STALE = "stale"  # the staleness policy dropped it
EVALUATION = "evaluation failed"  # the evaluator ran and reported an error (the candidate's fault)
INTERNAL = "internal"  # an evoforge step failed (see run.log): a bug to report

ALL = (NO_EDIT, FROZEN, SYNTAX, TRUNCATED, EMPTY, MALFORMED, SERVER_ERROR, TIMEOUT, BUDGET,
       GUARD, DUPLICATE, STALE, EVALUATION, INTERNAL, PROMPT_TOO_LONG)

# one line each: what the reason means (docs/guide/watching.md and report.md say the same)
MEANING = {
    NO_EDIT: "the answer holds no edit: no SEARCH/REPLACE block, fenced block or `### FILE:` section, "
             "an unterminated one, or (ACE's reflector) no JSON object",
    FROZEN: "the edit changed what may not change: text outside the EVOLVE block, or a file the task "
            "does not list as evolvable",
    SYNTAX: "the edited program does not parse (Python)",
    TRUNCATED: "the answer was cut off at `llm.max_tokens` (finish_reason `length`), also after the "
               "one retry with more room",
    EMPTY: "an empty answer, an empty code block, or an edit that changes nothing",
    MALFORMED: "an edit that cannot be applied as written (a SEARCH text not found, or found twice; a "
               "block without its divider; a playbook delta or a reflection that is not valid JSON), "
               "or an answer that is not a chat completion or is over `llm.max_answer_chars`",
    SERVER_ERROR: "the LLM server answered with an error (HTTP 4xx/5xx) or refused the connection, "
                  "after the retries",
    TIMEOUT: "no answer within the endpoint's timeout",
    BUDGET: "the call was not sent: the money or token budget would have been crossed, or the "
            "prompt does not fit the endpoint's context window",
    PROMPT_TOO_LONG: "the call was not sent: the prompt leaves fewer than 64 tokens of the endpoint's "
                     "context window for the answer",
    GUARD: "stopped before its evaluation: the static check, the quick test, a malformed knob "
           "declaration, or GEPA's minibatch gate (not above its parent)",
    DUPLICATE: "the same or nearly the same program was evaluated already (a repeat is served that "
               "result)",
    STALE: "dropped by the staleness policy (too many pool versions old, or its ancestor rolled back)",
    EVALUATION: "the evaluator ran and reported an error, or the task model's run of a prompt failed: "
                "the candidate's fault",
    INTERNAL: "an evoforge step failed on this candidate: a bug to report (run.log has the traceback)",
}

ANSWER_HEAD_CHARS = 300  # how much of an unusable answer run.log shows


def answer_head(text: str, limit: int = ANSWER_HEAD_CHARS) -> str:
    """The start of an answer on one line, for run.log (what a model wrote that could not be used).

    >>> answer_head("Sure!\\n\\nHere is   the code", limit=12)
    'Sure! Here i...'
    """
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "..."
