"""No evaluation twice: complete evaluation results by (normalised code, level, params), and the
ones in flight, so that a repeated program is served the recorded result instead of evaluated.

The engineer claims a key before it evaluates. A key already recorded is served at once; a key
in flight makes the claimant wait for that evaluation and then serves its result. Only complete
results are recorded: a full evaluation that scored or failed (a failed quick test included) for
a reason of the program's own. A failure that says nothing about the program — a time limit that
a busy machine may have caused, a kill from outside, a sandbox that lost the evaluation — is
not: a repeat of it is evaluated again (`transient`).
A pruned speculative evaluation is not: its verdict depends on the pool's best at the time, not
on the key alone, so a repeat of it is evaluated (and the waiting claimant takes over the key).
The memo is rebuilt from the node database on resume, so a resumed run knows what it evaluated.

    >>> import asyncio
    >>> from evoforge.infra.nodes import EVALUATED, Node
    >>> memo = RepeatMemo()
    >>> key = EvalKey.of("x = 1\\n", "full", {})
    >>> asyncio.run(memo.claim(key)) is None  # nobody evaluated it: the caller does
    True
    >>> memo.finish(key, Node(id="a", run_id="r", code="x = 1\\n", status=EVALUATED,
    ...                       score_full=2.0, evaluated_at=1.0), "full")
    >>> asyncio.run(memo.claim(EvalKey.of("x = 1  # again\\n", "full", {}))).node_id
    'a'
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from evoforge.evaluators.task import Task
from evoforge.infra.failure_reasons import DUPLICATE
from evoforge.infra.nodes import EVALUATED, FAILED, REJECTED, ROLLED_BACK, Node
from evoforge.stages.engineer_data import EngineerData
from evoforge.stages.population.pool import normalized_code_hash
from evoforge.stages.population.repeat_data import RepeatData
from evoforge.stages.tuning.param_space import ParamSpace, SpaceError, parse_space

_ERROR_CHARS = 300


@dataclass(frozen=True)
class EvalKey:
    """What makes two evaluations the same: the normalised code, the level, the knob values."""

    code_hash: str
    level: str
    params: str  # the knob values as canonical JSON ("{}": none)

    @classmethod
    def of(cls, code: str, level: str, params: Mapping[str, Any] | None) -> EvalKey:
        return cls(normalized_code_hash(code), level,
                   json.dumps(dict(params or {}), sort_keys=True, default=repr))


@dataclass(frozen=True)
class Recorded:
    """A complete evaluation's result, as a repeat of it is served it."""

    node_id: str
    status: str  # evaluated | failed | rolled_back: how that node ended
    level: str
    score: float | None = None
    error: str | None = None

    @classmethod
    def of(cls, node: Node, level: str, score: float | None = None) -> Recorded | None:
        """The node's result at `level` (`score`: at the key's knob values; default: the node's
        score there), or None when it is not a complete result (pruned, not evaluated, a repeat)."""
        if not node.was_evaluated or RepeatData.peek(node).repeat_of is not None:
            return None
        score = node.score(level) if score is None else score
        if node.status in (EVALUATED, ROLLED_BACK) and score is not None:
            return cls(node.id, str(node.status), level, score=score)
        if node.status == FAILED and not transient(node.error):
            return cls(node.id, str(node.status), level, error=node.error)
        return None

    def summary(self) -> str:
        """The result in a few words, e.g. "evaluated, full score 0.93"."""
        if self.error is None:
            return f"{self.status}, {self.level} score {self.score:.6g}"
        error = self.error if len(self.error) <= _ERROR_CHARS else self.error[:_ERROR_CHARS] + "…"
        return f"{self.status}: {error}"


