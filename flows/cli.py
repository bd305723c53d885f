"""The `evoforge` command line: run, status, leaderboard, best, report, tasks, stages, algorithms,
plugins, kinds, llm-sim, bench, cognition, deploy, serve-llm, doctor."""

from __future__ import annotations

import argparse
import asyncio
import atexit
import difflib
import logging
import os
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

from evoforge.flows import prefect_env  # noqa: F401  (Prefect settings before Prefect loads)
from evoforge.flows.algorithms_cli import add_algorithms_parser, run_algorithms
from evoforge.flows.bench_cli import add_bench_parser, run_bench
from evoforge.flows.cognition_cli import add_cognition_parser, run_cognition
from evoforge.flows.deploy_cli import DeployArgError, add_deploy_parser, run_deploy
from evoforge.flows.doctor_cli import add_doctor_parser, run_doctor
from evoforge.flows.plugins_cli import add_plugins_parser, run_plugins
from evoforge.flows.serve_llm_cli import add_serve_llm_parser, run_serve_llm
from evoforge.flows.stages_cli import add_stages_parser, run_stages
from evoforge.infra.config import RunConfig
from evoforge.infra.disk_full import DiskFull, RunFolderFull, disk_full_error
from evoforge.infra.llm.circuit import LLMOutage
from evoforge.infra.llm_sim import cli_args as sim_args

USER_ERROR, ENGINE_ERROR, INTERRUPTED = 2, 1, 130
LLM_DOWN = 3  # the LLM server stayed down past llm.circuit.give_up_s: run again to resume
DISK_FULL = 75  # EX_TEMPFAIL: the run folder's disk filled; free space and run again to resume


class SimArgError(ValueError):
    """Bad arguments to `evoforge llm-sim`."""


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line naming the flag (exit 2) instead of the usage block;
    `--help` is unchanged, and every sub-command's parser is one of these too."""

    def error(self, message: str) -> NoReturn:
        self.exit(USER_ERROR, f"evoforge: error: {_one_line(message, self)}\n")


def _option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every flag of `parser` and of its sub-commands' parsers."""
    found: list[str] = []
    for action in parser._actions:
        found += action.option_strings
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found += _option_strings(sub)
    return found


def _one_line(message: str, parser: argparse.ArgumentParser) -> str:
    """argparse's message, led by the flag it is about, with a "did you mean" where one is close."""
    message = " ".join(message.split()).removeprefix("argument ")
    command = parser.prog.removeprefix("evoforge").strip()
    hint = f" (see evoforge {command} --help)" if command else " (see evoforge --help)"
    choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
    unknown = re.match(r"unrecognized arguments: (\S+)", message)
    if choice:
        close = difflib.get_close_matches(choice.group(1), re.findall(r"'([^']*)'", choice.group(2)), n=1)
    elif unknown:
        close = difflib.get_close_matches(unknown.group(1).split("=")[0], _option_strings(parser), n=1)
    else:
        close = []
    return message + (f" (did you mean '{close[0]}'?)" if close else hint)


def _parse_workers(text: str) -> dict[str, int]:
    """`name=count` pairs, one per stage (`evoforge stages` lists a run's stages; a name the run
    does not have is refused when the pipeline is built)."""
    out: dict[str, int] = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        if not name.strip().isidentifier() or not value.strip().isdigit() or int(value) < 1:
            raise argparse.ArgumentTypeError(
                f"takes stage=count pairs, a count of at least 1 for each stage (e.g. "
                f"research=8,engineer=2,analyze=4), got '{part}'")
        out[name.strip()] = int(value)
    return out


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got '{text}'")
    return int(text)


def _run_target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN",
                        help="a run folder, or a task name (its run in the workspace)")
    parser.add_argument("--workspace", default=RunConfig().workspace,
                        help="where task-name runs live (default evoforge-runs)")


