"""README.md is part of the product: its commands and config reference must stay true."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from evoforge.flows.cli import build_parser, main
from evoforge.infra.config import RunConfig
from evoforge.infra.config_load import load_config

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, re.DOTALL)


def test_readme_opens_with_the_run_command_and_the_test_command_ci_runs():
    first, second = _blocks("bash")[:2]
    assert first.strip() == "pip install -e . && evoforge run circle_packing"
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == second.strip()


def test_the_config_reference_is_the_full_default_config(tmp_path):
    (block,) = [b for b in _blocks("yaml") if b.startswith("seed: 0\n")]
    path = tmp_path / "c.yaml"
    path.write_text(block)
    assert load_config(path, environ={}) == RunConfig()
    # and it names every key there is
    def keys(d, model, prefix=""):  # a section's keys; a mapping-valued key (engine.workers) is one key
        out = set()
        for k, v in d.items():
            out.add(prefix + k)
            if isinstance(v, dict) and isinstance(getattr(model, k, None), BaseModel):
                out |= keys(v, getattr(model, k), prefix + k + ".")
        return out
    def fields(model, prefix=""):  # every key, the ones left out of dumps (secrets) included
        out = set()
        for name in type(model).model_fields:
            out.add(prefix + name)
            value = getattr(model, name)
            if isinstance(value, BaseModel):
                out |= fields(value, prefix + name + ".")
        return out
    assert keys(yaml.safe_load(block), RunConfig()) == fields(RunConfig())


def _evoforge_commands() -> list[list[str]]:
    """Every `evoforge …` line of README's bash blocks (after any VAR=value prefixes), as argv."""
    out = []
    for block in _blocks("bash"):
        for line in block.splitlines():
            words = line.split("#")[0].replace("&", "").split()
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                words = words[1:]
            if words[:1] == ["evoforge"]:
                out.append(words[1:])
    return out


def test_the_cli_lines_in_the_readme_parse():
    parser = build_parser()
    commands = _evoforge_commands()
    assert len(commands) >= 15
    for argv in commands:
        if argv == ["--version"]:
            continue  # argparse prints it and exits: run for real below
        parser.parse_args(argv)


READ_ONLY = ("status", "leaderboard", "best", "report", "tasks", "--version")


@pytest.mark.slow
def test_the_readmes_commands_on_a_run_work_as_written(tmp_path, monkeypatch, capsys):
    """Run README's commands that read a run, as written, from a folder holding a finished run."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text("cognition: {enabled: false}\nanalyze: {enabled: false}\n")
    for task in ("circle_packing", "tour_files"):  # the tasks README's commands read runs of
        assert main(["run", task, "--max-evals", "6", "--config", "c.yaml", "--no-mlflow", "--quiet"]) == 0
    ran = []
    for argv in _evoforge_commands():
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


def test_the_readme_stage_example_plugs_in_and_records_its_data(tmp_path):
    import asyncio

    from evoforge.stages.pipeline.plugins import load_plugins
    from evoforge.stages.sinks.base import Event, EventKind
    from tests.engine_fakes import FakeEngineer, FakeResearch, Log, make_harness

    (example,) = [b for b in _blocks("python") if b.startswith('"""diff_size.py:')]
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
