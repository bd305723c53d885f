"""The `files` artifact kind: several files of a project folder evolve together.

An answer edits files named by `### FILE:` lines; an edit naming a file outside the task, or
outside a file's EVOLVE block, is refused with the reason; the evaluator gets the whole folder
with every file the candidate did not change byte for byte; the guardrails check each file; the
offline proposer and the LLM simulator edit one file at a time in the format the prompt asks for.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from pathlib import Path

import pytest

from evoforge.evaluators.evaluation import evaluate_program
from evoforge.evaluators.task import TaskError, load_task
from evoforge.infra.artifacts.bundle import pack, unpack
from evoforge.infra.artifacts.files import Files
from evoforge.infra.edits import SearchReplace, render_diff
from evoforge.infra.evolve_block import EditError
from evoforge.infra.offline.answer import render_answer
from evoforge.infra.offline.mutate import mutate_program
from evoforge.infra.prompt_format import FORMAT_DIFF, FORMAT_REWRITE
from evoforge.stages.evaluation.guardrails import static_violation

SOLVER = ("import helper\n# EVOLVE-BLOCK-START\nRATE = 0.5\nSTEPS = 3\n# EVOLVE-BLOCK-END\n\n"
          "def run():\n    return RATE * STEPS\n")
HELPER = "SCALE = 2\n\ndef scale(x):\n    return x * SCALE\n"
NOTES = "tone: plain\nno trailing newline here"  # a text file without a final newline
KIND = Files(files=("solver.py", "helper.py"))
PARENT = pack({"solver.py": SOLVER, "helper.py": HELPER})


def block(search: str, replace: str) -> str:
    return render_diff([SearchReplace(search, replace)])


def test_an_answer_edits_the_files_it_names_and_leaves_the_others_as_they_were() -> None:
    answer = ("Scale more and step longer.\n### FILE: helper.py\n" + block("SCALE = 2\n", "SCALE = 3\n")
              + "### FILE: solver.py\n" + block("STEPS = 3\n", "STEPS = 4\n"))
    applied = KIND.apply(PARENT, answer)
    files = unpack(applied.code)
    assert files["helper.py"] == HELPER.replace("SCALE = 2", "SCALE = 3")
    assert files["solver.py"] == SOLVER.replace("STEPS = 3", "STEPS = 4")
    assert applied.motivation == "Scale more and step longer."
    one = KIND.apply(PARENT, "### FILE: helper.py\n" + block("SCALE = 2\n", "SCALE = 5\n"))
    assert unpack(one.code)["solver.py"] == SOLVER  # not named: the same text


def test_a_block_under_no_file_line_goes_to_the_one_file_it_matches() -> None:
    applied = KIND.apply(PARENT, "Longer.\n" + block("STEPS = 3\n", "STEPS = 9\n"))
    assert "STEPS = 9" in unpack(applied.code)["solver.py"]
    with pytest.raises(EditError, match="is in no file of the project"):
        KIND.apply(PARENT, block("NOT_THERE = 1\n", "X = 2\n"))


def test_a_fenced_file_replaces_the_whole_file_or_only_its_evolve_block() -> None:
    whole = KIND.apply(PARENT, "### FILE: helper.py\n```python\nSCALE = 7\n\ndef scale(x):\n"
                               "    return x + SCALE\n```\n")
    assert unpack(whole.code)["helper.py"] == "SCALE = 7\n\ndef scale(x):\n    return x + SCALE\n"
    inner = KIND.apply(PARENT, "### FILE: solver.py\n```python\nRATE = 0.9\nSTEPS = 3\n```\n")
    solver = unpack(inner.code)["solver.py"]
    assert solver.startswith("import helper\n# EVOLVE-BLOCK-START\nRATE = 0.9\n")  # spliced into the block
    assert solver.endswith("def run():\n    return RATE * STEPS\n")


@pytest.mark.parametrize(("answer", "reason"), [
    ("### FILE: evaluator.py\n" + block("x\n", "y\n"), "'evaluator.py', which is not an evolvable file"),
    ("### FILE: ../outside.py\n" + block("x\n", "y\n"), "'../outside.py', which is not an evolvable file"),
    ("### FILE: solver.py\n" + block("def run():\n", "def run(n=1):\n"),
     "solver.py: edit outside the EVOLVE block"),
    ("### FILE: helper.py\n" + block("SCALE = 2\n", "SCALE = (\n"),
     "helper.py: candidate has a syntax error"),
    ("### FILE: helper.py\n" + block("SCALE = 2\n", "SCALE = 2\n"), "does not change"),
    ("### FILE: helper.py\nI would change it but give no edit.\n", "under '### FILE: helper.py'"),
    ("```python\nx = 1\n```\n", "must follow a '### FILE: <path>' line"),
])
def test_an_unusable_edit_is_refused_with_its_reason(answer: str, reason: str) -> None:
    with pytest.raises(EditError, match=reason.replace("(", r"\(").replace(".", r"\.")):
        KIND.apply(PARENT, answer)


def _task(tmp_path: Path, yaml: str | None = None) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "solver.py").write_text(SOLVER)
    (root / "helper.py").write_text(HELPER)
    (root / "notes.txt").write_text(NOTES)
    (root / "data.bin").write_bytes(bytes(range(256)))  # a frozen file the evaluator reads
    (root / "evaluator.py").write_text(
        "import hashlib, os, sys\n"
        "def evaluate(program_path):\n"
        "    assert os.path.isdir(program_path), program_path\n"
        "    sys.path.insert(0, program_path)\n"
        "    import solver\n"
        "    digest = {n: hashlib.sha256(open(os.path.join(program_path, n), 'rb').read()).hexdigest()\n"
        "              for n in sorted(os.listdir(program_path))\n"
        "              if n not in ('__pycache__', '.evoforge-params.json')}\n"
        "    return {'combined_score': solver.run(), **digest}\n")  # text entries come back as artifacts
    (root / "task.yaml").write_text(yaml or "kind: files\nfiles: [solver.py, helper.py, notes.txt]\n")
    return root


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_the_evaluator_gets_the_whole_folder_with_unchanged_files_byte_for_byte(tmp_path: Path) -> None:
    root = _task(tmp_path)
    task = load_task(root)
    assert (task.kind, task.files) == ("files", ("solver.py", "helper.py", "notes.txt"))
    edit = "### FILE: solver.py\n" + block("STEPS = 3\n", "STEPS = 8\n")
    child = task.artifact.apply(task.initial_code, edit)
    outcome = asyncio.run(evaluate_program(task, child.code))
    assert outcome.ok, outcome.error
    assert outcome.score == pytest.approx(0.5 * 8)  # the candidate's solver.py ran
    shas = outcome.artifacts
    for name in ("helper.py", "notes.txt", "data.bin", "evaluator.py", "task.yaml"):
        assert shas[name] == _sha((root / name).read_bytes()), name  # untouched: byte-identical
    assert shas["solver.py"] == _sha(unpack(child.code)["solver.py"].encode())
    assert not (root / "notes.txt").read_text().endswith("\n")  # the packed copy gained one; the file did not


def test_the_guardrails_check_each_file_and_name_it(tmp_path: Path) -> None:
    task = load_task(_task(tmp_path, "kind: files\nfiles: [solver.py, helper.py]\n"
                                     "constraints: {required_names: [scale, run], "
                                     "forbidden_imports: [socket]}\n"))
    files = unpack(task.initial_code)
    assert static_violation(task.initial_code, task) is None
    frozen = pack({**files, "solver.py": files["solver.py"].replace("def run():", "def run(n=0):")})
    assert str(static_violation(frozen, task)).startswith(
        "static check: outside the EVOLVE block: solver.py: line 7")
    banned = pack({**files, "helper.py": "import socket\n" + files["helper.py"]})
    assert "helper.py: the program imports 'socket'" in str(static_violation(banned, task))
    missing = pack({**files, "helper.py": files["helper.py"].replace("def scale", "def grow")})
    assert "'scale' is not defined at the top level of any of the project's files" in str(
        static_violation(missing, task))
    broken = pack({**files, "helper.py": "def (:\n"})
    assert str(static_violation(broken, task)).startswith("static check: syntax: helper.py:")
    assert "the task's are solver.py, helper.py" in str(static_violation(pack({"solver.py": SOLVER}), task))


@pytest.mark.parametrize(("yaml", "message"), [
    ("kind: folder\n", "task.yaml: kind must be one of program, files, playbook, text, got 'folder'"),
    ("kind: files\n", "task.yaml: kind files needs 'files', the list of evolvable files"),
    ("kind: files\nfiles: []\n", "task.yaml: files must be a non-empty list"),
    ("kind: files\nfiles: [solver.py, gone.py]\n", "task.yaml: files: 'gone.py' does not exist in"),
    ("kind: files\nfiles: [../solver.py]\n", "task.yaml: files: '../solver.py' is outside the task folder"),
    ("kind: files\nfiles: [solver.py, solver.py]\n", "task.yaml: files: 'solver.py' is listed twice"),
    ("kind: files\nfiles: [evaluator.py]\n", "task.yaml: files: evaluator.py cannot evolve"),
    ("files: [solver.py]\n", "task.yaml: 'files' is for kind files (this task's kind is program)"),
    ("kind: files\nfiles: [solver.py]\nprogram: solver.py\n", "task.yaml: 'program' is for kind program"),
])
def test_a_malformed_files_task_is_one_line_naming_the_key(tmp_path: Path, yaml: str, message: str) -> None:
    with pytest.raises(TaskError) as caught:
        load_task(_task(tmp_path, yaml))
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_a_bad_files_task_exits_2_with_one_line_and_no_traceback(tmp_path: Path, capsys) -> None:
    from evoforge.flows.cli import main

    root = _task(tmp_path, "kind: files\nfiles: [solver.py, gone.py]\n")
    code = main(["run", str(root), "--workspace", str(tmp_path / "ws"), "--max-evals", "2", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert "task.yaml: files: 'gone.py' does not exist" in err[-1] and "Traceback" not in "\n".join(err)


@pytest.mark.parametrize("form", [FORMAT_DIFF, FORMAT_REWRITE])
def test_the_offline_proposer_edits_one_file_in_the_form_asked_and_the_kind_reads_it_back(form: str) -> None:
    task = load_task("tour_files")
    rng = random.Random(3)
    changed_files = set()
    for _ in range(12):
        mutation = mutate_program(task.initial_code, rng)
        before, after = unpack(task.initial_code), unpack(mutation.code)
        changed = [n for n in before if before[n] != after[n]]
        assert len(changed) == 1 and mutation.description.startswith(f"in {changed[0]}: ")
        changed_files.update(changed)
        answer = render_answer(task.initial_code, mutation, form, "Offline proposer (no LLM): x")
        assert f"### FILE: {changed[0]}" in answer
        assert task.artifact.apply(task.initial_code, answer).code == mutation.code
        assert static_violation(mutation.code, task) is None
    assert changed_files == {"tour.py", "improve.py"}  # both files get edits


def test_a_files_run_over_the_llm_simulator_evolves_both_files_and_keeps_them_apart(tmp_path: Path) -> None:
    """Through the openai client: the prompt shows the files and the rule, the answers name them,
    the run folder, `best/` and MLflow keep each file on its own."""
    import mlflow
    from mlflow.tracking import MlflowClient

    from evoforge.flows.cli import main
    from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
    from tests.helpers import read_nodes, read_status

    run_dir, ws = tmp_path / "run", tmp_path / "ws"
    with SimulatorProcess(SimConfig(median_s=0.02, sigma=0.2, slots=8, seed=5)) as sim:
        code = main(["run", "tour_files", "--run-dir", str(run_dir), "--workspace", str(ws), "--llm-base-url",
                     sim.base_url, "--max-evals", "16", "--workers", "research=4,engineer=2", "--seed", "2",
                     "--quiet"])
    assert code == 0
    task, nodes = load_task("tour_files"), read_nodes(run_dir)
    by_id = {n.id: n for n in nodes}
    children = [n for n in nodes if n.origin != "seed" and n.status == "evaluated"]
    assert len(children) >= 8
    edited = set()
    for child in children:
        before, after = unpack(by_id[child.parent_id].code), unpack(child.code)
        edited |= {name for name in before if before[name] != after[name]}
        assert child.diff.startswith(("--- a/tour.py", "--- a/improve.py"))
    assert edited == {"tour.py", "improve.py"}
    prompt = (run_dir / "nodes" / children[0].id / "prompt.md").read_text()
    assert "### FILE: tour.py" in prompt and "only these files may change: tour.py, improve.py" in prompt
    assert "### FILE: " in (run_dir / "nodes" / children[0].id / "answer.md").read_text()
    status = read_status(run_dir)
    best = by_id[status["best_node"]]
    for name, text in unpack(best.code).items():
        assert (run_dir / "best" / "files" / name).read_text() == text
        assert (run_dir / "nodes" / best.id / "files" / name).read_text() == text
    assert not (run_dir / "best" / "program.py").exists()
    client = MlflowClient(f"sqlite:///{(ws / 'mlflow.db').resolve()}")
    with mlflow.tracking._tracking_service.utils._use_tracking_uri(client.tracking_uri):
        runs = mlflow.search_runs(experiment_names=["evoforge/tour_files"], output_format="list",
                                  filter_string=f"tags.node_id = '{best.id}'")
    stored = {a.path for a in client.list_artifacts(runs[0].info.run_id, "files")}
    assert stored == {"files/tour.py", "files/improve.py"}
    assert task.artifact.stored_root() == "files"
