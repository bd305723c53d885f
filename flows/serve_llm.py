"""The vLLM launcher as a Prefect flow, so that a GPU host's Prefect worker (or `.serve()`) can start it."""

from __future__ import annotations

import sys
import threading
from typing import Any

from prefect import flow, get_run_logger

from evoforge.infra.llm_server import LaunchSpec, Served, free_port, serve, shown_command, stop_on_signals
from evoforge.infra.vllm_server import VLLM, default_python


@flow(name="evoforge-serve-llm", persist_result=False)
def serve_llm_flow(model: str, python: str | None = None, host: str = "0.0.0.0", port: int = 8000,
                   vllm_args: list[str] | None = None, startup_timeout_s: float = 900.0,
                   serve_s: float | None = None) -> dict[str, Any]:
    """Serve `model` with vLLM until the flow run is cancelled (SIGTERM) or `serve_s` seconds pass.

    The parameters are stored by Prefect, so vLLM's `--api-key` is refused here: give the
    worker the VLLM_API_KEY environment variable instead. The default host listens on every
    interface, since the runs that use a GPU host's server usually run elsewhere."""
    args = list(vllm_args or [])
    if any(a == "--api-key" or a.startswith("--api-key=") for a in args):
        raise ValueError("serve_llm_flow: pass vLLM's API key as VLLM_API_KEY in the worker's "
                         "environment, not in vllm_args (flow parameters are stored by Prefect)")
    logger = get_run_logger()
    spec = LaunchSpec(model=model, python=python or default_python(), kind=VLLM, host=host,
                      port=port or free_port(host), extra_args=tuple(args),
                      startup_timeout_s=startup_timeout_s)
    logger.info("starting: %s", shown_command(spec.command()))

    def ready(served: Served) -> None:
        logger.info("vLLM serving %s at %s: evoforge run TASK --llm-base-url %s",
                    ", ".join(served.models), served.base_url, served.base_url)

    stop = threading.Event()
    with stop_on_signals(stop):
        served = serve(spec, stop, ready, echo=sys.stderr, serve_s=serve_s)  # vLLM's output: the worker's
    if served is None:
        return {"base_url": None, "models": [], "stopped": "before it was ready"}
    return {"base_url": served.base_url, "models": served.models,
            "stopped": "signal" if stop.is_set() else "serve_s elapsed"}
