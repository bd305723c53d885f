"""A run's winner where MLflow users keep results: the Prompt Registry for a text or playbook task,
the Model Registry for an ML task; a seed prompt read back from `prompts:/NAME@ALIAS`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlflow
import numpy as np
import pytest
from mlflow.tracking._tracking_service.utils import _use_tracking_uri
from sklearn.datasets import load_digits

from evoforge.evaluators.task import Task, TaskError, builtin_tasks_dir, load_task
from evoforge.flows.cli import main
from evoforge.infra.mlflow_registry import (
    ALIAS,
    RegistryError,
    Winner,
    parse_prompt_uri,
    read_prompt,
    registry_client,
    registry_name,
)
from evoforge.infra.nodes import Node
from evoforge.infra.runfiles import RunPaths
from evoforge.infra.tracking import Tracker, tracking_target
from evoforge.stages.sinks.base import Event, EventKind
from evoforge.stages.sinks.hub import SinkHub
from evoforge.stages.sinks.registry_sink import REPORT_HEADING, RegistryRecords, RegistryTarget


def _sink(tmp_path: Path, task: Task, run: str = "r1") -> RegistryRecords:
    """The registry sink of a run `run` of `task`, its parent run made in the workspace's store."""
    target = tracking_target(tmp_path / "ws", task.name)
    tracker = Tracker(target.uri, target.experiment, target.artifact_root, f"{task.name}-{run}")
    parent = tracker.open()
    return RegistryRecords(RegistryTarget(target.uri, f"{task.name}-{run}", parent), task,
                           RunPaths(tmp_path / run))


def _node(node_id: str, code: str, score: float, params: dict | None = None) -> Node:
    node = Node(id=node_id, run_id="r", code=code, origin="seed", backend="seed", model="")
    node.score_full = score
    node.params = params or {}
    return node


def _uri(tmp_path: Path) -> str:
    return tracking_target(tmp_path / "ws", "x").uri


def test_names_keep_only_what_mlflow_allows_and_prompt_uris_parse_or_are_refused():
    assert registry_name("house_style") == "house_style"
    assert registry_name("my task/v2 (copy)") == "my-task-v2-copy"
    assert parse_prompt_uri("prompts:/a.b-c@prod") == ("a.b-c", None, "prod")
    assert parse_prompt_uri("prompts:/a/12") == ("a", 12, None)
    assert parse_prompt_uri("prompt.md") is None
    for bad in ("prompts:/", "prompts:/a b@x", "prompts:/a/x", "prompts:/a@"):
        with pytest.raises(RegistryError, match="not a prompt URI"):
            parse_prompt_uri(bad)


def test_a_winner_beats_the_aliased_version_only_when_strictly_better_on_the_same_level():
    up = Winner("run", "id", "n", 0.5, "full", maximize=True)
    down = Winner("run", "id", "n", 0.5, "full", maximize=False)
    assert up.beats({"evoforge.score": "0.4", "evoforge.level": "full"})
    assert not up.beats({"evoforge.score": "0.5", "evoforge.level": "full"})  # a tie keeps the alias
    assert not up.beats({"evoforge.score": "0.6", "evoforge.level": "full"})
    assert down.beats({"evoforge.score": "0.6", "evoforge.level": "full"})
    assert not down.beats({"evoforge.score": "0.4", "evoforge.level": "full"})
    assert up.beats({"evoforge.score": "0.9", "evoforge.level": "pilot"})  # another level: not comparable
    assert up.beats({})  # not one of ours


