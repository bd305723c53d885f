"""Shared helpers for the end-to-end tests: run the CLI and read a run folder back."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from evoforge.infra.nodes import Node
from evoforge.infra.nodestore import NodeStore

REPO = Path(__file__).resolve().parent.parent


# an evaluator whose score is what the program's run() returns (the sandbox tests' task)
RUN_EVALUATOR = '''
import importlib.util

def evaluate(program_path):
    spec = importlib.util.spec_from_file_location("program", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.run()
'''

def read_nodes(run_dir: Path) -> list[Node]:
    """Every node in a finished run's database."""
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        return store.all()


def read_status(run_dir: Path) -> dict:
    return json.loads((run_dir / "status.json").read_text())


def cli_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    return env


def run_cli(args: list[str], tmp_path: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """`evoforge ARGS` in a subprocess, as a user would run it."""
    return subprocess.run(
        [sys.executable, "-m", "evoforge.flows.cli", *args],
        cwd=tmp_path, env=cli_env(tmp_path), capture_output=True, text=True, timeout=timeout,
    )


def processes_mentioning(text: str) -> list[int]:
    """Live processes (other than this one) whose command line or working directory contains
    ``text`` (a warm sandbox's child has its fork server's command line, but its own folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            try:
                where = (entry / "cmdline").read_bytes().decode(errors="replace")
                with contextlib.suppress(OSError):
                    where += "\0" + os.readlink(entry / "cwd")
                if text in where:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def prefect_run_of(run_dir: Path) -> tuple[object, list[str]]:
    """The Prefect flow run of a run folder (in this process's Prefect home) and its task run names."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    wanted = str(run_dir.resolve())

    async def read() -> tuple[object, list[str]]:
        async with get_client() as client:
            flows = await client.read_flow_runs(limit=200)
            mine = [f for f in flows if f.parameters.get("request", {}).get("run_dir") == wanted]
            assert mine, "no flow run of this run folder"
            names: list[str] = []
            while True:  # the API pages at 200
                page = await client.read_task_runs(
                    flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[m.id for m in mine])),
                    limit=200, offset=len(names))
                names += [r.name for r in page]
                if len(page) < 200:
                    return mine[0], names

    return asyncio.run(read())


def wait_until_answers(url: str, proc: subprocess.Popen, log: Path, timeout: float = 240) -> None:
    """Poll `url` until it answers 200; fail with the log's tail if `proc` exits or time runs out."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{proc.args[:3]} exited:\n{log.read_text()[-4000:]}"
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{url} did not answer:\n{log.read_text()[-4000:]}")


def first_match(stream: Iterable[str], pattern: str | re.Pattern[str],
                timeout: float) -> re.Match[str] | None:
    """The first line of `stream` (a process's output) matching `pattern`, read for at most
    `timeout` seconds; None when none came by then."""
    found: list[re.Match[str]] = []

    def scan() -> None:
        for line in stream:
            match = re.search(pattern, line)
            if match:
                found.append(match)
                return

    reader = threading.Thread(target=scan, daemon=True)
    reader.start()
    reader.join(timeout)
    return found[0] if found else None
