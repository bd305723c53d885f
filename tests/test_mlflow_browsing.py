"""What a user finds in MLflow after a run: candidates as nested runs with filterable tags, the
run's outcome as files on the parent run, every LLM call as a trace linked to its candidate, in
the store next to the run folder; and the `mlflow ui` command the CLI prints to browse it."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path

import mlflow
import pytest
from mlflow.tracking import MlflowClient
from mlflow.tracking._tracking_service.utils import _use_tracking_uri

from evoforge.flows.cli import main
from evoforge.flows.prepare import with_workspace
from evoforge.infra.config_load import load_config
from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
from evoforge.infra.llm_traces import recording, trace_call, trace_spans
from evoforge.infra.nodes import EVALUATED
from evoforge.infra.vllm_server import free_port
from tests.helpers import read_nodes, wait_until_answers

EXPERIMENT = "evoforge/circle_packing"
CONFIG = "llm:\n  max_retries: 0\ncognition:\n  enabled: false\n"  # a 500 is a failed call at once


@contextmanager
def global_tracking_uri(uri: str) -> Iterator[None]:
    """MLflow's process-wide tracking URI set to `uri` inside the block, restored after it."""
    with _use_tracking_uri(uri):
        yield


def _run(args: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(args)
    return code, out.getvalue()


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory):
    """A short run over the LLM simulator (HTTP), a share of its calls failing; while it runs,
    MLflow's global tracking URI names a decoy store, which must stay empty."""
    root = tmp_path_factory.mktemp("mlflow-browse")
    (root / "c.yaml").write_text(CONFIG)
    decoy = root / "decoy.db"
    sim_cfg = SimConfig(median_s=0.02, sigma=0.2, slots=8, error_rate=0.3, error_kinds=("500",), seed=7)
    with SimulatorProcess(sim_cfg) as sim, global_tracking_uri(f"sqlite:///{decoy}"):
        code, out = _run(["run", "circle_packing", "--run-dir", str(root / "run"), "--workspace",
                          str(root / "ws"), "--config", str(root / "c.yaml"), "--llm-base-url", sim.base_url,
                          "--max-evals", "8", "--workers", "research=2,engineer=2", "--seed", "3", "--quiet"])
    assert code == 0
    uri = f"sqlite:///{(root / 'ws' / 'mlflow.db').resolve()}"
    return root, uri, out, decoy


def _runs(uri: str) -> list:
    with global_tracking_uri(uri):
        return mlflow.search_runs(experiment_names=[EXPERIMENT], output_format="list", max_results=1000)


def _traces(uri: str, **kwargs) -> list:
    with global_tracking_uri(uri):
        exp = mlflow.get_experiment_by_name(EXPERIMENT)
        return mlflow.search_traces(locations=[exp.experiment_id], return_type="list", max_results=1000,
                                    **kwargs)


@pytest.mark.slow
def test_candidates_are_nested_runs_tagged_for_the_ui_filters(sim_run):
    root, uri, _, _ = sim_run
    nodes = {n.id: n for n in read_nodes(root / "run")}
    runs = _runs(uri)
    candidates = {r.data.tags["node_id"]: r for r in runs if r.data.tags.get("kind") == "candidate"}
    assert set(candidates) == set(nodes)
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    for node_id, run in candidates.items():
        node, tags = nodes[node_id], run.data.tags
        assert tags["mlflow.parentRunId"] == parent.info.run_id
        assert (tags["origin"], tags["status"], tags["island"], tags["level"]) == (
            node.origin, str(node.status), str(node.island), "full")
    with global_tracking_uri(uri):  # the filter a user types in the UI's search box
        failed = mlflow.search_runs(experiment_names=[EXPERIMENT], output_format="list",
                                    filter_string="tags.kind = 'candidate' and tags.status = 'failed'")
    assert sorted(r.data.tags["node_id"] for r in failed) == sorted(
        n.id for n in nodes.values() if n.status == "failed")
    assert failed, "the simulator's errors fail some candidates"


