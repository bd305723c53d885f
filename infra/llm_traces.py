"""LLM calls as MLflow traces: each call a record on the event loop, written later by the tracker.

A stage run collects the calls it makes (`recording`, entered by the engine around each stage
run; `note_call` in the code that calls the backend). The records travel on the item to the
commit, which hands them to the tracker with the candidate's MLflow run; the tracker's thread
writes them (`write_traces`, many in one transaction) straight to the tracking store it was
given. MLflow's own tracing exporter is not used: it writes to the process-wide tracking URI,
not to the run's store, and one trace at a time.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evoforge.infra.llm.authorship import answer_kind
from evoforge.infra.llm.types import Completion, LLMBackend

if TYPE_CHECKING:
    from mlflow.entities import Span
    from mlflow.tracing.client import TracingClient
    from mlflow.tracking import MlflowClient

# Who wrote an answer (infra/llm/authorship.py decides): a real LLM, evoforge's simulator, the
# offline proposer; "unknown" when the call failed before any answer came back.
AUTHORS = ("llm", "simulated", "offline", "unknown")
_WHO = {"llm": "LLM", "simulated": "LLM simulator, not a real LLM",
        "offline": "offline backend, no LLM", "unknown": "failed, no answer"}
_LINKS_PER_CALL = 100  # MLflow links at most this many traces to a run per request


@dataclass(frozen=True)
class LLMCall:
    """One call to the run's LLM backend: what was asked, what came back, its cost and timing."""

    stage: str  # the stage that made the call: research, analyze, debug, judge, reflect
    messages: list[dict[str, str]]
    answer: str
    backend: str  # openai (any OpenAI-compatible server) or offline
    model: str
    author: str  # one of AUTHORS
    tokens_in: int
    tokens_out: int
    started_at: float  # wall clock (time.time()) when the call began
    seconds: float
    attempts: int = 1
    error: str | None = None  # the LLMError's message: the call failed

    @property
    def who(self) -> str:
        """Who answered, in words, e.g. "offline backend, no LLM"."""
        return _WHO.get(self.author, self.author)


class CallLog:
    """The calls one stage run made, in order."""

    def __init__(self, stage: str) -> None:
        self.stage = stage
        self.calls: list[LLMCall] = []


_CURRENT: ContextVar[CallLog | None] = ContextVar("evoforge_llm_calls", default=None)


@contextmanager
def recording(stage: str) -> Iterator[CallLog]:
    """Collect the calls made inside the block (tasks it starts included) into a `CallLog`."""
    log = CallLog(stage)
    token = _CURRENT.set(log)
    try:
        yield log
    finally:
        _CURRENT.reset(token)


def note_call(messages: list[dict[str, str]], *, answer: str, backend: str, model: str, author: str,
              tokens_in: int, tokens_out: int, started_at: float, seconds: float, attempts: int = 1,
              error: str | None = None) -> LLMCall | None:
    """Record one call in the current `recording` block (None outside one: nobody traces it)."""
    log = _CURRENT.get()
    if log is None:
        return None
    call = LLMCall(log.stage, messages, answer, backend, model, author, tokens_in, tokens_out,
                   started_at, seconds, attempts, error)
    log.calls.append(call)
    return call


def note_calls(calls: list[LLMCall]) -> None:
    """Add calls recorded elsewhere (a batched call made for several items) to the current block."""
    log = _CURRENT.get()
    if log is not None:
        log.calls.extend(calls)


def _inputs_outputs(call: LLMCall) -> tuple[dict[str, Any], dict[str, Any] | None]:
    inputs: dict[str, Any] = {"messages": call.messages}
    if call.error is not None:
        return inputs, None
    if call.author == "offline":  # not a chat completion: the offline backend's text
        return inputs, {"answer": call.answer, "author": call.who}
    return inputs, {"model": call.model, "choices": [{"index": 0, "message": {
        "role": "assistant", "content": call.answer}}],
        "usage": {"prompt_tokens": call.tokens_in, "completion_tokens": call.tokens_out}}


