"""A tiny gated task (pilot / full / final) for the tests: a quadratic in one knob, cheap to
evaluate, with level-dependent scores. Its held-out `final` scores lie in [FINAL_LOW, FINAL_LOW + 1]
so that a test can look for them anywhere they must not be."""

from __future__ import annotations

from pathlib import Path

FINAL_LOW = 7777.0

PROGRAM = '''"""A toy model: score() is what the evaluator measures."""

try:
    from evoforge_knobs import knob
except ImportError:
    def knob(name, default, **_):
        return default


# EVOLVE-BLOCK-START
X = knob("x", 0.5, low=0.0, high=1.0)
WIDTH = knob("width", 2, low=1, high=6)


def score():
    return 1.0 - (X - 0.3) ** 2 - 0.01 * abs(WIDTH - 4) + 0.002 * 3
# EVOLVE-BLOCK-END
'''

EVALUATOR = '''import importlib.util
import zlib


def _load(program_path):
    spec = importlib.util.spec_from_file_location("candidate", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def evaluate(program_path, level="full"):
    value = float(_load(program_path).score())
    if level == "pilot":  # a noisy, cheap look
        value += 0.05 * ((zlib.crc32(open(program_path, "rb").read()) % 7) - 3) / 3
    elif level == "final":
        value = FINAL_LOW + min(max(value, 0.0), 1.0)
    return {"combined_score": value, "level_seen": {"pilot": 1, "full": 2, "final": 3}[level]}
'''.replace("FINAL_LOW", repr(FINAL_LOW))

TASK_YAML = """name: toy_staged
description: Maximise score() of a toy model whose numbers are knobs.
timeout_s: 20
levels:
  pilot: {data_fraction: 0.1}
  full: {}
  final: {}
"""


def write_staged_task(root: Path) -> Path:
    """The toy gated task folder under `root`."""
    folder = root / "toy_staged"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "initial_program.py").write_text(PROGRAM)
    (folder / "evaluator.py").write_text(EVALUATOR)
    (folder / "task.yaml").write_text(TASK_YAML)
    return folder