@pytest.mark.slow
def test_parent_run_has_the_best_program_leaderboard_config_and_report(sim_run, tmp_path):
    root, uri, _, _ = sim_run
    parent = next(r for r in _runs(uri) if "mlflow.parentRunId" not in r.data.tags)
    client = MlflowClient(uri)
    local = Path(client.download_artifacts(parent.info.run_id, "", str(tmp_path)))
    run_dir = root / "run"
    assert (local / "best" / "program.py").read_text() == (run_dir / "best" / "program.py").read_text()
    assert (local / "config.json").read_text() == (run_dir / "config.json").read_text()
    assert (local / "leaderboard.md").read_text() == (run_dir / "leaderboard.md").read_text()
    assert (local / "report.md").read_text().startswith((run_dir / "report.md").read_text()[:200])


@pytest.mark.slow
def test_diffs_are_logged_under_a_name_the_ui_previews(sim_run):
    root, uri, _, _ = sim_run
    node = next(n for n in read_nodes(root / "run") if n.status == EVALUATED and n.origin != "seed")
    run = next(r for r in _runs(uri) if r.data.tags.get("node_id") == node.id)
    client = MlflowClient(uri)
    files = {f.path for f in client.list_artifacts(run.info.run_id)}
    assert "diff.txt" in files and "diff.patch" not in files
    assert Path(client.download_artifacts(run.info.run_id, "diff.txt")).read_text() == node.diff


@pytest.mark.slow
def test_every_llm_call_is_a_trace_linked_to_its_candidate(sim_run):
    root, uri, _, decoy = sim_run
    nodes = {n.id: n for n in read_nodes(root / "run")}
    run_of = {r.data.tags["node_id"]: r.info.run_id for r in _runs(uri)
              if r.data.tags.get("kind") == "candidate"}
    traces = _traces(uri)
    by_node = {node_id: _traces(uri, run_id=run_id) for node_id, run_id in run_of.items()}  # the run's tab
    assert sorted(t.info.trace_id for ts in by_node.values() for t in ts) == sorted(
        t.info.trace_id for t in traces)
    assert all(t.info.tags["node_id"] == node_id for node_id, ts in by_node.items() for t in ts)
    designed = [n for n in nodes.values() if n.origin != "seed"]
    assert all(sum(t.info.tags["purpose"] == "research" for t in by_node[n.id]) == 1 for n in designed)
    for node in designed:  # tokens and seconds of the node are those of its calls
        mine = by_node[node.id]
        assert sum(t.info.token_usage["input_tokens"] for t in mine) == node.tokens_in
        assert sum(t.info.token_usage["output_tokens"] for t in mine) == node.tokens_out
        assert abs(sum(t.info.execution_duration for t in mine) - node.llm_s * 1000) <= 5 * len(mine)
        assert all(t.info.request_time >= node.created_at * 1000 - 1 for t in mine)
    node = next(n for n in designed if n.status == EVALUATED)
    research = next(t for t in by_node[node.id] if t.info.tags["purpose"] == "research")
    span = research.data.spans[0]
    prompt = (root / "run" / "nodes" / node.id / "prompt.md").read_text()
    assert span.inputs["messages"][-1]["content"] in prompt
    assert span.outputs["choices"][0]["message"]["content"] == (root / "run" / "nodes" / node.id
                                                                / "answer.md").read_text()
    assert research.info.tags["author"] == "simulated" and "not a real LLM" in span.name
    assert {t.info.tags["purpose"] for t in traces} == {"research", "analyze"}
    failed = [t for t in traces if t.info.state == "ERROR"]
    assert failed and all(nodes[t.info.tags["node_id"]].failed_stage == "research" for t in failed
                          if t.info.tags["purpose"] == "research")
    assert all("500" in t.data.spans[0].status.description for t in failed)
    assert not decoy.is_file()  # the process-wide URI named another store all along: unused


@pytest.mark.slow
def test_cli_prints_the_mlflow_ui_command_of_the_store(sim_run):
    root, uri, out, _ = sim_run
    parent = next(r for r in _runs(uri) if "mlflow.parentRunId" not in r.data.tags)
    line = next(line for line in out.splitlines() if line.startswith("browse in MLflow: "))
    assert f"mlflow ui --backend-store-uri {uri}  " in line
    assert line.endswith(f"/runs/{parent.info.run_id})")


