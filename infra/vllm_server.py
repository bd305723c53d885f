"""vLLM as a kind of server for the launcher (infra/llm_server.py): its command line and interpreter.

vLLM cannot share evoforge's virtualenv (its fastapi pin clashes with Prefect's), so it runs with
its own env's interpreter: `PYTHON -m vllm.entrypoints.openai.api_server --model M --host H --port P
[vLLM's own options]`. The module form needs nothing but the interpreter (no console script on
PATH, no bin-dir layout) and has been vLLM's server entry point across versions.
"""

from __future__ import annotations

from evoforge.infra.llm_server import LaunchError, LaunchSpec, ServerKind, free_port

VLLM_MODULE = "vllm.entrypoints.openai.api_server"
ENV_PYTHON = "EVOFORGE_VLLM_PYTHON"
VLLMLaunchError = LaunchError  # the name callers catch (flows/cli.py): one error for every kind
__all__ = ["ENV_PYTHON", "VLLM", "VLLMLaunchError", "VLLM_MODULE", "VLLMKind", "default_python", "free_port"]


class VLLMKind(ServerKind):
    """vLLM's OpenAI-compatible server, from its own virtualenv."""

    label = "vLLM"
    module = VLLM_MODULE
    env_python = ENV_PYTHON

    def command(self, spec: LaunchSpec) -> list[str]:
        """`PYTHON -m vllm.entrypoints.openai.api_server --model M --host H --port P ...`."""
        return [spec.python, "-m", VLLM_MODULE, "--model", spec.model, "--host", spec.host,
                "--port", str(spec.port), *spec.extra_args]

    def missing_hint(self, python: str) -> str:
        """How to give vLLM its own virtualenv."""
        return (f"{python} has no vLLM: create its own virtualenv, e.g. `python3 -m venv ~/vllm-env && "
                f"~/vllm-env/bin/pip install vllm`, and pass --python ~/vllm-env/bin/python")


VLLM = VLLMKind()


def default_python() -> str:
    """vLLM's interpreter when none is named: $EVOFORGE_VLLM_PYTHON, else python3 on PATH."""
    return VLLM.default_python()
