"""README.md is part of the product: its commands and config reference must stay true."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

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
    (block,) = _blocks("yaml")
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
    assert keys(yaml.safe_load(block)) == keys(RunConfig().model_dump())


def test_the_cli_lines_in_the_readme_parse():
    parser = build_parser()
    lines = [line.split("#")[0].strip() for block in _blocks("bash") for line in block.splitlines()]
    commands = [line.split("evoforge ", 1)[1] for line in lines
                if line.startswith(("evoforge ", "OPENAI_API_KEY")) and "evoforge " in line]
    assert len(commands) >= 6
    for command in commands:
        argv = command.replace("&", "").split()
        parser.parse_args(argv)