@pytest.mark.slow
def test_a_run_folder_given_alone_keeps_its_mlflow_store_beside_it(tmp_path, monkeypatch):
    cwd, elsewhere = tmp_path / "cwd", tmp_path / "elsewhere"
    cwd.mkdir()
    (cwd / "c.yaml").write_text(CONFIG)
    monkeypatch.chdir(cwd)
    code, out = _run(["run", "circle_packing", "--run-dir", str(elsewhere / "cp"), "--config", "c.yaml",
                      "--max-evals", "3", "--seed", "1", "--quiet"])
    assert code == 0
    db = (elsewhere / "mlflow.db").resolve()
    assert db.is_file() and not (cwd / "evoforge-runs").exists()
    assert f"browse in MLflow: mlflow ui --backend-store-uri sqlite:///{db}  " in out
    traces = _traces(f"sqlite:///{db}")  # the offline proposer's calls: traced, named as offline
    assert traces and all(t.info.tags["author"] == "offline" for t in traces)
    research = next(t for t in traces if t.info.tags["purpose"] == "research")
    assert research.data.spans[0].name == "research (offline backend, no LLM)"
    assert research.data.spans[0].span_type == "TOOL"  # a program, not a chat model


def test_workspace_is_the_run_folders_parent_unless_one_is_named(tmp_path):
    run_dir = tmp_path / "a" / "run"
    assert with_workspace(load_config(), run_dir).workspace == str(tmp_path / "a")
    assert with_workspace(load_config(), None).workspace == "evoforge-runs"
    named = load_config(overrides={"workspace": str(tmp_path / "ws")})
    assert with_workspace(named, run_dir).workspace == str(tmp_path / "ws")
    (tmp_path / "c.yaml").write_text("workspace: from-file\n")
    assert with_workspace(load_config(tmp_path / "c.yaml"), run_dir).workspace == "from-file"


class _Backend:  # what trace_call reads of a backend that failed: its name and model
    name, model = "openai", "m"


def test_calls_are_noted_only_inside_a_stage_run_and_failures_are_error_traces():
    messages = [{"role": "user", "content": "improve x"}]
    trace_call(_Backend(), messages, 1.0, 0.5, error="outside any stage run")  # nobody collects it
    with recording("analyze") as log:
        trace_call(_Backend(), messages, 1_700_000_000.0, 0.25, error="LLM request failed: 500")
    [call] = log.calls
    assert (call.stage, call.author, call.error) == ("analyze", "unknown", "LLM request failed: 500")
    [span] = trace_spans(log.calls, {"node_id": "n1"})
    assert (span.start_time_ns, span.end_time_ns) == (1_700_000_000 * 10**9, 1_700_000_000_25 * 10**7)
    assert span.status.status_code == "ERROR" and span.outputs is None
    assert span.inputs == {"messages": messages} and span.name == "analyze (failed, no answer)"
    assert span.get_attribute("mlflow.traceTag.node_id") == "n1"


@pytest.mark.slow
def test_the_printed_mlflow_ui_command_serves_the_run(sim_run, tmp_path):
    """Run the command as printed (on a free port) and ask the UI's server for the run and its traces."""
    import os
    import re
    import shlex
    import signal
    import subprocess
    import sys

    import httpx

    _, uri, out, _ = sim_run
    line = next(line for line in out.splitlines() if line.startswith("browse in MLflow: "))
    command = line.removeprefix("browse in MLflow: ").split("  (")[0]
    run_id = re.search(r"/runs/([0-9a-f]+)\)$", line).group(1)
    port = free_port()
    argv = shlex.split(command)
    assert argv[:2] == ["mlflow", "ui"]
    with open(tmp_path / "ui.log", "w") as log:  # noqa: SIM115 - the child keeps its own copy
        server = subprocess.Popen([sys.executable, "-m", "mlflow", *argv[1:], "--port", str(port)],
                                  stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_answers(f"{base}/health", server, tmp_path / "ui.log", timeout=120)
        run = httpx.get(f"{base}/api/2.0/mlflow/runs/get", params={"run_id": run_id}, timeout=30).json()
        assert run["run"]["info"]["run_id"] == run_id and run["run"]["info"]["status"] == "FINISHED"
        files = httpx.get(f"{base}/api/2.0/mlflow/artifacts/list", params={"run_id": run_id},
                          timeout=30).json()["files"]
        assert {"best", "leaderboard.md", "report.md", "config.json"} <= {f["path"] for f in files}
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)
