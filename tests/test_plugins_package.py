"""Plug-ins from an installed package: the package of docs/extend/plugins.md (its pyproject.toml as
it stands, holding the examples of docs/extend/), pip-installed into a virtualenv that sees
evoforge, advertises one of each kind through the `evoforge.plugins` entry points; `evoforge
plugins` lists them under the package's name, and one short offline run uses all five."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from evoforge.infra.nodestore import NodeStore
from evoforge.stages.sample.resume import SAMPLER_STATE_META
from tests.helpers import REPO, cli_env, read_nodes
from tests.test_plugins_files import doc_plugin, json_task

PACKAGE = "evoforge-json"
MODULES = {"json_doc.py": "artifact-kind.md", "newest.py": "sampler.md", "event_count.py": "sink.md",
           "diff_size.py": "stage.md", "json_line.py": "plugins.md"}


def build_package(tmp_path: Path) -> Path:
    """The package folder: docs/extend/plugins.md's pyproject.toml and the pages' plug-in files."""
    root = tmp_path / "evoforge-json"
    package = root / "evoforge_json"
    package.mkdir(parents=True)
    text = (REPO / "docs" / "extend" / "plugins.md").read_text()
    (pyproject,) = re.findall(r'```toml title="pyproject.toml"\n(.*?)```', text, re.S)
    (root / "pyproject.toml").write_text(pyproject)
    (package / "__init__.py").write_text("")
    for name, page in MODULES.items():
        doc_plugin(package, page, name)
    return root


def venv_with(package: Path, tmp_path: Path) -> Path:
    """A virtualenv that sees this interpreter's packages (evoforge among them), with `package`
    installed into it offline; its python."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
                   check=True, timeout=120)
    python = venv / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import setuptools, pip, evoforge.flows.cli"],
                           capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, f"the virtualenv lacks setuptools, pip or evoforge: {probe.stderr}"
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation",
                              "--no-deps", str(package)], capture_output=True, text=True, timeout=300,
                             cwd=tmp_path)
    assert install.returncode == 0, install.stderr
    return python


def evoforge(python: Path, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", "evoforge.flows.cli", *args], cwd=tmp_path,
                          env=cli_env(tmp_path), capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_an_installed_package_plugs_in_one_of_each_kind_and_a_run_uses_them_all(tmp_path):
    python = venv_with(build_package(tmp_path), tmp_path)

    listed = evoforge(python, ["plugins", "--json"], tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = {(r["kind"], r["name"]): r["origin"] for r in json.loads(listed.stdout)}
    for key in (("artifact kind", "json"), ("sampler", "newest"), ("sink", "event_count"),
                ("stage", "diff_size"), ("sink", "diff_size_log"), ("algorithm", "json-line")):
        assert rows.get(key) == PACKAGE, key
    assert rows[("algorithm", "asi-evolve")] == rows[("sampler", "greedy")] == "built-in"
    assert subprocess.run([sys.executable, "-c", "import evoforge_json"], cwd=tmp_path,
                          capture_output=True).returncode != 0  # installed in the virtualenv only

    run_dir = tmp_path / "run"
    run = evoforge(python, ["run", str(json_task(tmp_path)), "--algorithm", "json-line",
                            "--plugin", "diff_size", "--run-dir", str(run_dir), "--workspace",
                            str(tmp_path / "ws"), "--max-evals", "5", "--no-mlflow", "--quiet"], tmp_path)
    assert run.returncode == 0, run.stderr
    saved = json.loads((run_dir / "config.json").read_text())
    assert (saved["engine"]["algorithm"], saved["search"]["sampler"]) == ("json-line", "newest")
    assert "research(8) -> engineer(2) -> diff_size(" in (run_dir / "run.log").read_text()  # the stage
    nodes = read_nodes(run_dir)
    evaluated = [n for n in nodes if n.was_evaluated]
    assert len(evaluated) >= 5 and all(isinstance(json.loads(n.code), dict) for n in evaluated)  # the kind
    counts = json.loads((run_dir / "event_count.json").read_text())
    assert counts["evaluated"] == len(evaluated)  # the sink, alone: every evaluation's event
    logged = dict(line.split() for line in (run_dir / "diff_sizes.txt").read_text().splitlines())
    assert {n.id for n in evaluated if n.origin != "seed"} <= set(logged)  # the stage's own sink
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        state = store.get_meta(SAMPLER_STATE_META)
    assert state["picked"] == len([n for n in nodes if n.origin != "seed"])  # the sampler chose every parent