def _version() -> str:
    try:
        return f"evoforge {metadata.version('evoforge')}"
    except metadata.PackageNotFoundError:
        return "evoforge (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="evoforge", description=__doc__)
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="evolve a task's program")
    run.add_argument("task", help="built-in task name (e.g. circle_packing) or a task folder")
    run.add_argument("--run-dir", type=Path, help="run folder (default: WORKSPACE/TASK); re-running resumes")
    run.add_argument("--workspace", help="folder for runs, MLflow and cognition (default evoforge-runs)")
    run.add_argument("--config", type=Path, help="YAML config file")
    run.add_argument("--max-evals", type=int, help="evaluations in the run folder, resumed ones included")
    run.add_argument("--max-wall-s", type=float, help="wall-clock limit of this invocation")
    run.add_argument("--max-tokens", type=int, help="LLM tokens in the run, in + out")
    run.add_argument("--max-cost-usd", type=float,
                     help="USD of LLM calls in the run, over all its sessions (llm.prices)")
    run.add_argument("--llm-base-url", help="OpenAI-compatible server, e.g. http://gpu-box:8000/v1")
    run.add_argument("--llm-model", help="model name (default: the server's first model)")
    run.add_argument("--mode", choices=["async", "sync"])
    run.add_argument("--workers", type=_parse_workers,
                     help="workers per stage, e.g. research=8,engineer=2,analyze=4 (see evoforge stages)")
    run.add_argument("--plugin", action="append", metavar="FILE",
                     help="a plug-in: a .py file, a module name or an installed stage's name; any of stages, "
                          "sinks, samplers, artifact kinds, algorithms (repeatable; docs/extend/plugins.md)")
    run.add_argument("--algorithm",
                     help="a name (evoforge algorithms) or a .py file (docs/extend/algorithm.md)")
    run.add_argument("--seed", type=int)
    run.add_argument("--sampler", help="parent sampler: greedy, uniform, ucb1, map_elites, islands")
    run.add_argument("--staleness", choices=["full", "guarded", "reflective"], help="staleness policy")
    run.add_argument("--alpha-spec", type=float, help="speculative completion after this share of cases")
    run.add_argument("--adaptive", action="store_true", help="adaptive worker counts")
    run.add_argument("--no-mlflow", action="store_true", help="do not track in MLflow")
    run.add_argument("--no-prefect-tasks", action="store_true",
                     help="no Prefect task runs at all, evaluations included (the flow stays)")
    run.add_argument("--executor", choices=["loop", "threads", "dask"],
                     help="where evaluations run: the flow's event loop, its threads, a Dask cluster")
    run.add_argument("--dask-address", help="Dask scheduler, e.g. tcp://host:8786 (default: a local cluster)")
    run.add_argument("--quiet", action="store_true", help="no progress line")
    run.add_argument("--accept-failing-seed", action="store_true",
                     help="evolve from an initial program whose evaluator reports an error beside its score")

    status = sub.add_parser("status", help="a run's status (works while it runs)")
    _run_target(status)
    status.add_argument("--json", action="store_true")
    board = sub.add_parser("leaderboard", help="a run's best candidates")
    _run_target(board)
    board.add_argument("--top", type=_positive, metavar="N", help="only the best N (from leaderboard.json)")
    board.add_argument("--json", action="store_true", help="rows as JSON")
    best = sub.add_parser("best", help="write a run's best program (stdout, or -o FILE; a files "
                                       "task: -o FOLDER)")
    _run_target(best)
    best.add_argument("-o", "--output", type=Path)
    report = sub.add_parser("report", help="write and print a run's report.md and its plots")
    _run_target(report)
    sub.add_parser("tasks", help="list the built-in tasks")
    add_stages_parser(sub)
    add_algorithms_parser(sub)
    add_plugins_parser(sub)
    sim = sub.add_parser("llm-sim", help="local OpenAI-compatible LLM simulator (no real LLM)")
    sim_args.add_arguments(sim)
    add_bench_parser(sub)
    add_cognition_parser(sub)
    add_deploy_parser(sub)
    add_serve_llm_parser(sub)
    add_doctor_parser(sub)
    return parser


# The config key each flag of `evoforge run` sets, so that a bad value names the flag.
RUN_FLAGS = {
    "workspace": "--workspace", "seed": "--seed", "budget.max_evals": "--max-evals",
    "budget.max_wall_s": "--max-wall-s", "budget.max_tokens": "--max-tokens",
    "budget.max_cost_usd": "--max-cost-usd",
    "llm.base_url": "--llm-base-url", "llm.model": "--llm-model", "engine.mode": "--mode",
    "engine.plugins": "--plugin", "engine.algorithm": "--algorithm",
    "tracking.mlflow": "--no-mlflow", "search.sampler": "--sampler", "staleness.policy": "--staleness",
    "speculation.alpha_spec": "--alpha-spec", "adaptive.enabled": "--adaptive",
    "engine.executor": "--executor", "engine.dask_address": "--dask-address",
    "guard.accept_failing_seed": "--accept-failing-seed",
}


