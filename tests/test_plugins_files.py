"""Plug-ins from `.py` files, one mechanism for five kinds: the examples of docs/extend/, as they
stand, plug in with `--plugin` and are really used by a short offline run (a sink alone gets the
run's events, a sampler chooses the parents, an artifact kind evolves a JSON document and owns its
task.yaml keys, an algorithm is chosen by name); `evoforge plugins` lists them with their origin."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from evoforge.flows.cli import main
from evoforge.infra.nodestore import NodeStore
from evoforge.stages.plugins import use_plugins
from evoforge.stages.sample.resume import SAMPLER_STATE_META
from tests.helpers import REPO, read_nodes

QUICK = ["--max-evals", "5", "--no-mlflow", "--quiet"]


@pytest.fixture(autouse=True)
def _no_plugin_files_after():
    """The files a test registered leave the registries with it (as the next run's build does)."""
    yield
    use_plugins([])


def doc_plugin(tmp_path: Path, page: str, name: str) -> Path:
    """The plug-in file `name` of docs/extend/`page`, written out as a user would save it."""
    text = (REPO / "docs" / "extend" / page).read_text()
    (code,) = re.findall(rf"```python\n(\"\"\"{re.escape(name)}:.*?)```", text, re.S)
    path = tmp_path / name
    path.write_text(code)
    return path


def json_task(tmp_path: Path, yaml: str = "kind: json\ndocument: params.json\n") -> Path:
    """The JSON task of docs/extend/artifact-kind.md (its task.yaml, document and evaluator)."""
    text = (REPO / "docs" / "extend" / "artifact-kind.md").read_text()
    (evaluator,) = re.findall(r'```python title="evaluator.py"\n(.*?)```', text, re.S)
    (document,) = re.findall(r'```json title="params.json"\n(.*?)```', text, re.S)
    root = tmp_path / "json_task"
    root.mkdir()
    (root / "task.yaml").write_text(yaml)
    (root / "params.json").write_text(document)
    (root / "evaluator.py").write_text(evaluator)
    return root


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


@pytest.mark.slow
def test_a_sink_alone_in_a_file_receives_every_event_of_the_run(tmp_path):
    sink = doc_plugin(tmp_path, "sink.md", "event_count.py")
    run_dir = tmp_path / "run"
    assert main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                 "--plugin", str(sink), *QUICK]) == 0
    counts = json.loads((run_dir / "event_count.json").read_text())
    evaluated = [n for n in read_nodes(run_dir) if n.was_evaluated]
    assert len(evaluated) >= 5 and counts["evaluated"] == len(evaluated)  # one FINISHED event each
    assert counts["proposed"] >= len(evaluated) - 1 and counts["close"] == 1


@pytest.mark.slow
def test_a_sampler_in_a_file_is_chosen_by_name_and_chooses_every_parent(tmp_path):
    sampler = doc_plugin(tmp_path, "sampler.md", "newest.py")
    run_dir = tmp_path / "run"
    assert main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                 "--plugin", str(sampler), "--sampler", "newest", *QUICK]) == 0
    children = [n for n in read_nodes(run_dir) if n.origin != "seed"]
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        state = store.get_meta(SAMPLER_STATE_META)
    assert children and state["picked"] == len(children)  # it chose the parent of every child
    assert json.loads((run_dir / "config.json").read_text())["search"]["sampler"] == "newest"


def test_an_unknown_sampler_is_one_line_exit_2_naming_the_plugins_too(tmp_path, capsys):
    sampler = doc_plugin(tmp_path, "sampler.md", "newest.py")
    assert main(["run", "circle_packing", "--workspace", str(tmp_path / "ws"), "--plugin", str(sampler),
                 "--sampler", "newset", "--no-mlflow"]) == 2
    line = one_line_error(capsys)
    assert line.startswith("evoforge: error: search.sampler (--sampler): unknown sampler 'newset' "
                           "(samplers: ")
    assert "newest" in line and "greedy" in line
    assert not (tmp_path / "ws" / "circle_packing").exists()


@pytest.mark.slow
def test_an_artifact_kind_in_a_file_evolves_a_json_document(tmp_path):
    kind = doc_plugin(tmp_path, "artifact-kind.md", "json_doc.py")
    run_dir = tmp_path / "run"
    assert main(["run", str(json_task(tmp_path)), "--run-dir", str(run_dir), "--workspace",
                 str(tmp_path / "ws"), "--plugin", str(kind), *QUICK]) == 0
    nodes = read_nodes(run_dir)
    evaluated = [n for n in nodes if n.was_evaluated]
    assert len(evaluated) >= 5 and all(isinstance(json.loads(n.code), dict) for n in evaluated)
    assert len({n.code for n in evaluated}) > 1  # the documents changed
    best = json.loads((run_dir / "best" / "files" / "params.json").read_text())
    assert set(best) == {"x", "y"}


