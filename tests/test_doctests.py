"""The `>>>` examples in the product's docstrings run as tests: one test per module that has any.

A module is imported by its installed name (`evoforge.stages.sample.base` is
`stages/sample/base.py`, through the package-dir mapping), never by its path, so no module body
runs twice. Task folders and the sandbox's compatibility modules are not evoforge modules.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("flows", "stages", "evaluators", "cognition", "infra")  # folder X is evoforge.X
NOT_MODULES = ("evaluators/tasks", "evaluators/compat")


def _with_examples() -> list[str]:
    names = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if relative.as_posix().startswith(NOT_MODULES) or path.name == "__main__.py":
                continue
            if ">>>" in path.read_text(encoding="utf-8"):
                parts = relative.with_suffix("").parts
                names.append(".".join(("evoforge", *(parts[:-1] if path.name == "__init__.py" else parts))))
    return names


MODULES = _with_examples()


def test_the_product_has_examples_to_run() -> None:
    assert len(MODULES) >= 30, MODULES


@pytest.mark.parametrize("name", MODULES)
def test_examples(name: str) -> None:
    module = importlib.import_module(name)
    assert Path(module.__file__ or "").resolve().is_relative_to(ROOT), f"{name} is not the checkout's"
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = [t for t in finder.find(module, name) if t.examples]
    report: list[str] = []
    for test in tests:
        runner.run(test, out=report.append)
    results = runner.summarize(verbose=False)
    skipped_only = all(ex.options for t in tests for ex in t.examples)  # +SKIP examples (processes)
    assert results.attempted > 0 or skipped_only, f"{name}: no examples ran"
    assert results.failed == 0, "".join(report)