def _overrides(ns: argparse.Namespace) -> dict[str, Any]:
    workers = ns.workers or {}
    return {
        "workspace": ns.workspace,
        "seed": ns.seed,
        "budget.max_evals": ns.max_evals,
        "budget.max_wall_s": ns.max_wall_s,
        "budget.max_tokens": ns.max_tokens,
        "budget.max_cost_usd": ns.max_cost_usd,
        "llm.base_url": ns.llm_base_url,
        "llm.model": ns.llm_model,
        "engine.mode": ns.mode,
        **{f"engine.workers.{name}": count for name, count in workers.items()},
        "engine.plugins": ns.plugin,
        "engine.algorithm": ns.algorithm,
        "tracking.mlflow": False if ns.no_mlflow else None,
        "search.sampler": ns.sampler,
        "staleness.policy": ns.staleness,
        "speculation.alpha_spec": ns.alpha_spec,
        "adaptive.enabled": True if ns.adaptive else None,
        "engine.executor": ns.executor,
        "engine.dask_address": ns.dask_address,
        "guard.accept_failing_seed": True if ns.accept_failing_seed else None,
    }


def cmd_run(ns: argparse.Namespace) -> int:
    from evoforge.flows.commands import level_note, refuse_busy
    from evoforge.flows.evolve import run_prepared
    from evoforge.flows.prepare import RunRequest, check_tracking_server, prepare, with_workspace
    from evoforge.flows.runlog import cli_run_log
    from evoforge.infra.config import ConfigError
    from evoforge.infra.config_load import load_config
    from evoforge.infra.llm.openai_backend import LLMUnreachable
    from evoforge.infra.tracking import browse_hint, tracking_target

    prefect_env.guard_children()  # nothing the run starts outlives it, even a `kill -9`
    overrides = _overrides(ns)
    origins = {**RUN_FLAGS, **{key: "--workers" for key in overrides if key.startswith("engine.workers.")}}
    cfg = with_workspace(load_config(ns.config, overrides, origins=origins), ns.run_dir)
    workspace = Path(cfg.workspace)
    if workspace.exists() and not workspace.is_dir():  # (--workspace itself is checked in main)
        raise ConfigError(f"workspace {workspace}{f' (from {ns.config})' if ns.config else ''}: not a folder")
    check_tracking_server(cfg)
    request = RunRequest(task=ns.task, run_dir="", config=cfg, prefect_tasks=not ns.no_prefect_tasks,
                         quiet=ns.quiet)
    asked_off = not cfg.cognition.enabled
    prepared = prepare(request)  # once: the task loaded, the backend made (checked in the flow's loop)
    cfg = prepared.config  # with the algorithm's defaults
    run_dir = ns.run_dir or workspace / prepared.task.name
    refuse_busy(run_dir, "--run-dir" if ns.run_dir else "run folder")
    request.run_dir = str(run_dir.resolve())
    print(f"[evoforge] task {prepared.task.name}, run folder {run_dir}, algorithm {cfg.engine.algorithm}, "
          f"mode {cfg.engine.mode}, budget {cfg.budget.max_evals} evaluations", file=sys.stderr)
    base = prepared.cognition
    if base is not None:
        print(f"[evoforge] cognition base {base.folder}: {base.count()} items, embedder "
              f"{base.embedder.name}", file=sys.stderr)
    elif asked_off:  # else prepare has said why it is off
        print("[evoforge] cognition base off (cognition.enabled: false)", file=sys.stderr)
    target = tracking_target(workspace.resolve(), prepared.task.name, cfg.tracking.tracking_uri,
                             cfg.tracking.experiment)
    print(f"[evoforge] MLflow: {target.uri}, experiment {target.experiment}" if cfg.tracking.mlflow
          else "[evoforge] MLflow off (tracking.mlflow: false)", file=sys.stderr)
    with cli_run_log(Path(request.run_dir) / "run.log"):  # Prefect's errors, tracebacks: there, not here
        try:
            final = asyncio.run(run_prepared(prepared))
        except LLMUnreachable as exc:
            if ns.llm_base_url is None:
                raise
            raise LLMUnreachable(f"--llm-base-url: {exc}") from None
        except Exception as exc:  # a full disk, wherever the run met it: one line naming the folder
            if disk_full_error(exc) is None:
                raise
            raise RunFolderFull.at(run_dir, exc) from exc
    print(f"[evoforge] {final['state']}: {final.get('stop_reason') or 'stopped'}; "
          f"{final['evaluations']} evaluations, {final['nodes_evaluated']} accepted, "
          f"{final['candidates_per_min']} candidates/min", file=sys.stderr)
    print(f"best score {final['best_score']} (node {final['best_node']}{level_note(final)})")
    print(f"best program {final['best_program']}")
    if final.get("mlflow_run_id"):
        print(f"browse in MLflow: {browse_hint(target, final['mlflow_run_id'])}")
    registered = (final.get("sinks") or {}).get("mlflow_registry", {}).get("line")
    if registered:  # the winner's version in MLflow's Prompt or Model Registry
        print(f"registered in MLflow: {registered}")
    failures = final.get("tracking_failures") or {}
    if failures:
        lost = any(f.get("never_recorded", 0) for f in failures.values())
        print(f"[evoforge] {'some records were not written' if lost else 'some writes failed'}: "
              + "; ".join(
            f"{name}: {f['failures']} failed, {f.get('never_recorded', 0)} events never recorded "
            f"(last: {f['last_error']})" for name, f in failures.items())
            + f" (run.log has the tracebacks; `evoforge status {run_dir}` shows them)", file=sys.stderr)
    return INTERRUPTED if final["state"] == "interrupted" else 0


