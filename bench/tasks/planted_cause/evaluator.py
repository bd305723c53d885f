"""A task with a planted cause, for testing the Analyzer's causal claims (stages/verify.py).

The program holds two constants on separate lines, far enough apart that a change of both is two
hunks: ``combined_score`` is ``CAUSE`` plus Gaussian noise (``NOISE_SD``), and ``INERT`` changes
nothing. Every evaluation draws its noise from a generator seeded afresh from the clock and the
process id (the warm fork server would otherwise hand every child the same random state), so two
runs of one program differ the way a noisy real evaluator's do.
"""

import math
import os
import random
import runpy
import time

NOISE_SD = 0.002


def evaluate(program_path):
    """Score the program's CAUSE, with noise; INERT is read only to report it."""
    program = runpy.run_path(program_path)
    value = float(program["cause"]())
    if not math.isfinite(value):
        raise ValueError(f"cause() returned {value}, not a finite number")
    noise = random.Random(time.perf_counter_ns() ^ (os.getpid() << 20)).gauss(0.0, NOISE_SD)
    return {"combined_score": value + noise, "cause": value, "inert": float(program.get("INERT", 0.0))}
