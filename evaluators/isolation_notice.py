"""Say at a run's start, in one line each, what the sandbox cannot protect on this host.

Where the isolation is weaker than full (isolation.py's ``Availability.missing``: user
namespaces disabled, not Linux, ``sandbox.isolate: false``), the run prints one line per missing
protection to stderr, naming how to get it, and the run writes the same lines to run.log
(flows/evolve.py): a weaker sandbox is never silent. Example::

    await announce_isolation(cfg.sandbox.isolate)
    # [evoforge] sandbox: no network/filesystem/process isolation: unprivileged user namespaces
    #   are disabled (user.max_user_namespaces = 0: sysctl -w user.max_user_namespaces=15000, ...)
"""

from __future__ import annotations

import sys

from evoforge.evaluators.io_threads import off_loop
from evoforge.evaluators.isolation import availability

PREFIX = "[evoforge] sandbox: "
_OFF = "no network/filesystem/process isolation: sandbox.isolate is false (set it true to isolate)"


def isolation_notices(isolate: bool) -> list[str]:
    """The lines a run starting now would print (empty: full isolation); probes once per process."""
    if not isolate:
        return [PREFIX + _OFF]
    return [PREFIX + missing for missing in availability().missing]


async def announce_isolation(isolate: bool) -> list[str]:
    """Print the notices to stderr (once: run.log is not open yet, and a warning logged with no
    handler would reach stderr a second time); the probe runs off the event loop."""
    lines = await off_loop(isolation_notices, isolate)
    for line in lines:
        print(line, file=sys.stderr)
    return lines
