"""The cold sandbox's launcher for a child isolated in its own user namespace.

``unshare(CLONE_NEWUSER)`` refuses a process with more than one thread, and a fork of the run
process may already have several: a library's fork handler (LanceDB's, the cognition base's)
restarts its runtime's threads in the child. So a cold child in its own user namespace does not
isolate itself between fork and exec: it execs this module in a fresh Python, which applies the
plan (userns.py: namespaces, mounts, the fork that makes the candidate pid 1), sets the rlimits
in the candidate (after the unshare: RLIMIT_NPROC then counts the namespace's processes) and
execs the candidate's command there. The one argument before the command is JSON:
``{"plan": UsernsPlan.to_json(), "rlimits": [[resource, soft, hard], ...], "parent": pid}``.
Example::

    argv = command(plan, rlimits, os.getpid(), [sys.executable, "harness.py", ...])
"""

from __future__ import annotations

import json
import os
import resource
import sys

from evoforge.evaluators.userns import UsernsPlan

_SETUP_FAILED = 126  # as a warm child that could not confine itself (why: its stderr)
SETUP_FAILED_PREFIX = "sandbox setup failed: "


def command(plan: UsernsPlan, rlimits: list[tuple[int, int, int]], parent: int, argv: list[str]) -> list[str]:
    """The argv that runs ``argv`` isolated by ``plan``, from a process whose parent is ``parent``."""
    spec = {"plan": plan.to_json(), "rlimits": rlimits, "parent": parent}
    # -I: neither the candidate's environment (PYTHONPATH names its folder) nor its folder (the
    # working directory) may put a module in front of this unconfined Python's own
    return [sys.executable, "-I", "-m", __name__, json.dumps(spec, separators=(",", ":")), *argv]


def main(args: list[str]) -> None:
    """Isolate, then exec ``args[1:]`` as the candidate (pid 1 of its own pid namespace)."""
    spec = json.loads(args[0])
    try:
        UsernsPlan.from_json(spec["plan"]).apply_in_child(int(spec["parent"]))
        for res, soft, hard in spec["rlimits"]:
            resource.setrlimit(res, (soft, hard))
    except OSError as exc:
        os.write(2, f"{SETUP_FAILED_PREFIX}{exc.strerror or exc}\n".encode())
        os._exit(_SETUP_FAILED)
    os.execv(args[1], args[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