def trace_spans(calls: list[LLMCall], tags: dict[str, str]) -> list[Span]:
    """Each call as a trace of one root span: the messages in, the answer out, tokens, model and
    timing; the trace tagged `tags` and who answered."""
    from mlflow.entities import Span, SpanType
    from mlflow.tracing.constant import SpanAttributeKey, TraceTagKey
    from mlflow.tracing.utils import encode_span_id, generate_mlflow_trace_id_from_otel_trace_id

    spans = []
    for call in calls:
        trace_id = generate_mlflow_trace_id_from_otel_trace_id(uuid.uuid4().int)
        start_ns = int(call.started_at * 1e9)
        name = f"{call.stage} ({call.who})"
        inputs, outputs = _inputs_outputs(call)
        # few tags: the store writes each on its own (~0.5 ms); the model is the span's attribute
        trace_tags = {TraceTagKey.TRACE_NAME: name, "purpose": call.stage, "author": call.author, **tags}
        attributes: dict[str, Any] = {
            SpanAttributeKey.REQUEST_ID: trace_id,
            SpanAttributeKey.SPAN_TYPE: SpanType.TOOL if call.author == "offline" else SpanType.CHAT_MODEL,
            SpanAttributeKey.INPUTS: inputs, SpanAttributeKey.OUTPUTS: outputs,
            SpanAttributeKey.CHAT_USAGE: {"input_tokens": call.tokens_in, "output_tokens": call.tokens_out,
                                          "total_tokens": call.tokens_in + call.tokens_out},
            SpanAttributeKey.MODEL: call.model,
            "evoforge.stage": call.stage, "evoforge.backend": call.backend, "evoforge.author": call.author,
            "evoforge.answered_by": call.who, "evoforge.attempts": call.attempts,
            "evoforge.seconds": call.seconds,
            **{f"{SpanAttributeKey.TRACE_TAG_PREFIX}{k}": v for k, v in trace_tags.items()},
        }
        if call.error is not None:
            attributes["evoforge.error"] = call.error
        spans.append(Span.from_dict({
            "trace_id": trace_id, "span_id": encode_span_id(uuid.uuid4().int >> 64),
            "parent_span_id": None, "name": name, "start_time_unix_nano": start_ns,
            "end_time_unix_nano": start_ns + int(call.seconds * 1e9), "events": [], "links": [],
            "status": {"code": "STATUS_CODE_ERROR" if call.error else "STATUS_CODE_OK",
                       "message": call.error or ""},
            "attributes": {k: json.dumps(v) for k, v in attributes.items()},
        }))
    return spans


def write_traces(tracing: TracingClient, client: MlflowClient, experiment_id: str,
                 batches: list[tuple[str | None, list[Span]]]) -> int:
    """Write the traces of `batches` (a run id, or None, and its traces' spans) in one transaction,
    each linked to its run; returns how many were written.

    The spans alone make the traces (name, tags, previews, tokens, state come from the root span),
    so a batch costs one write plus one link per run, not a write per trace."""
    spans = [span for _, run_spans in batches for span in run_spans]
    if not spans:
        return 0
    tracing.log_spans(experiment_id, spans)
    for run_id, run_spans in batches:
        if run_id is None:
            continue
        ids = [span.trace_id for span in run_spans]
        for i in range(0, len(ids), _LINKS_PER_CALL):
            client.link_traces_to_run(ids[i:i + _LINKS_PER_CALL], run_id)
    return len(spans)


def trace_call(llm: LLMBackend, messages: list[dict[str, str]], started_at: float, seconds: float,
               completion: Completion | None = None, error: str | None = None) -> None:
    """Note a call to `llm` (answered, or failed with `error`) for its MLflow trace; outside a
    recording (a stage run, the plan agent's round) nothing is noted."""
    if completion is None:
        offline = llm.name == "offline"
        note_call(messages, answer="", backend=llm.name, model=llm.model,
                  author="offline" if offline else "unknown", tokens_in=0, tokens_out=0,
                  started_at=started_at, seconds=seconds, error=error)
        return
    note_call(messages, answer=completion.text, backend=completion.backend, model=completion.model,
              author=answer_kind(completion), tokens_in=completion.tokens_in,
              tokens_out=completion.tokens_out, started_at=started_at, seconds=seconds,
              attempts=completion.attempts)
