"""Command-line options of the LLM simulator, shared by `evoforge llm-sim` and `python -m`."""

from __future__ import annotations

import argparse

from evoforge.infra.llm_sim.server import ERROR_KINDS, SimConfig

_DEFAULTS = SimConfig()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the simulator's options (address, latency model, capacity, errors, seed)."""
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (0: any free)")
    parser.add_argument("--model", default=_DEFAULTS.model, help="model name to serve")
    parser.add_argument("--median", type=float, default=_DEFAULTS.median_s, help="median latency in seconds")
    parser.add_argument("--sigma", type=float, default=_DEFAULTS.sigma, help="lognormal sigma of the latency")
    parser.add_argument("--slots", type=int, default=_DEFAULTS.slots, help="requests served at once")
    parser.add_argument("--error-rate", type=float, default=_DEFAULTS.error_rate, help="fraction that fail")
    parser.add_argument(
        "--error-kinds",
        default=",".join(_DEFAULTS.error_kinds),
        help=f"comma-separated failure kinds drawn uniformly ({', '.join(ERROR_KINDS)})",
    )
    parser.add_argument(
        "--hang-s", type=float, default=_DEFAULTS.hang_s, help="seconds a 'hang' holds a request"
    )
    parser.add_argument(
        "--huge-chars", type=int, default=_DEFAULTS.huge_chars, help="characters of a 'huge' answer"
    )
    parser.add_argument(
        "--down-after", type=int, default=None,
        help="go down (503 on chat and models) after this many chat requests (default: never)",
    )
    parser.add_argument(
        "--down-for", type=float, default=_DEFAULTS.down_for,
        help="seconds the outage of --down-after lasts (inf: for good)",
    )
    parser.add_argument("--seed", type=int, default=_DEFAULTS.seed, help="random seed")


def config_from_args(ns: argparse.Namespace) -> tuple[SimConfig, str, int]:
    """(config, host, port) from parsed options; ValueError with one line when they are invalid."""
    if not 0 <= ns.port <= 65535:
        raise ValueError(f"port must be between 0 and 65535, got {ns.port}")
    kinds = tuple(kind.strip() for kind in ns.error_kinds.split(",") if kind.strip())
    config = SimConfig(
        model=ns.model,
        median_s=ns.median,
        sigma=ns.sigma,
        slots=ns.slots,
        error_rate=ns.error_rate,
        error_kinds=kinds,
        hang_s=ns.hang_s,
        seed=ns.seed,
        huge_chars=ns.huge_chars,
        down_after=ns.down_after,
        down_for=ns.down_for,
    )
    return config, ns.host, ns.port