def test_a_better_winner_moves_the_alias_a_worse_one_is_kept_without_it(tmp_path):
    task = load_task("house_style")
    first = _sink(tmp_path, task, "r1").register(_node("n1", "Answer with the number.\n", 0.5), "full")
    assert first is not None and (first.version, first.alias_version) == (1, 1)
    assert first.uri == f"prompts:/house_style@{ALIAS}"
    worse = _sink(tmp_path, task, "r2").register(_node("n2", "Answer.\n", 0.4), "full")
    assert worse is not None and (worse.version, worse.alias_version, worse.moved) == (2, 1, False)
    assert "stays on version 1" in worse.line()
    uri = _uri(tmp_path)
    assert read_prompt(f"prompts:/house_style@{ALIAS}", uri) == "Answer with the number.\n"
    assert read_prompt("prompts:/house_style/2", uri) == "Answer.\n"
    better = _sink(tmp_path, task, "r3").register(_node("n3", "Answer: the number.\n", 0.75), "full")
    assert better is not None and (better.version, better.alias_version) == (3, 3)
    assert read_prompt(f"prompts:/house_style@{ALIAS}", uri) == "Answer: the number.\n"
    tags = registry_client(uri).get_prompt_version("house_style", 3).tags
    assert tags["evoforge.run_name"] == "house_style-r3" and tags["evoforge.node_id"] == "n3"
    assert (float(tags["evoforge.score"]), tags["evoforge.level"]) == (0.75, "full")


def test_registering_the_same_node_of_the_same_run_again_adds_no_version(tmp_path):
    task = load_task("house_style")
    sink = _sink(tmp_path, task)
    node = _node("n1", "Be brief.\n", 0.5)
    assert sink.register(node, "full").version == 1
    assert sink.register(node, "full").version == 1
    versions = registry_client(_uri(tmp_path)).search_prompt_versions("house_style")
    assert [v.version for v in versions] == [1]


def test_a_playbook_winner_is_a_prompt_version_read_back_as_the_seed_of_a_playbook_task(tmp_path):
    task = load_task("unit_playbook")
    playbook = "## CONVERSIONS\n[conv-1] helpful=2 harmful=0 :: 1 pound = 0.4536 kg\n"
    registered = _sink(tmp_path, task).register(_node("n1", playbook, 0.8), "full")
    assert registered is not None and registered.uri == f"prompts:/unit_playbook@{ALIAS}"
    folder = tmp_path / "task"
    shutil.copytree(builtin_tasks_dir() / "unit_playbook", folder)
    text = (folder / "task.yaml").read_text().replace("playbook: playbook.md", f"playbook: {registered.uri}")
    (folder / "task.yaml").write_text(text)
    (folder / "playbook.md").unlink()
    seeded = load_task(folder, _uri(tmp_path))
    assert seeded.initial_code == playbook and seeded.program_name == "playbook.md"


def test_the_sink_registers_a_finished_runs_winner_from_the_close_and_notes_it_in_the_report_once(tmp_path):
    task = load_task("house_style")
    sink = _sink(tmp_path, task)
    sink.paths.root.mkdir(parents=True)
    sink.paths.report.write_text("# Report\n")
    node = _node("n1", "Be brief.\n", 0.5)
    killed = Event(EventKind.CLOSE, payload={"status": "KILLED", "winner": node, "winner_level": "full"})
    sink.record([killed])
    assert sink.gauges() == {"registered": None}
    assert registry_client(_uri(tmp_path)).get_prompt("house_style") is None  # an interrupted run: none
    finished = Event(EventKind.CLOSE, payload={"status": "FINISHED", "winner": node, "winner_level": "full"})
    sink.record([finished])
    sink.record([finished])  # the hub gives a batch again after a failure: nothing twice
    assert sink.gauges()["registered"] == f"prompts:/house_style@{ALIAS}"
    report = sink.paths.report.read_text()
    assert report.count(REPORT_HEADING) == 1
    assert f"The best prompt: prompts:/house_style@{ALIAS} (version 1, prompts:/house_style/1)." in report


def test_a_registry_that_fails_is_counted_against_its_sink_and_the_run_goes_on(tmp_path):
    task = load_task("house_style")
    (tmp_path / "file").write_text("")  # the store's folder is a file: MLflow cannot make the store
    broken = RegistryRecords(RegistryTarget(f"sqlite:///{tmp_path}/file/mlflow.db", "r", "id"),
                             task, RunPaths(tmp_path / "run"))
    hub = SinkHub([broken])
    hub.start()
    node = _node("n1", "Be brief.\n", 0.5)
    hub.emit(Event(EventKind.CLOSE, payload={"status": "FINISHED", "winner": node, "winner_level": "full"}))
    hub.close(timeout=60)
    failed = hub.failures()["mlflow_registry"]
    assert failed["failures"] >= 1 and failed["last_error"].startswith("FileExistsError")
    assert broken.gauges() == {"registered": None}


