"""README.md is part of the product: its commands and config reference must stay true."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from pydantic import BaseModel

from evoforge.flows.cli import build_parser
from evoforge.infra.config import RunConfig, load_config

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
    def keys(d, prefix=""):
        out = set()
        for k, v in d.items():
            out.add(prefix + k)
            if isinstance(v, dict):
                out |= keys(v, prefix + k + ".")
        return out
    def fields(model, prefix=""):  # every key, the ones left out of dumps (secrets) included
        out = set()
        for name in type(model).model_fields:
            out.add(prefix + name)
            value = getattr(model, name)
            if isinstance(value, BaseModel):
                out |= fields(value, prefix + name + ".")
        return out
    assert keys(yaml.safe_load(block)) == fields(RunConfig())


def test_the_cli_lines_in_the_readme_parse():
    parser = build_parser()
    lines = [line.split("#")[0].strip() for block in _blocks("bash") for line in block.splitlines()]
    commands = [line.split("evoforge ", 1)[1] for line in lines
                if line.startswith(("evoforge ", "OPENAI_API_KEY")) and "evoforge " in line]
    assert len(commands) >= 6
    for command in commands:
        argv = command.replace("&", "").split()
        parser.parse_args(argv)


def test_the_readme_stage_example_plugs_in_and_runs(tmp_path):
    import asyncio

    from tests.engine_fakes import FakeEngineer, FakeResearch, Log, make_harness

    (example,) = [b for b in _blocks("python") if "class Analyze(Stage)" in b]
    scope: dict = {}
    exec(compile(example, "README.md", "exec"), scope)
    log = Log()
    harness = make_harness(tmp_path, [FakeResearch(log), FakeEngineer(log), scope["Analyze"]()], max_evals=5)
    asyncio.run(harness.run())
    analysed = [n for n in harness.nodes() if n.origin != "seed"]
    assert len(analysed) == 4 and all(n.analysis == f"scored {n.score_full}" for n in analysed)