def _user_errors() -> tuple[type[BaseException], ...]:
    from evoforge.cognition.errors import CognitionError
    from evoforge.evaluators.scratch import ScratchError
    from evoforge.evaluators.task import TaskError
    from evoforge.flows.commands import NoRunError, OutputError
    from evoforge.flows.session import RunDirError
    from evoforge.infra.config import ConfigError
    from evoforge.infra.llm.openai_backend import LLMUnreachable
    from evoforge.infra.nodestore import StoreBusyError
    from evoforge.infra.vllm_server import VLLMLaunchError
    from evoforge.stages.evaluation.dask_executor import DaskSetupError

    return (TaskError, ConfigError, RunDirError, LLMUnreachable, StoreBusyError, NoRunError,
            SimArgError, CognitionError, DeployArgError, VLLMLaunchError, DaskSetupError, OutputError,
            ScratchError)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)  # SystemExit: --help, --version, or a bad command line (one line, 2)
    from evoforge.flows import commands

    try:
        workspace = getattr(ns, "workspace", None)
        if workspace and Path(workspace).exists() and not Path(workspace).is_dir():
            raise commands.NoRunError(f"--workspace {workspace}: not a folder")
        if ns.command == "run":
            return cmd_run(ns)
        if ns.command in ("status", "leaderboard", "best", "report"):
            run_dir = commands.resolve_run_dir(ns.run_dir, ns.workspace)
            if ns.command == "status":
                return commands.cmd_status(run_dir, ns.json)
            if ns.command == "leaderboard":
                return commands.cmd_leaderboard(run_dir, ns.top, ns.json)
            if ns.command == "best":
                return commands.cmd_best(run_dir, ns.output)
            return commands.cmd_report(run_dir)
        if ns.command == "tasks":
            return commands.cmd_tasks()
        if ns.command == "stages":
            return run_stages(ns)
        if ns.command == "algorithms":
            return run_algorithms(ns)
        if ns.command in ("plugins", "kinds"):
            return run_plugins(ns)
        if ns.command == "bench":
            return run_bench(ns)
        if ns.command == "cognition":
            return run_cognition(ns)
        if ns.command == "deploy":
            return run_deploy(ns)
        if ns.command == "serve-llm":
            return run_serve_llm(ns)
        if ns.command == "doctor":
            return run_doctor(ns)
        from evoforge.infra.llm_sim.server import serve

        try:
            cfg, host, port = sim_args.config_from_args(ns)
        except ValueError as exc:
            raise SimArgError(str(exc)) from None
        serve(cfg, host=host, port=port)
        return 0
    except KeyboardInterrupt:
        print("\n[evoforge] aborted", file=sys.stderr)
        return INTERRUPTED
    except _user_errors() as exc:
        print(f"evoforge: error: {exc}", file=sys.stderr)
        return USER_ERROR
    except LLMOutage as exc:
        print(f"evoforge: error: {exc}", file=sys.stderr)
        return LLM_DOWN
    except Exception as exc:  # an engine failure: one line here, the traceback in run.log
        if disk_full_error(exc) is not None:  # the run's folder is named (cmd_run), else the file
            full = DiskFull.of(exc)
            print(f"evoforge: {full}" if isinstance(full, RunFolderFull) else
                  f"evoforge: the disk is full ({full}): free space and run the same command",
                  file=sys.stderr)
            return DISK_FULL
        print(f"evoforge: engine failure: {type(exc).__name__}: {exc}", file=sys.stderr)
        return ENGINE_ERROR


def entry() -> NoReturn:
    """The `evoforge` program: `main`, then a quick exit. The exit handlers run (Prefect's
    temporary server stops, the reaper's guard ends) and the output is flushed, but the
    interpreter's own teardown of torch, LanceDB and the rest (3-4 s of freeing memory, measured
    after a Ctrl+C) is skipped: the process has nothing left to write."""
    code = main()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    logging.shutdown()
    atexit._run_exitfuncs()
    os._exit(code)


if __name__ == "__main__":
    entry()