class RepeatMemo:
    """Recorded results and in-flight evaluations, by `EvalKey` (one per run, on the event loop)."""

    def __init__(self) -> None:
        self._done: dict[EvalKey, Recorded] = {}
        self._running: dict[EvalKey, asyncio.Future[None]] = {}

    def __len__(self) -> int:
        return len(self._done)

    def recorded(self, key: EvalKey) -> Recorded | None:
        """The recorded result of `key`, or None."""
        return self._done.get(key)

    def in_flight(self, key: EvalKey) -> bool:
        return key in self._running

    async def claim(self, key: EvalKey) -> Recorded | None:
        """The recorded result of `key`, waiting for its evaluation when one is in flight; or
        None: the key is the caller's to evaluate, and it must `finish` it (complete or not)."""
        while True:
            if key in self._done:
                return self._done[key]
            running = self._running.get(key)
            if running is None:
                self._running[key] = asyncio.get_running_loop().create_future()
                return None
            await asyncio.wait({running})  # a cancelled waiter leaves the future alone

    def finish(self, key: EvalKey, node: Node | None, level: str, score: float | None = None) -> None:
        """Record the result `node` holds for `key` when complete (None or incomplete: nothing
        recorded, the key is free again) and wake whoever waits for it. Only the claimant or a
        seed (evaluated again on a rerun: the task may have been fixed) finishes a key, so a
        newer result replaces an older one."""
        record = Recorded.of(node, level, score) if node is not None else None
        if record is not None:
            self._done[key] = record
        running = self._running.pop(key, None)
        if running is not None and not running.done():
            running.set_result(None)

    @classmethod
    def rebuild(cls, nodes: Iterable[Node], task: Task) -> RepeatMemo:
        """The memo of a resumed run: every complete evaluation of its nodes at the task's search
        level with the knob defaults of their code, oldest first (the first evaluation of a
        program is the one its repeats name)."""
        memo, level = cls(), task.search_level
        for node in sorted(nodes, key=lambda n: n.evaluated_at or n.created_at):
            if not node.was_evaluated or RepeatData.peek(node).repeat_of is not None:
                continue
            try:
                params = knob_space(node.code, task).defaults()
            except SpaceError:  # a malformed knob declaration: it failed before any evaluation
                continue
            key = EvalKey.of(node.code, level, params)
            if key not in memo._done:  # a run from before this memo may hold a program twice
                memo.finish(key, node, level, EngineerData.peek(node).score_default if params else None)
        return memo


_TRANSIENT = ("timed out after", "killed by SIGKILL", "killed by SIGTERM",
              "the warm sandbox lost the evaluation")
_PREFIX = re.compile(r"^(?:quick test: )?(?:case \S+ failed: )?")


def transient(error: str | None) -> bool:
    """True for a failure that may not happen again to the same program: the wall-clock limit on a
    loaded machine, a kill from outside the program (the OOM killer, a stop), a lost sandbox.

    >>> transient("timed out after 10.0 s"), transient("case 7 failed: timed out after 2.0 s")
    (True, True)
    >>> transient("evaluator raised ZeroDivisionError: division by zero"), transient(None)
    (False, False)
    """
    return bool(error) and _PREFIX.sub("", error, count=1).startswith(_TRANSIENT)


def knob_space(code: str, task: Task) -> ParamSpace:
    """The knobs of `code` the engineer evaluates it with (knobs are Python only); raises
    SpaceError for a malformed declaration."""
    return parse_space(code) if task.is_python else ParamSpace()


def serve_repeat(node: Node, record: Recorded) -> Node:
    """The engineer's copy of a repeated program, served `record` and not evaluated: status
    rejected, `repeat_of` naming the node whose evaluation it repeats, the result in its error
    and in `artifacts["repeated_result"]`; no score, so nothing ranks or counts it twice."""
    node.status, node.failed_stage = REJECTED, "engineer"
    RepeatData.of(node).repeat_of = record.node_id
    node.reason = DUPLICATE
    node.error = (f"repeat of node {record.node_id} ({record.summary()}): served from that "
                  "evaluation, not evaluated again")
    node.artifacts["repeated_result"] = json.dumps(
        {"node": record.node_id, "status": record.status, "level": record.level,
         "score": record.score, "error": record.error})
    return node


def duplicate_evaluations(nodes: Iterable[Node]) -> int:
    """How many evaluations of the run repeated a program an earlier node had evaluated
    (nodes with equal normalised code that both ran an evaluation, minus one per program)."""
    seen: set[str] = set()
    repeats = 0
    for node in nodes:
        if node.was_evaluated:
            code_hash = normalized_code_hash(node.code)
            repeats += code_hash in seen
            seen.add(code_hash)
    return repeats
