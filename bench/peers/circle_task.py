"""A copy of evoforge's circle_packing task folder whose evaluator can burn a fixed number of CPU
seconds per evaluation and log every evaluation it makes, for the OpenEvolve comparison.

The copy's evaluator.py wraps the original (copied beside it as ``_circle_packing.py``): it
first spins for ``burn_cpu_s`` seconds of process CPU time (a stand-in for an expensive
evaluator), then scores the program with the original. In the OpenEvolve variant
(``errors_as_metrics``) an invalid program returns ``combined_score`` 0 with an ``error`` field,
as OpenEvolve's own examples do, instead of raising (OpenEvolve retries an evaluator that raises,
which would burn the CPU seconds again); evoforge's variant raises, as evoforge's contract asks.
"""

from __future__ import annotations

import shutil
from pathlib import Path

ORIGINAL = Path(__file__).resolve().parents[2] / "evaluators" / "tasks" / "circle_packing"

WRAPPER = '''"""circle_packing's evaluator after {burn} CPU seconds of busy work (bench/peers)."""

import importlib.util
import json
import time
from pathlib import Path

BURN_CPU_S = {burn}
EVAL_LOG = {log!r}  # a JSON line per evaluation (None: no log)
ERRORS_AS_METRICS = {errors_as_metrics}


def _original():
    path = Path(__file__).with_name("_circle_packing.py")
    spec = importlib.util.spec_from_file_location("_circle_packing", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _burn(seconds):
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass


def evaluate(program_path):
    """The original evaluate(), after the burn; logged when EVAL_LOG is set."""
    started = time.time()
    _burn(BURN_CPU_S)
    try:
        metrics = _original().evaluate(program_path)
        error = None
    except Exception as err:
        if not ERRORS_AS_METRICS:
            raise
        metrics, error = {{"combined_score": 0.0, "validity": 0.0, "error": str(err)[:300]}}, str(err)[:300]
    if EVAL_LOG:
        with open(EVAL_LOG, "a") as log:
            log.write(json.dumps({{"start": started, "end": time.time(), "score": metrics["combined_score"],
                                  "error": error}}) + "\\n")
    return metrics
'''


def make_task(folder: Path, burn_cpu_s: float, log: Path | None, errors_as_metrics: bool) -> Path:
    """Write the wrapped task into `folder` (created) and return it."""
    folder.mkdir(parents=True)
    for name in ("initial_program.py", "task.yaml"):
        shutil.copy(ORIGINAL / name, folder / name)
    shutil.copy(ORIGINAL / "evaluator.py", folder / "_circle_packing.py")
    (folder / "evaluator.py").write_text(WRAPPER.format(burn=float(burn_cpu_s), log=str(log) if log else None,
                                                        errors_as_metrics=errors_as_metrics))
    return folder
