"""Where each stage's results go next: the routes of a run's enabled stages (engine.py moves items
along them)."""

from __future__ import annotations

from collections.abc import Sequence

from evoforge.stages.pipeline.stage import COMMIT, Stage


def build_routes(stages: Sequence[Stage], enabled: set[str] | None = None) -> dict[str, str]:
    """Where each enabled stage's results go: its `then` (passing over stages this run leaves
    out, to where they would have sent it), with stages declaring `after` spliced in."""
    by_name = {s.name: s for s in stages}
    enabled = set(by_name) if enabled is None else enabled

    def resolve(dest: str) -> str:
        seen = set()
        while dest != COMMIT and dest not in enabled:
            if dest not in by_name or dest in seen:
                return COMMIT
            seen.add(dest)
            dest = by_name[dest].then
        return dest

    routes = {s.name: resolve(s.then) for s in stages if s.name in enabled}
    for stage in stages:
        if stage.after is not None and stage.name in enabled:
            if stage.after not in routes:
                raise ValueError(f"stage '{stage.name}' goes after '{stage.after}', which is not in the run")
            routes[stage.name], routes[stage.after] = routes[stage.after], stage.name
    return routes
