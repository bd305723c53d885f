"""Every shape of OpenEvolve example folder runs in `evoforge run` unchanged (bench/openevolve_sweep.py).

One sweep over tests/fixtures/openevolve_shapes/ (one folder per shape: no combined_score, an
error entry with a score, async evaluate, a cascade, a C program, a Rust program, a string-only
EVOLVE block, feature dimensions in config.yaml) runs each folder's own evaluate() and then
`evoforge run FOLDER` offline with 8 evaluations; each test reads one run folder back and
asserts the value that shows its shape was handled.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from evoforge.infra.evolve_block import split_program
from evoforge.infra.nodes import EVALUATED, FAILED, Node
from tests.helpers import REPO, cli_env, read_nodes, read_status, run_cli

SHAPES = REPO / "tests" / "fixtures" / "openevolve_shapes"
SWEEP = REPO / "bench" / "openevolve_sweep.py"
EVALS = 8

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """The sweep's rows by folder name (the sweep runs once for the module)."""
    out = tmp_path_factory.mktemp("sweep")
    rows_file = out / "rows.json"
    done = subprocess.run([sys.executable, str(SWEEP), "--out", str(out), "--max-evals", str(EVALS),
                           "--json", str(rows_file)], cwd=out, env=cli_env(out), capture_output=True,
                          text=True, timeout=900)
    assert rows_file.is_file(), done.stdout + done.stderr
    rows = {row["folder"]: row for row in json.loads(rows_file.read_text())}
    assert sorted(rows) == sorted(p.name for p in SHAPES.iterdir() if (p / "evaluator.py").is_file())
    assert "| folder | own evaluate() works? | evoforge run ok? | best score |" in done.stdout
    return rows


def nodes_of(row: dict) -> tuple[Node, list[Node]]:
    """The seed and the evaluated children of one sweep row's run."""
    nodes = read_nodes(Path(row["run_dir"]))
    seed = next(n for n in nodes if n.origin == "seed")
    return seed, [n for n in nodes if n.origin != "seed" and n.status == EVALUATED]


def ran(row: dict) -> None:
    assert row["own_evaluate"] == "yes", row
    assert row["evoforge_run"] == "ok", row
    assert row["evaluations"] == EVALS


def test_no_combined_score_scores_the_mean_of_the_numeric_metrics(sweep: dict) -> None:
    row = sweep["no_combined_score"]
    ran(row)
    seed, children = nodes_of(row)
    for node in [seed, *children]:
        assert "combined_score" not in node.metrics
        mean = (node.metrics["accuracy_score"] + node.metrics["smoothness_score"]) / 2
        assert node.score_full == pytest.approx(mean)  # the boolean runs_successfully is left out
        assert node.metrics["runs_successfully"] == 1.0 and node.artifacts["note"]
    assert "mean of 2 numeric metrics" in seed.artifacts["score_rule"]
    assert row["best_score"] == pytest.approx(max(n.score_full for n in [seed, *children]))


def test_feature_dimensions_are_left_out_of_the_mean(sweep: dict) -> None:
    row = sweep["feature_dimensions"]
    ran(row)
    seed, children = nodes_of(row)
    for node in [seed, *children]:
        assert node.metrics["code_size"] > 100 and node.metrics["complexity"] == 7.0
        mean = (node.metrics["slope_score"] + node.metrics["intercept_score"]) / 2
        assert node.score_full == pytest.approx(mean)
    assert seed.score_full == pytest.approx(2 / 3)


def test_async_evaluate_is_awaited(sweep: dict) -> None:
    row = sweep["async_evaluate"]
    ran(row)
    seed, children = nodes_of(row)
    assert seed.score_full == pytest.approx(1 / (1 + abs(1.5 - 3.0)))
    assert all(n.metrics["awaited"] == 1.0 for n in [seed, *children])


def test_cascade_merges_stage1_and_an_async_stage2(sweep: dict) -> None:
    row = sweep["cascade"]
    ran(row)
    seed, children = nodes_of(row)
    for node in [seed, *children]:
        assert node.metrics["stage1_passed"] == 1.0  # from evaluate_stage1
        assert node.artifacts["stage2"] == "ran"  # from the async evaluate_stage2's EvaluationResult
        assert node.score_full == pytest.approx(1 / (1 + 1000 * node.metrics["stage2_error"]))


def _compiled_program_ran(row: dict, marker: str, value: float) -> None:
    ran(row)
    seed, children = nodes_of(row)
    assert seed.score_full == pytest.approx(1 / (1 + 100 * abs(value)), rel=1e-6)
    assert seed.metrics["abs_error"] == pytest.approx(abs(value), rel=1e-6)
    changed = [n for n in children if "abs_error" in n.metrics and n.code != seed.code]
    assert len({n.score_full for n in changed}) >= 2  # mutated programs compiled, ran, scored apart
    for node in changed:
        assert node.code.count(marker) == 1
        assert split_program(node.code).tail == split_program(seed.code).tail


def test_c_program_is_compiled_and_run_by_its_evaluator(sweep: dict) -> None:
    leibniz = 4 * sum((-1) ** k / (2 * k + 1) for k in range(10))
    _compiled_program_ran(sweep["c_program"], "// EVOLVE-BLOCK-START", leibniz - math.pi)


def test_rust_program_is_compiled_and_run_by_its_evaluator(sweep: dict) -> None:
    # rustup's rustc lives under /root (closed to the sandbox's uid): the task exposes its toolchain
    row = sweep["rust_program"]
    basel = sum(1 / k**2 for k in range(1, 11))
    _compiled_program_ran(row, "// EVOLVE-BLOCK-START", basel - math.pi**2 / 6)


def test_string_only_block_gets_non_numeric_edits(sweep: dict) -> None:
    row = sweep["string_only"]
    ran(row)
    seed, children = nodes_of(row)
    assert read_status(Path(row["run_dir"]))["failed_research"] == 0  # never "nothing to change"
    blocks = {split_program(n.code).block for n in children} - {split_program(seed.code).block}
    assert len(blocks) >= 2
    edited = "".join(blocks)
    assert re.search(r'method = "(insertion|merge)"|reverse_first = True', edited)


def test_error_entry_seed_is_refused_then_accepted_with_the_flag(sweep: dict, tmp_path: Path) -> None:
    row = sweep["error_entry"]
    assert row["own_evaluate"].startswith("yes (error entry: step 0.25")
    assert row["evoforge_run"].startswith("exit 2: evoforge: error: the initial program of 'error_entry'")
    assert "--accept-failing-seed" in row["evoforge_run"]
    run_dir = Path(row["run_dir"])
    seed = next(n for n in read_nodes(run_dir) if n.origin == "seed")
    assert seed.status == FAILED and seed.score_full == 0.0

    out = run_dir.parent.parent  # the sweep's folder: its workspace and config (cognition, MLflow off)
    again = run_cli(["run", str(SHAPES / "error_entry"), "--run-dir", str(run_dir), "--workspace",
                     str(out / "workspace"), "--config", str(out / "sweep.yaml"), "--max-evals", str(EVALS),
                     "--quiet", "--accept-failing-seed"], tmp_path)
    assert again.returncode == 0, again.stderr
    nodes = read_nodes(run_dir)
    seed = next(n for n in nodes if n.origin == "seed")
    assert seed.status == EVALUATED and seed.score_full == 0.0  # evaluated again, accepted
    assert seed.artifacts["error"] == "step 0.25 is below the minimum 0.5"
    erring = [n for n in nodes if n.artifacts.get("error")]
    assert all(n.status == EVALUATED and n.score_full == 0.0 for n in erring)  # OpenEvolve's record
