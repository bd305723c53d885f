"""Decide, once for `evoforge run` and `evoforge doctor` alike, what the sandbox's isolation here
means for a run: go ahead, go ahead with a notice, or refuse to start.

Where the isolation is weaker than full (isolation.py's ``Availability.missing``: user
namespaces disabled, not Linux, ``sandbox.isolate: false``), the run prints one line per missing
protection to stderr, naming how to get it, and the run writes the same lines to run.log
(flows/evolve.py): a weaker sandbox is never silent. Where there is no isolation at all (kind
``none``) a candidate runs as the run's own user in the run's pid namespace and can read
``/proc/<run>/environ``: with an LLM key in reach (any variable the config reads a key from,
infra/llm/keys.py, set and non-empty, or a key in the config file) the run refuses to start, in
one line naming the variables (never a value) and ``sandbox.isolate: false``, the explicit way to
accept unisolated candidates. With no key in reach (offline and simulator runs) it goes ahead with
the notice. Candidates on a Dask cluster elsewhere (``engine.dask_address`` not this machine) are
not this host's to isolate: no refusal. Example::

    verdict = isolation_verdict(cfg)   # probes once per process; doctor's isolation line
    verdict.state                      # ok | warn | off | refuse (doctor: ... | MISSING)
    refusal = unisolated_key_refusal(cfg)  # the same decision, at a run's start (flows/prepare.py)
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass

from evoforge.evaluators.io_threads import off_loop
from evoforge.evaluators.isolation import availability
from evoforge.infra.addresses import is_local_address
from evoforge.infra.config import RunConfig
from evoforge.infra.llm.keys import keys_in_reach

PREFIX = "[evoforge] sandbox: "
_OFF = "no network/filesystem/process isolation: sandbox.isolate is false (set it true to isolate)"
OK, WARN, OFF, REFUSE = "ok", "warn", "off", "refuse"


@dataclass(frozen=True)
class IsolationVerdict:
    """What a run starting now does about isolation: its ``state``, the notice ``lines`` it prints,
    the one-line ``refusal`` (state refuse only) and ``detail``, the same in doctor's words."""

    state: str  # ok, warn (goes ahead with a notice), off (sandbox.isolate: false) or refuse
    detail: str
    lines: tuple[str, ...] = ()
    refusal: str | None = None


def candidates_here(cfg: RunConfig) -> bool:
    """Whether the run's candidates run on this machine (not on a Dask cluster elsewhere)."""
    address = cfg.engine.dask_address
    return cfg.engine.executor != "dask" or address is None or is_local_address(address)


def isolation_verdict(cfg: RunConfig, environ: Mapping[str, str] | None = None) -> IsolationVerdict:
    """The decision for `cfg` on this host, `environ` (default: this process's) holding the keys."""
    if not cfg.sandbox.isolate:
        return IsolationVerdict(OFF, "sandbox.isolate: false (rlimits, scrubbed environment, own "
                                     "process group only)", (PREFIX + _OFF,))
    avail = availability()
    lines = tuple(PREFIX + missing for missing in avail.missing)
    summary = "; ".join(f"{part} {what}" for part, what in avail.describe().items())
    if avail.isolated:
        state = WARN if avail.missing else OK
        return IsolationVerdict(state, "; ".join([f"{avail.kind}: {summary}", *avail.missing]), lines)
    how = "; ".join(avail.missing) or avail.reason
    keys = keys_in_reach(cfg, environ)
    if not candidates_here(cfg):
        return IsolationVerdict(WARN, f"none here: {how}; candidates run on the Dask workers at "
                                      f"{cfg.engine.dask_address}, isolated as each worker can", lines)
    if not keys:
        return IsolationVerdict(WARN, f"none: {how}; a run goes ahead unisolated while no LLM key is "
                                      f"in its environment (set sandbox.isolate: false to accept it)",
                                lines)
    named = ", ".join(keys)
    holds, them = ("hold LLM keys", "them") if len(keys) > 1 else ("holds an LLM key", "it")
    refusal = (f"sandbox: no isolation here ({avail.reason}), and {named} {holds}: a candidate would "
               f"run as your user and could read {them}; unset {them}, allow user namespaces, or set "
               f"sandbox.isolate: false to run candidates unisolated anyway")
    return IsolationVerdict(REFUSE, f"none: {how}; a run refuses to start while {named} {holds} "
                                    f"(or set sandbox.isolate: false to accept it)", lines, refusal)


def unisolated_key_refusal(cfg: RunConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """The refusal of `isolation_verdict`, probing the host only when a key is in reach (None: go)."""
    if not cfg.sandbox.isolate or not keys_in_reach(cfg, environ):
        return None
    return isolation_verdict(cfg, environ).refusal


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
