"""What the peer comparisons share: the LLM server (a real one, or evoforge's simulator), the
prompt task's cases, one task-model call, the test score of a winning prompt, and the JSON record.

Runs under /tmp/peersvenv's Python (it sees evoforge through --system-site-packages); evoforge
itself is always started as the `evoforge` command of the global environment, in a subprocess.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TASK_DIR = HERE / "house_style_small"  # house_style on 30 train / 10 val / 20 test cases
RESULTS = HERE.parent / "results"
SERVE_RE = re.compile(r"--llm-base-url (\S+) --llm-model (\S+)")


def _load_task() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("house_style_small", TASK_DIR / "evaluator.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TASK = _load_task()
SEED_PROMPT = (TASK_DIR / "prompt.md").read_text()


def chat(base_url: str, model: str, messages: list[dict[str, str]], max_tokens: int,
         temperature: float = 0.0) -> str:
    """One chat completion from an OpenAI-compatible server (no client library: nothing to pin)."""
    body = json.dumps({"model": model, "messages": messages, "max_tokens": max_tokens,
                       "temperature": temperature}).encode()
    request = urllib.request.Request(base_url.rstrip("/") + "/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as answer:
        return json.loads(answer.read())["choices"][0]["message"]["content"] or ""


def messages_for(prompt: str, case: dict) -> list[dict[str, str]]:
    """house_style's messages: the prompt as the system message, the question as the user's."""
    return [{"role": "system", "content": prompt},
            {"role": "user", "content": f"Question: {case['question']}"}]


def score_on(split: str, prompt: str, base_url: str, model: str, max_tokens: int) -> float:
    """The mean house_style score of `prompt` on every case of `split`, one task-model call a case."""
    cases = TASK.cases()[split]
    total = 0.0
    for case in cases:
        total += TASK.metric(case, chat(base_url, model, messages_for(prompt, case), max_tokens))
    return round(total / len(cases), 4)


@contextlib.contextmanager
def llm_server(args: Any) -> Iterator[tuple[str, str]]:
    """(base_url, model) of the server to use: --base-url as given, or evoforge's simulator
    (--sim, `python -m evoforge.infra.llm_sim` with --sim-median seconds a call, one slot) started
    and stopped here."""
    if not args.sim:
        yield args.base_url, args.model
        return
    command = ["evoforge", "llm-sim", "--port", str(args.sim_port), "--median", str(args.sim_median),
               "--slots", str(args.sim_slots), "--model", "sim"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{args.sim_port}/v1"
    try:
        for _ in range(100):
            with contextlib.suppress(OSError):
                urllib.request.urlopen(url + "/models", timeout=2).read()
                break
            time.sleep(0.2)
        else:
            raise RuntimeError(f"the simulator did not answer on {url}")
        yield url, "sim"
    finally:
        process.terminate()
        process.wait(timeout=10)


def add_server_args(parser: Any) -> None:
    """--base-url/--model (a running server, e.g. `evoforge serve-llm --model smollm2`) or --sim."""
    parser.add_argument("--base-url", help="OpenAI-compatible server, e.g. http://127.0.0.1:18431/v1")
    parser.add_argument("--model", help="model name on that server")
    parser.add_argument("--sim", action="store_true", help="start evoforge's LLM simulator instead")
    parser.add_argument("--sim-port", type=int, default=18499)
    parser.add_argument("--sim-median", type=float, default=1.0, help="simulator: median seconds a call")
    parser.add_argument("--sim-slots", type=int, default=1, help="simulator: calls served at once")


def check_server_args(parser: Any, args: Any) -> None:
    """One clear line and exit code 2 when neither a server nor --sim is named."""
    if not args.sim and not (args.base_url and args.model):
        parser.error("name the server with --base-url and --model, or pass --sim")


def require(parser: Any, modules: list[str]) -> None:
    """One clear line and exit code 2 when a peer's package is missing from this interpreter."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        parser.error(f"{', '.join(missing)} not installed for {sys.executable}: run with "
                     "/tmp/peersvenv/bin/python (bench/peers/README.md says how to make it)")


def evoforge_env() -> dict[str, str]:
    """The environment of an `evoforge run` subprocess: its own Prefect home, analytics off."""
    env = dict(os.environ)
    env["PREFECT_HOME"] = tempfile.mkdtemp(prefix="peers-prefect-")
    env["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    return env


def machine() -> dict[str, Any]:
    """Where and when the figures were measured (the CPU is shared with other engineers)."""
    return {"date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M"),
            "cpus": os.cpu_count(), "python": platform.python_version(), "argv": sys.argv,
            "note": "2 cores shared with other engineers' work: wall times are noisy"}


def write(path: Path, record: dict[str, Any]) -> None:
    """Keep `record` as indented JSON in `path` and print where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {path}")
