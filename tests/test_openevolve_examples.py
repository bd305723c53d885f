"""OpenEvolve's own R and Rust examples run under `evoforge run` unchanged (guide: openevolve-examples).

tests/fixtures/openevolve_examples/ holds OpenEvolve's ``r_robust_regression`` and
``rust_adaptive_sort`` as they are upstream, and one derived folder of each with one stated change
(NOTICE there): upstream, the R evaluator formats its numpy arrays into ``read.csv("...")`` and the
Rust one needs crates.io, so on this machine (and in CI) their own evaluate() returns 0.0. The
unchanged folders must fail in evoforge exactly as their own evaluate() fails (Rscript and cargo
reached inside the sandbox); the derived ones must score the seed as their own evaluate() does and
compile and run mutated children. One sweep (bench/openevolve_sweep.py) runs them all.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evoforge.evaluators.compat.toolchains import behind_closed_folder, named_commands
from evoforge.evaluators.fitness import openevolve_fitness
from evoforge.evaluators.task import load_task
from evoforge.infra.nodes import EVALUATED, FAILED, Node
from tests.helpers import REPO, cli_env, read_nodes

EXAMPLES = REPO / "tests" / "fixtures" / "openevolve_examples"
SWEEP = REPO / "bench" / "openevolve_sweep.py"
EVALS = 8


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """The sweep's rows by folder name (the sweep runs once for the module)."""
    out = tmp_path_factory.mktemp("examples")
    rows_file = out / "rows.json"
    done = subprocess.run([sys.executable, str(SWEEP), "--examples", str(EXAMPLES), "--out", str(out),
                           "--max-evals", str(EVALS), "--json", str(rows_file)], cwd=out, env=cli_env(out),
                          capture_output=True, text=True, timeout=900)
    assert rows_file.is_file(), done.stdout + done.stderr
    return {row["folder"]: row for row in json.loads(rows_file.read_text())}


def nodes_of(row: dict) -> tuple[Node, list[Node]]:
    """The seed and the other nodes of one sweep row's run."""
    nodes = read_nodes(Path(row["run_dir"]))
    return next(n for n in nodes if n.origin == "seed"), [n for n in nodes if n.origin != "seed"]


def own_fitness(row: dict, folder: str) -> float:
    """OpenEvolve's fitness of the metrics the folder's own evaluate() gave its initial program."""
    metrics = {k: float(v) for k, v in row["own_metrics"].items() if isinstance(v, int | float)}
    return openevolve_fitness(metrics, (), load_task(EXAMPLES / folder).feature_dimensions)[0]


def test_the_evaluators_tools_are_found_and_a_rustup_toolchain_is_exposed() -> None:
    assert {"cargo"} <= set(named_commands((EXAMPLES / "rust_adaptive_sort" / "evaluator.py").read_text()))
    assert {"Rscript"} <= set(named_commands((EXAMPLES / "r_robust_regression" / "evaluator.py").read_text()))
    task = load_task(EXAMPLES / "rust_adaptive_sort")
    cargo = shutil.which("cargo")
    assert cargo is not None, "no cargo on PATH: the Rust examples cannot run"
    if not behind_closed_folder(Path(cargo)):  # e.g. Debian's /usr/bin/cargo: the sandbox sees it
        assert task.toolchain.expose == ()
        return
    tools = dict(task.toolchain.tools)
    exposed = [Path(p) for p in task.toolchain.expose]
    assert any(folder in Path(tools["cargo"]).parents for folder in exposed), task.toolchain.describe()
    path = dict(task.toolchain.env)["PATH"].split(os.pathsep)
    assert path[0] == str(Path(tools["cargo"]).parent)  # the real cargo, not the rustup proxy
    assert Path(tools["cargo"]).resolve().name == "cargo"
    assert set(dict(task.toolchain.env)) == {"PATH"}  # nothing else of the orchestrator's environment


@pytest.mark.slow
def test_unchanged_r_example_fails_in_evoforge_as_its_own_evaluate_does(sweep: dict) -> None:
    row = sweep["r_robust_regression"]
    assert row["own_evaluate"] == "yes", row
    assert row["own_metrics"]["score"] == 0.0 and row["own_metrics"]["mse"] == float("inf")
    seed, _ = nodes_of(row)
    assert seed.status == FAILED
    assert "not finite (inf)" in seed.error  # OpenEvolve's fitness of these metrics is inf too
    results = seed.artifacts["test_results"]
    assert "R execution failed" in results and "as.matrix -> read.csv" in results  # Rscript ran, sandboxed
    assert row["evoforge_run"].startswith("exit 2: ")


@pytest.mark.slow
def test_unchanged_rust_example_reaches_cargo_and_fails_on_crates_io_as_its_own_does(sweep: dict) -> None:
    row = sweep["rust_adaptive_sort"]
    assert row["own_evaluate"] == "yes", row
    assert row["own_metrics"]["compile_success"] == 0.0
    seed, _ = nodes_of(row)
    assert seed.status == FAILED
    assert seed.artifacts["error"] == "Compilation failed"
    assert "failed to get `rand`" in seed.artifacts["stderr"]  # cargo ran in the sandbox, offline


@pytest.mark.slow
def test_r_example_scores_its_seed_as_its_own_evaluate_and_runs_mutants(sweep: dict) -> None:
    row = sweep["r_robust_regression_fixed"]
    # the block's one number is cbind(1, X)'s intercept column: rescaling it leaves the least-squares
    # fit (and the score) unchanged, so the offline proposer soon repeats itself and the proposal
    # cap ends the run before 8 evaluations
    assert (row["own_evaluate"], row["evoforge_run"]) == ("yes", "ok"), row
    assert row["evaluations"] >= 4
    seed, children = nodes_of(row)
    assert seed.status == EVALUATED
    assert seed.score_full == pytest.approx(own_fitness(row, "r_robust_regression_fixed"), rel=1e-6)
    assert seed.metrics["score"] == pytest.approx(row["own_metrics"]["score"], abs=0.05)  # timing bonus
    ran = [n for n in children if n.status == EVALUATED and n.code != seed.code]
    assert ran and all(n.metrics["r_squared"] > 0.3 for n in ran)  # mutated R programs sourced and ran


@pytest.mark.slow
def test_rust_example_builds_with_cargo_in_the_sandbox_and_runs_mutants(sweep: dict) -> None:
    row = sweep["rust_adaptive_sort_offline"]
    assert (row["own_evaluate"], row["evoforge_run"], row["evaluations"]) == ("yes", "ok", EVALS), row
    seed, children = nodes_of(row)
    assert seed.status == EVALUATED
    assert (seed.metrics["compile_success"], seed.metrics["correctness"]) == (1.0, 1.0)
    assert seed.score_full == pytest.approx(own_fitness(row, "rust_adaptive_sort_offline"), abs=0.01)
    built = [n for n in children if n.code != seed.code and n.metrics.get("compile_success") == 1.0]
    assert built, [(n.status, n.error) for n in children]
    assert len({n.score_full for n in built} | {seed.score_full}) >= 2
