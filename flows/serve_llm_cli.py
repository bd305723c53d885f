"""`evoforge serve-llm`: start a vLLM server from its own virtualenv, print its URL, serve until Ctrl+C."""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from evoforge.infra.vllm_server import (
    ENV_PYTHON,
    LaunchSpec,
    Served,
    VLLMExited,
    default_python,
    free_port,
    serve,
    shown_command,
    stop_on_signals,
)


def add_serve_llm_parser(subparsers: Any) -> None:
    """Add `serve-llm --model M [--python PATH] [--host H] [--port P] [-- vLLM options]` to the CLI."""
    parser = subparsers.add_parser(
        "serve-llm", help="start a vLLM server from its own virtualenv (Ctrl+C stops it)",
        description="Start `PYTHON -m vllm.entrypoints.openai.api_server --model M --host H --port P "
                    "...`, wait until it serves /v1/models, print the --llm-base-url to use, and serve "
                    "until Ctrl+C or SIGTERM. Options after `--` go to vLLM unchanged.")
    parser.add_argument("--model", required=True, help="model to serve, e.g. Qwen/Qwen2.5-Coder-7B-Instruct")
    parser.add_argument("--python", help=f"the vLLM virtualenv's interpreter (default: ${ENV_PYTHON}, "
                                          "else python3 on PATH)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every "
                                                             "interface, for runs on other machines)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (0: a free one)")
    parser.add_argument("--startup-timeout", type=float, default=900.0,
                        help="seconds to wait for /v1/models to answer (weights load first)")
    parser.add_argument("vllm_args", nargs="*", metavar="-- VLLM_OPTION",
                        help="vLLM's own options, after `--`, e.g. -- --enable-prefix-caching")


def run_serve_llm(ns: argparse.Namespace) -> int:
    """Serve until stopped; 0 after a requested stop, 1 when vLLM exits on its own. A server that
    never starts raises VLLMLaunchError (a user error: exit 2 with its last output lines)."""
    spec = LaunchSpec(model=ns.model, python=ns.python or default_python(), host=ns.host,
                      port=ns.port or free_port(ns.host), extra_args=tuple(ns.vllm_args),
                      startup_timeout_s=ns.startup_timeout)
    print(f"[evoforge] starting: {shown_command(spec.command())}", file=sys.stderr, flush=True)
    stop = threading.Event()
    try:
        with stop_on_signals(stop):
            served = serve(spec, stop, _announce, echo=sys.stderr)
    except VLLMExited as exc:
        print(f"evoforge: {exc}", file=sys.stderr)
        return 1
    print("[evoforge] vLLM stopped" if served else "[evoforge] stopped before vLLM was ready",
          file=sys.stderr)
    return 0


def _announce(served: Served) -> None:
    model = served.models[0] if served.models else "?"
    print(f"vLLM serving {', '.join(served.models) or '?'} at {served.base_url} (Ctrl+C stops it)")
    print(f"run with: evoforge run TASK --llm-base-url {served.base_url} --llm-model {model}", flush=True)
