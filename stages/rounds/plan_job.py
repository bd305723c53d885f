"""The plan agent as a round job: every `plan.every` rounds it reads the leaderboard and the
health of each branch and keeps, refreshes or replaces each slot (stages/rounds/plan_agent.py); the
head applies the new plan version (a pool version bump; the sinks write research_plan.md, the
run metadata and MLflow). It reads the run's task, config and LLM, given to it as plain arguments,
and never keeps a plan of its own: the current plan is the head's (`head.state.rounds.plan`)."""

from __future__ import annotations

import logging

from evoforge.evaluators.task import Task
from evoforge.infra.config import RunConfig
from evoforge.infra.llm.types import LLMBackend
from evoforge.infra.llm_traces import recording
from evoforge.infra.nodes import Node
from evoforge.stages.rounds.branches import KillCriteria, Plan, branch_health, initial_plan, plan_md
from evoforge.stages.rounds.plan_agent import build_leaderboard, replan
from evoforge.stages.rounds.schedule import RoundJob, RunHead

log = logging.getLogger("evoforge.plan")


def plan_enabled(task: Task, cfg: RunConfig) -> bool:
    """The plan agent runs when configured, by default on gated (pilot) tasks."""
    enabled = cfg.plan.enabled
    return task.gated if enabled is None else enabled


def kill_criteria(cfg: RunConfig) -> KillCriteria:
    """When the plan agent kills a branch (`plan.*`)."""
    p = cfg.plan
    return KillCriteria(stall_rounds=p.stall_rounds, max_invalid_rate=p.max_invalid_rate,
                        min_candidates=p.min_candidates)


def rounds_of(nodes: list[Node], size: int) -> dict[str, int]:
    """The round each finished candidate finished in: its place in finishing order // size."""
    finished = sorted((n for n in nodes if n.origin != "seed" and n.status.terminal),
                      key=lambda n: (n.evaluated_at or n.created_at, n.id))
    return {n.id: i // size for i, n in enumerate(finished)}


def start_plan(task: Task, cfg: RunConfig, head: RunHead, seeds: list[str]) -> Plan:
    """The first plan of a run (version 1, round 0), applied by the head before anything runs."""
    plan = initial_plan(task.description, cfg.plan.slots, kill_criteria(cfg), seeds)
    health = branch_health(plan, [], lambda n: 0, 0, task.search_level, task.direction == "maximize")
    head.plan(plan, plan_md(plan, health, [plan]))
    return plan


def plan_job(task: Task, cfg: RunConfig, llm: LLMBackend, head: RunHead, size: int,
             fresh: list[str]) -> RoundJob:
    """The plan agent, every `plan.every` rounds."""

    async def run(round_no: int) -> None:
        nodes: list[Node] = head.state.all_nodes()
        rounds = rounds_of(nodes, size)
        level, maximize = task.search_level, task.direction == "maximize"
        current = head.state.rounds.plan
        assert current is not None
        asked = None if llm.name == "offline" else llm
        with recording("plan") as calls:  # the plan agent's LLM call, traced on the parent run
            plan, health, completion = await replan(
                current, nodes, llm=asked, round=round_no, round_of=lambda n: rounds.get(n.id, round_no),
                level=level, maximize=maximize, task_description=task.description,
                leaderboard_rows=build_leaderboard(nodes, level, maximize, limit=15),
                temperature=cfg.llm.temperature, max_tokens=cfg.llm.max_tokens,
                fresh_hypotheses=fresh, limits=kill_criteria(cfg))
        text = plan_md(plan, health, [*head.state.rounds.plans, plan])
        retired = [b.id for b, _ in plan.retired if b.id not in {x.id for x, _ in current.retired}]
        log.info("plan v%d at round %d by %s: %s; retired %s", plan.version, round_no, plan.author,
                 ", ".join(f"{d.slot}:{d.action}" for d in plan.decisions), retired or "none")

        cost = (0.0, 0, 0) if completion is None else (completion.seconds, completion.tokens_in,
                                                        completion.tokens_out)
        head.plan(plan, text, calls.calls, cost)  # the plan agent's LLM calls: traces on the parent run

    return RoundJob("plan", cfg.plan.every, run)
