"""Whole runs with a real model in the loop: SmolLM2-135M-Instruct served by llama.cpp
(`evoforge serve-llm --model smollm2`), reached through a recording proxy that adds up the
server's own usage of every chat answer and checks every request against its context window.

Asserted is what a real model exercises, not the quality of its edits (a 135M model rarely writes a
usable one): circle_packing, a text task under GEPA and a playbook under ACE each end on their own;
the tokens the run recorded equal the server's usage, answers cut off included; no request asks
for more than the window holds; every failed node carries one reason from the documented set, and
`evoforge status` counts the same buckets as the nodes; no failure is evoforge's own (internal).
Skipped without the `local-llm` extra on a developer's machine, a failure in CI (tests/real_model.py).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from evoforge.infra import failure_reasons
from evoforge.infra.nodes import EVALUATED
from tests.helpers import read_nodes, read_status, run_cli
from tests.real_model import RealModel
from tests.usage_proxy import UsageProxy

pytestmark = pytest.mark.slow

WINDOW = 8192  # the context window `evoforge serve-llm --model smollm2` serves (llamacpp_server.py)
# no llm.timeout_s: the timeout follows the endpoint's measured pace; short answers, few proposals
CONFIG = f"""\
llm:
  max_tokens: 512
  context_window: {WINDOW}  # llama-cpp-python's server does not say its window
budget:
  max_proposals: {{proposals}}
task_model:
  max_tokens: 64
"""


def _run(real_model: RealModel, tmp_path: Path, task: str, extra: list[str], proposals: int = 4,
         evals: int = 3) -> tuple[Path, UsageProxy, str]:
    config = tmp_path / "real-model.yaml"
    config.write_text(CONFIG.format(proposals=proposals))
    run_dir = tmp_path / "run"
    with UsageProxy(real_model.base_url, WINDOW) as proxy:
        done = run_cli(["run", task, "--llm-base-url", proxy.base_url, "--llm-model", real_model.model,
                        "--max-evals", str(evals), "--max-wall-s", "900", "--config", str(config),
                        "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"), "--quiet", *extra],
                       tmp_path, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"LLM: {real_model.model} at {proxy.base_url}" in done.stderr
    return run_dir, proxy, done.stderr


def _check_the_run(run_dir: Path, proxy: UsageProxy, real_model: RealModel) -> dict:
    """What every real-model run must show, whatever its task; returns its status.json."""
    status = read_status(run_dir)
    assert status["state"] == "finished"
    # by its evaluations or proposals, not the wall clock (a hung call) nor paused by the breaker
    stop = status["stop_reason"]
    assert stop.startswith(("max_evals reached", "proposal cap reached")), stop
    nodes = read_nodes(run_dir)
    proposals = [n for n in nodes if n.origin != "seed"]
    assert proposals, "the run proposed nothing"
    assert {(n.backend, n.model) for n in proposals if n.backend} == {("openai", real_model.model)}
    rec = proxy.recorded
    assert rec.chats > 0 and not rec.over_window, rec.over_window
    # every token the server counted is the run's: the proposer's (nodes, status) and the task model's
    task_model = status.get("task_model") or {}
    assert status["tokens_in"] + int(task_model.get("tokens_in", 0)) == rec.tokens_in, (status, rec)
    assert status["tokens_out"] + int(task_model.get("tokens_out", 0)) == rec.tokens_out, (status, rec)
    failed = [n for n in nodes if n.status != EVALUATED and n.origin != "seed" and n.error]
    reasons = Counter(n.reason for n in failed)
    assert set(reasons) <= set(failure_reasons.ALL), reasons
    assert failure_reasons.INTERNAL not in reasons, [n.error for n in failed if n.reason == "internal"]
    shown = {k: v for k, v in status["failures_by_reason"].items() if v}
    assert shown == dict(reasons), (shown, reasons)
    return status


def test_circle_packing_with_the_real_model_counts_every_token_the_server_counted(real_model, tmp_path):
    run_dir, proxy, _ = _run(real_model, tmp_path, "circle_packing", [])
    _check_the_run(run_dir, proxy, real_model)


def test_a_text_task_under_gepa_with_the_real_model_as_proposer_and_task_model(real_model, tmp_path):
    run_dir, proxy, _ = _run(real_model, tmp_path, "house_style", ["--algorithm", "gepa"])
    status = _check_the_run(run_dir, proxy, real_model)
    assert status["task_model"]["calls"] > 0  # the prompt was run on its cases by the served model


def test_a_playbook_under_ace_with_the_real_model_ends_on_its_own(real_model, tmp_path):
    run_dir, proxy, _ = _run(real_model, tmp_path, "unit_playbook", ["--algorithm", "ace"])
    status = _check_the_run(run_dir, proxy, real_model)
    assert status["task_model"]["calls"] > 0