def _house_style_copy(tmp_path: Path, prompt: str) -> Path:
    folder = tmp_path / "seeded"
    shutil.copytree(builtin_tasks_dir() / "house_style", folder)
    (folder / "task.yaml").write_text((folder / "task.yaml").read_text().replace("prompt: prompt.md",
                                                                                  f"prompt: {prompt}"))
    (folder / "prompt.md").unlink()
    return folder


def test_a_seed_prompt_is_read_from_the_registry_by_alias_or_by_version(tmp_path):
    task = load_task("house_style")
    _sink(tmp_path, task, "r1").register(_node("n1", "Version one.\n", 0.5), "full")
    _sink(tmp_path, task, "r2").register(_node("n2", "Version two.\n", 0.6), "full")
    by_alias = load_task(_house_style_copy(tmp_path, f"prompts:/house_style@{ALIAS}"), _uri(tmp_path))
    assert by_alias.initial_code == "Version two.\n" and by_alias.program_name == "prompt.md"
    shutil.rmtree(tmp_path / "seeded")
    by_version = load_task(_house_style_copy(tmp_path, "prompts:/house_style/1"), _uri(tmp_path))
    assert by_version.initial_code == "Version one.\n"
    with pytest.raises(TaskError, match="needs the workspace's MLflow store"):
        load_task(tmp_path / "seeded")


def test_a_malformed_seed_uri_is_a_task_yaml_error(tmp_path):
    with pytest.raises(TaskError, match=r"^task.yaml: prompt: prompts:/bad name: not a prompt URI"):
        load_task(_house_style_copy(tmp_path, "prompts:/bad name"), _uri(tmp_path))


