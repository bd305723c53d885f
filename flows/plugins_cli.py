"""`evoforge plugins`: every plug-in — stages, sinks, samplers, artifact kinds, algorithms — one
line each: kind, name, origin (built-in, the installed package, or the file), what it is.
`--plugin FILE` adds a file's, to check it; `evoforge kinds` lists the artifact kinds alone."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_plugins_parser(sub: Any) -> None:
    for command, help_text in (("plugins", "list the plug-ins: stages, sinks, samplers, artifact kinds, "
                                           "algorithms"),
                               ("kinds", "list the artifact kinds (the plug-ins of that kind)")):
        parser = sub.add_parser(command, help=help_text)
        parser.add_argument("--plugin", action="append", metavar="FILE", default=[],
                            help="a plug-in .py file (or module) to load and check (repeatable)")
        parser.add_argument("--json", action="store_true", help="the rows as JSON")


def render(rows: list[dict[str, Any]]) -> str:
    """The rows as aligned lines: kind, name, origin, about."""
    widths = [max((len(r[key]) for r in rows), default=0) + 2 for key in ("kind", "name", "origin")]
    return "\n".join(f"{r['kind']:<{widths[0]}}{r['name']:<{widths[1]}}{r['origin']:<{widths[2]}}"
                     f"{r['about']}".rstrip() for r in rows)


def run_plugins(ns: argparse.Namespace) -> int:
    """Print the rows; a plug-in that does not load is one line, exit 2."""
    from evoforge.stages.plugins import PluginError, plugin_rows

    try:
        rows = plugin_rows(ns.plugin)
    except PluginError as exc:
        print(f"evoforge: error: --plugin: {exc}", file=sys.stderr)
        return 2
    if ns.command == "kinds":
        rows = [row for row in rows if row["kind"] == "artifact kind"]
    print(json.dumps(rows, indent=2) if ns.json else render(rows))
    if not ns.json and ns.command == "plugins":
        print("built-in sinks that need the run's services (node database, run files, MLflow, Prefect, "
              "cognition write-back, accounting) are made by the session; docs/extend/plugins.md",
              file=sys.stderr)
    return 0