@pytest.mark.parametrize(("yaml", "message"), [
    ("kind: json\ndocumnt: params.json\n", "task.yaml: unknown key 'documnt' (allowed: "),
    ("kind: json\ndocument: params.txt\n", "task.yaml: document must name a .json file, got 'params.txt'"),
    ("kind: json\n", "task.yaml: kind json needs 'document', the JSON file to evolve"),
    ("kind: program\ndocument: params.json\n", "task.yaml: 'document' is for kind json (this task's kind "
                                                "is program)"),
])
def test_the_json_kind_owns_its_task_yaml_keys_a_bad_one_is_one_line_exit_2(tmp_path, capsys, yaml,
                                                                              message):
    kind = doc_plugin(tmp_path, "artifact-kind.md", "json_doc.py")
    code = main(["run", str(json_task(tmp_path, yaml)), "--workspace", str(tmp_path / "ws"),
                 "--plugin", str(kind), "--no-mlflow"])
    assert code == 2
    assert one_line_error(capsys).startswith(f"evoforge: error: {message}")


def test_without_its_plugin_a_json_task_names_the_known_kinds(tmp_path, capsys):
    assert main(["run", str(json_task(tmp_path)), "--workspace", str(tmp_path / "ws"), "--no-mlflow"]) == 2
    assert one_line_error(capsys) == ("evoforge: error: task.yaml: kind must be one of program, files, "
                                      "playbook, text, got 'json'")


@pytest.mark.slow
def test_an_algorithm_in_a_plugin_file_is_chosen_by_its_name(tmp_path):
    algorithm = doc_plugin(tmp_path, "algorithm.md", "research_only.py")
    run_dir = tmp_path / "run"
    assert main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                 "--plugin", str(algorithm), "--algorithm", "research-only", *QUICK]) == 0
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["engine"]["algorithm"] == "research-only" and saved["search"]["sampler"] == "ucb1"
    assert "research(8) -> engineer(2)" in (run_dir / "run.log").read_text()  # its pipeline ran


def test_evoforge_plugins_lists_the_five_kinds_with_their_origins(tmp_path, capsys):
    files = [doc_plugin(tmp_path, page, name) for page, name in (
        ("sink.md", "event_count.py"), ("sampler.md", "newest.py"), ("artifact-kind.md", "json_doc.py"),
        ("algorithm.md", "research_only.py"), ("stage.md", "diff_size.py"))]
    assert main(["plugins", "--json", *[arg for f in files for arg in ("--plugin", str(f))]]) == 0
    rows = {(r["kind"], r["name"]): r for r in json.loads(capsys.readouterr().out)}
    mine = {("sink", "event_count"): files[0], ("sampler", "newest"): files[1],
            ("artifact kind", "json"): files[2], ("algorithm", "research-only"): files[3],
            ("stage", "diff_size"): files[4], ("sink", "diff_size_log"): files[4]}
    for key, path in mine.items():
        assert rows[key]["origin"] == str(path.resolve()), key
    assert rows[("sink", "diff_size_log")]["about"].startswith("(made by its stage)")
    for key in (("stage", "research"), ("sampler", "greedy"), ("artifact kind", "program"),
                ("algorithm", "asi-evolve")):
        assert rows[key]["origin"] == "built-in", key
    assert main(["kinds", "--plugin", str(files[2])]) == 0
    listed = [line.split()[2] for line in capsys.readouterr().out.splitlines()]
    assert listed == ["program", "files", "playbook", "text", "json"]


def test_two_plugins_of_one_name_are_one_line_naming_both_files(tmp_path, capsys):
    first = doc_plugin(tmp_path, "sampler.md", "newest.py")
    second = tmp_path / "other" / "newest.py"
    second.parent.mkdir()
    second.write_text(first.read_text())  # the same class name and sampler name, another file
    assert main(["plugins", "--plugin", str(first), "--plugin", str(second)]) == 2
    assert one_line_error(capsys) == (f"evoforge: error: --plugin: sampler 'newest' is defined twice: by "
                                      f"{first.resolve()} and by {second.resolve()}")


def test_a_plugin_file_that_defines_none_of_the_five_is_one_line_exit_2(tmp_path, capsys):
    empty = tmp_path / "nothing.py"
    empty.write_text("X = 1\n")
    assert main(["plugins", "--plugin", str(empty)]) == 2
    assert one_line_error(capsys) == (f"evoforge: error: --plugin: plug-in {empty}: defines no stage, sink, "
                                      f"sampler, artifact kind or algorithm (a subclass of Stage, Sink, "
                                      f"ParentSampler, ArtifactKind or Algorithm)")
