"""`evoforge cognition add|search|list|remove`, end to end in-process, with the real model."""

from __future__ import annotations

import json

import pytest

from evoforge.evaluators.task import builtin_tasks_dir
from evoforge.flows.cli import main

PRIORS = builtin_tasks_dir() / "circle_packing" / "cognition" / "priors.md"


@pytest.fixture
def workspace(tmp_path):
    return str(tmp_path / "ws")


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_add_search_list_remove(capsys, workspace):
    code, out, _ = _run(capsys, "cognition", "add", str(PRIORS), "--task", "circle_packing", "--workspace",
                        workspace)
    assert code == 0 and "already present" in out
    added = int(out.split()[1])
    assert added >= 12
    code, out, _ = _run(capsys, "cognition", "add", str(PRIORS), "--task", "circle_packing", "--workspace",
                        workspace)
    assert code == 0 and out.startswith("added 0 item(s)") and f"{added} already present" in out

    code, out, _ = _run(capsys, "cognition", "search", "honeycomb rows as the initial layout", "--k", "3",
                        "--min-score", "-1", "--task", "circle_packing", "--json", "--workspace", workspace)
    hits = json.loads(out)
    assert code == 0 and len(hits) == 3 and "hexagonal" in hits[0]["title"].lower()
    assert hits[0]["score"] >= hits[1]["score"] >= hits[2]["score"]
    code, out, _ = _run(capsys, "cognition", "search", "honeycomb rows", "--workspace", workspace)
    assert code == 0 and "Hexagonal" in out

    code, out, _ = _run(capsys, "cognition", "list", "--json", "--workspace", workspace)
    items = json.loads(out)
    assert code == 0 and len(items) == added and all(i["task"] == "circle_packing" for i in items)
    victim = items[0]["id"]
    code, out, _ = _run(capsys, "cognition", "remove", victim, "--workspace", workspace)
    assert (code, out) == (0, f"removed {victim}\n")
    code, out, _ = _run(capsys, "cognition", "list", "--workspace", workspace)
    assert code == 0 and len(out.strip().splitlines()) == added - 1 and victim not in out


def test_user_errors_are_one_line_and_exit_2(capsys, tmp_path, workspace):
    bad = tmp_path / "bad.md"
    bad.write_text("no heading here\n")
    for argv, words in [(["add", str(bad)], "bad.md:1"),
                        (["add", str(tmp_path / "missing.jsonl")], "not found"),
                        (["remove", "0123456789abcdef"], "no cognition item")]:
        code, out, err = _run(capsys, "cognition", *argv, "--workspace", workspace)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1
        assert lines[0].startswith("evoforge: error: ") and words in lines[0]


def test_the_config_chooses_the_embedder(capsys, tmp_path, workspace):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cognition:\n  embedding: lexical\n")
    code, _, _ = _run(capsys, "cognition", "add", str(PRIORS), "--workspace", workspace, "--config", str(cfg))
    assert code == 0
    code, _, err = _run(capsys, "cognition", "list", "--workspace", workspace)  # default minilm: a mismatch
    assert code == 2 and "built with embedder 'lexical fallback" in err
