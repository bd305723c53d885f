"""README.md is part of the product: it opens with the commands CI runs, and what it and the docs
tell a user to run works as written (tests/test_docs.py checks every block of both)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evoforge.flows.cli import build_parser, main
from tests.test_docs import blocks, evoforge_commands

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, re.DOTALL)


def test_readme_opens_with_the_run_command_and_the_test_command_ci_runs():
    first, second = _blocks("bash")[:2]
    assert first.strip() == "pip install -e . && evoforge run circle_packing"
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == second.strip()


def test_the_readme_tours_the_commands_a_newcomer_needs():
    """README is short; what it shows parses (every block of README and docs/ is checked in
    tests/test_docs.py, the generated config reference against the models included)."""
    assert len(README.splitlines()) <= 200
    parser = build_parser()
    commands = evoforge_commands(only="README.md")
    assert {argv[0] for argv in commands} >= {"run", "status", "leaderboard", "best", "report", "tasks",
                                              "llm-sim", "stages", "algorithms", "doctor"}
    for argv in commands:
        if argv != ["--version"]:
            parser.parse_args(argv)


READ_ONLY = ("status", "leaderboard", "best", "report", "tasks", "--version")


@pytest.mark.slow
def test_the_readmes_commands_on_a_run_work_as_written(tmp_path, monkeypatch, capsys):
    """Run the commands of README and docs/ that read a run, as written, from a folder holding a
    finished run of each task they read."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text("cognition: {enabled: false}\nanalyze: {enabled: false}\n")
    for task in ("circle_packing", "tour_files"):  # the tasks the docs' commands read runs of
        assert main(["run", task, "--max-evals", "6", "--config", "c.yaml", "--no-mlflow", "--quiet"]) == 0
    ran = []
    for argv in evoforge_commands():
        if argv[0] not in READ_ONLY:
            continue
        capsys.readouterr()
        if argv == ["--version"]:
            with pytest.raises(SystemExit) as stop:
                main(argv)
            assert stop.value.code == 0
        else:
            assert main(argv) == 0, argv
        assert capsys.readouterr().out.strip(), argv
        ran.append(argv[0])
    assert set(ran) == set(READ_ONLY)
    assert (tmp_path / "best.py").read_text() == (tmp_path / "evoforge-runs" / "circle_packing" / "best"
                                                  / "program.py").read_text()
    best_files = tmp_path / "evoforge-runs" / "tour_files" / "best" / "files"
    assert {p.name: p.read_text() for p in (tmp_path / "best-tour").iterdir()} == {
        p.name: p.read_text() for p in best_files.iterdir()} and len(list(best_files.iterdir())) == 2


def test_the_docs_stage_example_plugs_in_and_records_its_data(tmp_path):
    import asyncio

    from evoforge.stages.pipeline.plugins import load_plugins
    from evoforge.stages.sinks.base import Event, EventKind
    from tests.engine_fakes import FakeEngineer, FakeResearch, Log, make_harness

    (example,) = [b.body for b in blocks("python") if b.body.startswith('"""diff_size.py:')]
    path = tmp_path / "diff_size.py"
    path.write_text(example)
    (stage,) = load_plugins([str(path)])
    assert stage.name == "diff_size" and stage.after == "engineer"
    log = Log()
    harness = make_harness(tmp_path, [FakeResearch(log), FakeEngineer(log), stage], max_evals=5)
    asyncio.run(harness.run())
    nodes = [n for n in harness.nodes() if n.origin != "seed"]
    harness.close()
    data = type(stage).data
    assert len(nodes) == 4 and all(data.peek(n).lines == 1 for n in nodes)  # its data, on every node
    (sink,) = stage.sinks(type("Ctx", (), {"paths": type("P", (), {"root": tmp_path})()})())
    sink.record([Event(EventKind.FINISHED, n) for n in nodes])
    assert (tmp_path / "diff_sizes.txt").read_text() == "".join(f"{n.id} 1\n" for n in nodes)
