"""`evoforge deploy TASK`: serve a Prefect deployment whose runs continue one run folder, K
evaluations at a time, on a cron or interval schedule or when triggered from the UI or CLI."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError


class DeployArgError(ValueError):
    """Bad arguments to `evoforge deploy` (user error, one line)."""


def add_deploy_parser(subparsers: Any) -> None:
    """Add `deploy TASK --name N [--cron C | --interval S] [--max-evals-per-run K] ...` to the CLI."""
    deploy = subparsers.add_parser("deploy", help="serve a Prefect deployment that continues a run folder")
    deploy.add_argument("task", help="built-in task name (e.g. circle_packing) or a task folder")
    deploy.add_argument("--name", help="deployment name (default: the task's name)")
    deploy.add_argument("--cron", help="schedule: a cron string, e.g. '0 * * * *'")
    deploy.add_argument("--interval", type=float, help="schedule: seconds between runs")
    deploy.add_argument("--max-evals-per-run", type=int, default=10,
                        help="evaluations each triggered run adds to the folder (default 10)")
    deploy.add_argument("--run-dir", type=Path, help="run folder (default: WORKSPACE/TASK)")
    deploy.add_argument("--workspace", help="folder for runs, MLflow and cognition (default evoforge-runs)")
    deploy.add_argument("--config", type=Path, help="YAML config file, read again by every run")
    deploy.add_argument("--llm-base-url", help="OpenAI-compatible server, e.g. http://gpu-box:8000/v1")
    deploy.add_argument("--llm-model", help="model name (default: the server's first model)")


def _check_schedule(ns: argparse.Namespace) -> None:
    from prefect.client.schemas.schedules import CronSchedule

    if ns.cron is not None and ns.interval is not None:
        raise DeployArgError("deploy: give --cron or --interval, not both")
    if ns.interval is not None and not ns.interval > 0:
        raise DeployArgError(f"deploy: --interval must be > 0 seconds, got {ns.interval:g}")
    if ns.max_evals_per_run < 1:
        raise DeployArgError(f"deploy: --max-evals-per-run must be >= 1, got {ns.max_evals_per_run}")
    if ns.cron is not None:
        try:
            CronSchedule(cron=ns.cron)
        except ValidationError as exc:
            raise DeployArgError(f"deploy: --cron '{ns.cron}': {exc.errors()[0]['msg']}") from None


def deployment_params(ns: argparse.Namespace) -> Any:
    """The deployment's parameters from the flags, checked now (task, config, schedule) so that a
    mistake is one line at the prompt, not a failed run later."""
    from evoforge.evaluators.task import load_task
    from evoforge.flows.deploy import DeploymentParams
    from evoforge.infra.config_load import load_config
    from evoforge.infra.tracking import default_tracking_uri

    _check_schedule(ns)
    cfg = load_config(ns.config, {"workspace": ns.workspace, "llm.base_url": ns.llm_base_url,
                                  "llm.model": ns.llm_model})
    workspace = Path(cfg.workspace).resolve()
    task = load_task(ns.task, cfg.tracking.tracking_uri or default_tracking_uri(workspace))  # prompts:/ seeds
    run_dir = (ns.run_dir or workspace / task.name).resolve()
    task_ref = str(Path(ns.task).resolve()) if Path(ns.task).exists() else ns.task
    return DeploymentParams(
        task=task_ref, run_dir=str(run_dir), max_evals_per_run=ns.max_evals_per_run,
        workspace=str(workspace), config_file=str(ns.config.resolve()) if ns.config else None,
        llm_base_url=ns.llm_base_url, llm_model=ns.llm_model)


def run_deploy(ns: argparse.Namespace) -> int:
    """Serve the deployment until Ctrl+C; returns the exit code."""
    from evoforge.flows.deploy import serve_deployment

    params = deployment_params(ns)
    name = ns.name or Path(params.task).name
    schedule = f"cron '{ns.cron}'" if ns.cron else f"every {ns.interval:g} s" if ns.interval else \
        "no schedule (trigger it)"
    print(f"[evoforge] deployment evoforge-scheduled/{name}: {params.task} in {params.run_dir}, "
          f"{params.max_evals_per_run} evaluations per run, {schedule}", file=sys.stderr)
    serve_deployment(name, params, cron=ns.cron, interval_s=ns.interval)
    return 0
