"""`python -m evoforge.infra.llm_sim`: run the LLM simulator in the foreground."""

from __future__ import annotations

import argparse
import sys

from evoforge.infra.llm_sim.cli_args import add_arguments, config_from_args
from evoforge.infra.llm_sim.server import serve


def main(argv: list[str] | None = None) -> int:
    """Parse options and serve until interrupted; a bad option or busy port ends in one line."""
    parser = argparse.ArgumentParser(
        prog="evoforge llm-sim", description="A local OpenAI-compatible LLM simulator."
    )
    add_arguments(parser)
    ns = parser.parse_args(argv)
    try:
        config, host, port = config_from_args(ns)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        serve(config, host=host, port=port)
    except OSError as exc:
        print(f"evoforge llm-sim: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
