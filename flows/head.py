"""The head: the one place a stage's result changes the run.

Stages return results; the engine hands each finished piece of work here, on the flow's event
loop. The head applies it to the in-memory run state (flows/run_state.py: the pool and its
version, the sampler, the history, the counters, the case order) and appends one event to the
sink hub (stages/sinks/): it never writes a file, a database row or an MLflow record itself.
What the events say is recorded off the event loop, in batches, by the sinks.

A speculative release puts the engineer's snapshot of a node into the pool; the final result is
folded into that same object. A rollback removes it, and what was derived from it is handled as
the staleness policy says (`cascade`): items in flight are marked (their next stage's door
decides), and descendants already in the pool are kept and re-ranked (`full`, `reflective`) or
dropped (`guarded`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from evoforge.flows.run_state import CASE_ORDER_META, POOL_VERSION_META, RunState
from evoforge.infra import failure_reasons
from evoforge.infra.llm.types import LLMBackend
from evoforge.infra.nodes import EVALUATED, FAILED, ROLLED_BACK, SPECULATIVE, STALE, Node
from evoforge.stages.population.history import NEW_BEST, ROLLBACK, SPECULATIVE_BEST
from evoforge.stages.population.item import Item
from evoforge.stages.population.speculation import confirmed, descends_from
from evoforge.stages.population.staleness_data import StalenessData
from evoforge.stages.population.stats import reason_of
from evoforge.stages.promote import ticket_of
from evoforge.stages.promotion_data import PromotionData
from evoforge.stages.rounds.branches import Plan
from evoforge.stages.rounds.promotion import Promoted, PromotionTicket, summarize
from evoforge.stages.rounds.records import NEW_WINNER, PLANS_META, PROMOTIONS_META
from evoforge.stages.sinks.base import Event, EventKind
from evoforge.stages.sinks.hub import SinkHub
from evoforge.stages.sinks.model_usage import gain_over_parent

log = logging.getLogger("evoforge.head")


class Head:
    """Applies results to the run state and emits one event for each."""

    def __init__(self, state: RunState, hub: SinkHub, staleness_policy: str = "full",
                 llm: LLMBackend | None = None) -> None:
        self.state, self.hub, self.policy, self.llm = state, hub, staleness_policy, llm
        self._winner = self._current_winner()
        self._rounds: dict[int, tuple[str | None, dict[int, Promoted]]] = {}  # open promotion rounds

    @property
    def pool(self):  # noqa: ANN201 - the run's pool
        return self.state.pool

    # --- a candidate's trip ----------------------------------------------------------------------
    def proposed(self, item: Item, to: str) -> None:
        """A designed candidate leaves a checkpointing stage for `to`: remember it (a restart
        sends it on to `to`, never back through the stages it has passed)."""
        node = item.node
        assert node is not None
        node.next_stage = to
        self.state.nodes[node.id] = node
        self._emit(EventKind.PROPOSED, node, prompt=item.prompt, answer=item.answer)

    def released(self, item: Item, snapshot: Node) -> bool:
        """Put a node into the pool on its validation-prefix score (speculative); returns True on
        a new best. `snapshot` (the engineer's copy at release) becomes the pool's member, and the
        final result is folded into that same object when it arrives; a release that arrives
        after the final result, or for a node already in the pool, is void."""
        if item.status is None or item.status.terminal or self.pool.get(snapshot.id) is not None:
            if item.node is not None and item.status is not None and item.status.terminal:
                item.node.speculative_at = None
            return False
        assert snapshot.status == SPECULATIVE
        item.node = snapshot
        self.state.nodes[snapshot.id] = snapshot
        new_best = self.pool.add(snapshot)
        self.state.sampler.on_node_added(snapshot, self.pool)
        if new_best:
            self.state.history.record(self.pool.v, SPECULATIVE_BEST, snapshot)
        self.state.stats.speculative_released += 1
        self._emit(EventKind.RELEASED, snapshot, new_best=new_best)
        return new_best

    def evaluated(self, item: Item) -> str | None:
        """The evaluating stage is done with the item: a released node whose evaluation failed
        leaves the pool now (a repair may release it again), and what derives from it is marked
        as after a rollback; returns ROLLBACK then, else None."""
        node = item.node
        pooled = self.pool.get(node.id) if node is not None else None
        if node is None or pooled is None or pooled.status != SPECULATIVE or node.status != FAILED:
            return None
        was_best = self.pool.remove(pooled)
        self.state.sampler.on_node_removed(pooled, self.pool)
        if was_best:
            self.state.history.record(self.pool.v, ROLLBACK, pooled)
        self.state.nodes[node.id] = node
        self._emit(EventKind.CHANGED, node, meta={POOL_VERSION_META: self.pool.v})
        self.cascade(node)
        return ROLLBACK

    def finished(self, item: Item) -> str | None:
        """A candidate's trip ended: into the pool, or out of it (a rollback), counted and recorded;
        a promotion item's result rescores its pooled node in place (`_promoted`). Returns
        NEW_BEST, ROLLBACK or None."""
        node = item.node
        assert node is not None
        ticket = ticket_of(item)
        if ticket is not None:
            return self._promoted(ticket, node)
        pool, state = self.pool, self.state
        outcome = None
        pooled = pool.get(node.id)
        reference = pool.best_confirmed()
        if reference is not None and reference.id == node.id:
            reference = None
        if pooled is not None and pooled.status == SPECULATIVE:  # fold the result into the member
            vars(pooled).update(vars(node))
            item.node = node = pooled
            outcome = self._settle_speculation(node)
        elif node.status == EVALUATED:
            seed_value = pool.value(node)
            if node.origin == "seed" and not pool.nodes and seed_value is not None:
                pool.judge_scale = abs(seed_value) or 1.0  # fixed before any node ranks
            if pool.add(node):
                outcome = NEW_BEST
                state.history.record(pool.v, NEW_BEST, node)
            state.sampler.on_node_added(node, pool)
        meta: dict[str, Any] = {POOL_VERSION_META: pool.v}
        if state.case_order is not None and node.case_scores:
            state.case_order.update(node.case_scores, reference.case_scores if reference else {},
                                    pool.maximize)
            meta[CASE_ORDER_META] = state.case_order.state()
        if node.reason is None:  # a stage that gave none (a plug-in's): the bucket its outcome says
            node.reason = reason_of(node)
        state.nodes[node.id] = node
        state.stats.count(node)
        gain = gain_over_parent(node, state.nodes.get(node.parent_id or ""), pool.level, pool.maximize)
        if self.llm is not None and node.origin != "seed":
            self.llm.observe(node.model, gain)  # a router learns which model pays off
        self._emit(EventKind.FINISHED, node, new_best=outcome == NEW_BEST, prompt=item.prompt,
                   answer=item.answer, llm_calls=item.llm_calls, owned=dict(item.owned), meta=meta,
                   gain=gain)
        if outcome == ROLLBACK:
            self.cascade(node)
        return outcome

    def _settle_speculation(self, node: Node) -> str | None:
        """Confirm a released node (it stays) or take it out of the pool: rolled back when its
        full evaluation disagreed, failed when the evaluation itself failed."""
        pool, state = self.pool, self.state
        if node.status == EVALUATED and confirmed(node, pool):
            state.stats.confirmed += 1
            new_best = pool.rescore(node)
            state.sampler.on_node_rescored(node, pool)
            if new_best:
                state.history.record(pool.v, NEW_BEST, node)
                return NEW_BEST
            return None
        if node.status == EVALUATED:
            StalenessData.of(node).add(
                f"speculation rolled back (prefix {node.score_partial}, full {node.score_full})")
            node.status = ROLLED_BACK
        elif node.status != FAILED:  # pruned at a later checkpoint, or cancelled: not confirmed
            StalenessData.of(node).add(
                f"speculation rolled back ({node.status}: {node.error or 'no full score'})")
            node.status = ROLLED_BACK
        was_best = pool.remove(node)
        state.sampler.on_node_removed(node, pool)
        if was_best:
            state.history.record(pool.v, ROLLBACK, node)
        return ROLLBACK

    def cascade(self, rolled_back: Node) -> tuple[list[Node], list[Node]]:
        """What was derived from a rolled-back node and is in the pool, handled as the staleness
        policy says: `guarded` drops it (status stale, out of the pool), `full` and `reflective`
        keep it and re-rank it (its own evaluation stands; the sampler forgets the ancestor).
        Returns (dropped, re-ranked). Items in flight are the engine's to mark."""
        pool, state = self.pool, self.state
        lineage = state.lineage
        derived = [n for n in pool.ranked() if n.id != rolled_back.id
                   and descends_from(n.parent_id, rolled_back.id, lineage)]
        dropped, reranked = [], []
        for node in derived:
            if self.policy == "guarded":
                was_best = pool.remove(node)
                state.sampler.on_node_removed(node, pool)
                node.status, node.reason = STALE, failure_reasons.STALE
                StalenessData.of(node).add(
                    f"guarded: dropped from the pool (ancestor {rolled_back.id} was rolled back)")
                state.stats.recount_dropped(node)
                if was_best:
                    state.history.record(pool.v, ROLLBACK, node)
                dropped.append(node)
            else:
                if pool.rescore(node):
                    state.history.record(pool.v, NEW_BEST, node)
                state.sampler.on_node_rescored(node, pool)
                StalenessData.of(node).add(
                    f"{self.policy}: kept in the pool, re-ranked (ancestor {rolled_back.id} was rolled back)")
                reranked.append(node)
            self._emit(EventKind.CHANGED, node, meta={POOL_VERSION_META: pool.v})
        if derived:
            log.info("rollback of %s: %d pool descendants dropped, %d re-ranked (%s)", rolled_back.id,
                     len(dropped), len(reranked), self.policy)
        return dropped, reranked

    # --- the round jobs' decisions -----------------------------------------------------------
    def plan(self, plan: Plan, text: str, calls: Sequence[Any] = (),
             cost: tuple[float, int, int] = (0.0, 0, 0)) -> None:
        """A new plan version: the pool version moves; its LLM cost is the run's."""
        state = self.state
        state.rounds.plans.append(plan)
        self.pool.v += 1
        seconds, tokens_in, tokens_out = cost
        state.stats.llm_s += seconds
        state.stats.tokens_in += tokens_in
        state.stats.tokens_out += tokens_out
        self._emit(EventKind.PLAN, None, payload=(plan, text, list(calls)),
                   meta={POOL_VERSION_META: self.pool.v, PLANS_META: state.rounds.plans_state()})

    def _promoted(self, ticket: PromotionTicket, node: Node) -> str | None:
        """A promotion item's full score onto its pooled node, rescored in place (counted as a
        promotion, not as an evaluation); the round is recorded with its last item. Returns
        NEW_BEST when the rescore moved the pool's best, else None."""
        pool, state = self.pool, self.state
        result = ticket.result or Promoted(node.id, node.score_pilot or 0.0, None,  # the stage failed
                                           node.error or "promotion failed", 0.0, 0.0)
        if ticket.round not in self._rounds:
            winner = pool.winner()
            self._rounds[ticket.round] = (winner.id if winner is not None else None, {})
        self._rounds[ticket.round][1][ticket.index] = result
        pooled, outcome = pool.get(result.node_id), None
        if pooled is not None:  # else rolled back meanwhile: nothing to fold the score into
            pooled.score_full, PromotionData.of(pooled).round = result.full, ticket.round
            pooled.eval_s += result.seconds
            pooled.eval_cpu_s += result.cpu_s
            if result.error:
                pooled.artifacts["promotion_error"] = result.error[:2000]
            state.stats.promotions += 1
            state.stats.eval_s += result.seconds
            state.stats.eval_cpu_s += result.cpu_s
            if pool.rescore(pooled):
                outcome = NEW_BEST
                state.history.record(pool.v, NEW_BEST, pooled)
            state.sampler.on_node_rescored(pooled, pool)
            self._emit(EventKind.CHANGED, pooled, meta={POOL_VERSION_META: pool.v})
        if len(self._rounds[ticket.round][1]) == ticket.size:
            self._close_round(ticket.round)
        return outcome

    def _close_round(self, round_no: int) -> None:
        """Every item of the round is in: its summary; a change of winner moves the pool version."""
        pool, state = self.pool, self.state
        before, by_index = self._rounds.pop(round_no)
        results = [by_index[i] for i in sorted(by_index)]
        ids = {r.node_id for r in results}
        earlier = [n for n in pool.nodes if PromotionData.peek(n).round is not None and n.id not in ids]
        now = [n for r in results if (n := pool.get(r.node_id)) is not None]
        summary = summarize(round_no, results, earlier + now, pool.maximize)
        state.rounds.promotions.append(summary)
        after = pool.winner()
        if after is not None and before != after.id:
            pool.v += 1
            state.history.record(pool.v, NEW_WINNER, after)
        promoted = {n.id: n.copy() for n in pool.nodes if PromotionData.peek(n).round is not None}
        self._emit(EventKind.PROMOTION, None, payload=(summary, promoted),
                   meta={POOL_VERSION_META: pool.v, PROMOTIONS_META: state.rounds.promotions_state()})
        log.info("promotion %d: %s; spearman %s; noisy %s", round_no,
                 ", ".join(f"{r.node_id} pilot {r.pilot:.4g} -> full {r.full}" for r in results),
                 summary.spearman, list(summary.noisy) or "none")

    def record(self, kind: EventKind, payload: Any, eval_s: float = 0.0, eval_cpu_s: float = 0.0) -> None:
        """A run-level record (the final report's held-out evaluations: FINAL, whose payload no
        selection ever reads), with the evaluation seconds it cost."""
        self.state.stats.eval_s += eval_s
        self.state.stats.eval_cpu_s += eval_cpu_s
        self._emit(kind, None, payload=payload)

    # --- events ------------------------------------------------------------------------------
    def _current_winner(self) -> tuple[str, str] | None:
        best = self.pool.best if self.pool.level == "full" else self.pool.winner()
        return None if best is None else (best.id, best.code)

    def _emit(self, kind: EventKind, node: Node | None, **fields: Any) -> None:
        winner = self._current_winner()
        best = None
        if winner != self._winner:
            self._winner = winner
            current = self.pool.best if self.pool.level == "full" else self.pool.winner()
            best = current.copy() if current is not None else None
        self.hub.emit(Event(kind, node=node.copy() if node is not None else None, pool_version=self.pool.v,
                            evaluations=self.state.stats.evaluations, best=best, **fields))