@pytest.mark.parametrize("registered", [False, True])
def test_a_missing_seed_prompt_is_one_line_and_exit_2(tmp_path, capsys, registered):
    if registered:  # the store and the prompt exist, the alias does not
        _sink(tmp_path, load_task("house_style")).register(_node("n1", "Be brief.\n", 0.5), "full")
    folder = _house_style_copy(tmp_path, "prompts:/house_style@production")
    code = main(["run", str(folder), "--workspace", str(tmp_path / "ws"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "Traceback" not in "\n".join(err)
    why = "Prompt alias production not found." if registered else "no MLflow store at"
    assert err[-1].startswith("evoforge: error: task.yaml: prompts:/house_style@production: ")
    assert why in err[-1]


def test_the_ml_winner_is_a_registered_pyfunc_that_fits_its_program_with_its_knobs(tmp_path):
    task = load_task("digits")
    node = _node("n1", task.initial_code, 0.95, params={"C": 0.05, "max_iter": 300})
    registered = _sink(tmp_path, task).register(node, "full")
    assert registered is not None and registered.uri == f"models:/digits@{ALIAS}"
    with _use_tracking_uri(_uri(tmp_path)):
        model = mlflow.pyfunc.load_model(f"models:/digits/{registered.version}")
    estimator = model.unwrap_python_model().estimator
    assert estimator[-1].C == 0.05 and estimator[-1].max_iter == 300  # the winner's knobs, not defaults
    x, y = load_digits(return_X_y=True)
    rows = x[:40]
    predicted = np.asarray(model.predict(rows))
    assert predicted.shape == (40,) and np.mean(predicted == y[:40]) >= 0.9
    version = registry_client(_uri(tmp_path)).get_model_version("digits", registered.version)
    assert version.tags["evoforge.node_id"] == "n1" and version.run_id == _sink_parent(tmp_path)


def _sink_parent(tmp_path: Path) -> str:
    """The parent run of the only run in the workspace's experiment evoforge/digits."""
    client = registry_client(_uri(tmp_path))
    experiment = client.get_experiment_by_name("evoforge/digits").experiment_id
    (run,) = client.search_runs([experiment])
    return run.info.run_id


def test_a_program_task_without_training_data_registers_nothing(tmp_path):
    task = load_task("circle_packing")
    assert _sink(tmp_path, task).register(_node("n1", task.initial_code, 2.0), "full") is None
    assert registry_client(_uri(tmp_path)).search_registered_models() == []


@pytest.mark.slow
def test_a_text_run_registers_its_winner_and_a_later_run_starts_from_it(tmp_path, capsys):
    """house_style over the simulator: the winner is the prompt's version under the alias, named in
    the last lines and report.md; a task seeded `prompts:/house_style@evoforge-best` starts from it."""
    from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
    from tests.helpers import read_nodes, read_status

    ws, config = tmp_path / "ws", tmp_path / "c.yaml"
    config.write_text(json.dumps({"cognition": {"enabled": False}}))
    run = ["--workspace", str(ws), "--config", str(config), "--max-evals", "3", "--seed", "1", "--quiet"]
    with SimulatorProcess(SimConfig(median_s=0.01, sigma=0.2, slots=16, seed=3)) as sim:
        assert main(["run", "house_style", "--run-dir", str(tmp_path / "a"), "--llm-base-url", sim.base_url,
                     *run]) == 0
        out = capsys.readouterr().out
        status = read_status(tmp_path / "a")
        best = next(n for n in read_nodes(tmp_path / "a") if n.id == status["best_node"])
        uri = tracking_target(ws, "house_style").uri
        assert read_prompt(f"prompts:/house_style@{ALIAS}", uri) == best.code
        line = f"prompts:/house_style@{ALIAS} (version 1, prompts:/house_style/1)"
        assert f"registered in MLflow: {line}" in out
        assert f"The best prompt: {line}." in (tmp_path / "a" / "report.md").read_text()
        tags = registry_client(uri).get_prompt_version("house_style", 1).tags
        assert tags["evoforge.node_id"] == best.id and float(tags["evoforge.score"]) == status["best_score"]
        folder = _house_style_copy(tmp_path, f"prompts:/house_style@{ALIAS}")
        assert main(["run", str(folder), "--run-dir", str(tmp_path / "b"), "--llm-base-url", sim.base_url,
                     *run]) == 0
    seed = next(n for n in read_nodes(tmp_path / "b") if n.origin == "seed")
    assert seed.code == best.code


@pytest.mark.slow
def test_an_ml_run_registers_a_model_that_loads_and_predicts_and_without_mlflow_nothing(tmp_path, capsys):
    """digits over the simulator: `models:/digits@evoforge-best` loads and predicts digits; the same
    run without MLflow (--no-mlflow) leaves no store at all."""
    from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
    from tests.helpers import read_status

    ws, config = tmp_path / "ws", tmp_path / "c.yaml"
    config.write_text(json.dumps({"param_search": {"trials": 2, "startup": 1},
                                  "cognition": {"enabled": False},
                                  "promotion": {"every": 1, "top_k": 2, "final_top": 1}}))
    run = ["--config", str(config), "--max-evals", "3", "--seed", "1", "--quiet"]
    with SimulatorProcess(SimConfig(median_s=0.05, sigma=0.3, slots=4, seed=3)) as sim:
        assert main(["run", "digits", "--run-dir", str(tmp_path / "a"), "--workspace", str(ws),
                     "--llm-base-url", sim.base_url, *run]) == 0
        assert f"registered in MLflow: models:/digits@{ALIAS} (version 1" in capsys.readouterr().out
        assert main(["run", "digits", "--run-dir", str(tmp_path / "b"), "--workspace", str(tmp_path / "off"),
                     "--llm-base-url", sim.base_url, "--no-mlflow", *run]) == 0
    assert "registered in MLflow" not in capsys.readouterr().out
    assert not (tmp_path / "off" / "mlflow.db").exists()
    status = read_status(tmp_path / "a")
    uri = tracking_target(ws, "digits").uri
    version = registry_client(uri).get_model_version_by_alias("digits", ALIAS)
    assert version.tags["evoforge.node_id"] == status["best_node"]
    with _use_tracking_uri(uri):
        model = mlflow.pyfunc.load_model(f"models:/digits@{ALIAS}")
    x, y = load_digits(return_X_y=True)
    assert np.mean(np.asarray(model.predict(x[-50:])) == y[-50:]) >= 0.85
