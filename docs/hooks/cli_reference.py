"""The CLI reference page, generated from ``evoforge.flows.cli.build_parser()`` so it cannot drift.

Every sub-command (and the sub-commands of those that have some) gets its one-line summary and
its ``--help``, rendered at a fixed width. Example::

    page = cli_page()  # markdown: "## evoforge run", its help, ...
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager

from evoforge.flows.cli import build_parser

WIDTH = 100  # the help's line width, fixed so the page does not depend on the terminal


@contextmanager
def _columns(width: int) -> Iterator[None]:
    """argparse sizes its help by $COLUMNS: fix it while the help is rendered."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        yield
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each sub-command of `parser`, in the order it lists them."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            summaries = {choice.dest: choice.help or "" for choice in action._choices_actions}
            out += [(name, summaries.get(name, ""), sub) for name, sub in action.choices.items()]
    return out


def _sections(parser: argparse.ArgumentParser, depth: int) -> list[str]:
    out = []
    for _, summary, sub in subcommands(parser):
        out += [f"{'#' * depth} `{sub.prog}`", ""]
        if summary:
            out += [f"{summary[:1].upper()}{summary[1:]}.", ""]
        out += ["```text", sub.format_help().rstrip(), "```", ""]
        out += _sections(sub, depth + 1)
    return out


def cli_page() -> str:
    """The whole reference page, as markdown."""
    parser = build_parser()
    with _columns(WIDTH):
        top = parser.format_help().rstrip()
        body = _sections(parser, 2)
    return "\n".join([
        "# CLI reference",
        "",
        "Generated from the command line's own parser (`evoforge.flows.cli.build_parser()`) when the",
        "site is built: what `--help` prints, for every sub-command.",
        "",
        "```text",
        top,
        "```",
        "",
        *body,
    ])
