"""Score a guess after burning a fixed amount of CPU: an evaluation-bound bench task.

The evaluator first spends ``BURN_CPU_S`` seconds of CPU time (``time.process_time``, so the
cost is the same on a busy machine, only the wall time stretches) in a pure-Python loop, like a
short training run would, then scores the program's ``guess()``: ``combined_score`` is
``-(guess - TARGET) ** 2`` (0 is perfect). It imports nothing heavy, so the sandbox's start-up is
Python's alone.
"""

import math
import runpy
import time

BURN_CPU_S = 1.0
TARGET = 2.718281828


def burn(seconds=BURN_CPU_S):
    """Spend ``seconds`` of this process's CPU time in pure Python; returns a checksum."""
    start, acc = time.process_time(), 0
    while time.process_time() - start < seconds:
        for i in range(2000):
            acc = (acc * 31 + i) % 1000003
    return acc


def evaluate(program_path):
    """Burn the CPU budget, then score the guess (an error names a non-finite one)."""
    guess = runpy.run_path(program_path).get("guess")
    if not callable(guess):
        raise ValueError("the program defines no guess() function")
    burn()
    value = float(guess())
    if not math.isfinite(value):
        raise ValueError(f"guess() returned {value}, not a finite number")
    return {"combined_score": -((value - TARGET) ** 2), "guess": value}
