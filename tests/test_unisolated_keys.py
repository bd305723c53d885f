"""No LLM key next to an unisolated candidate: where the host gives no isolation (user namespaces
forbidden), a run with a key in reach refuses to start in one line (exit 2), `sandbox.isolate: false`
accepts it knowingly, a run without a key (or with an empty key variable) goes ahead with its
notice, and `evoforge doctor` says the same as the run: one function decides for both."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from evoforge.evaluators import isolation_notice
from evoforge.evaluators.isolation import Availability
from evoforge.evaluators.isolation_notice import isolation_verdict, unisolated_key_refusal
from evoforge.infra.config import RunConfig
from evoforge.infra.llm.keys import key_env_names, keys_in_reach
from tests.unprivileged import fresh_user_home, run_as_user, user_env, value_task

CANARY = "sk-unisolated-canary-93c1d7"
ANALYZE_CANARY = "sk-analyze-canary-55e0a2"
NONE = Availability(False, "unprivileged user namespaces are disabled", "none",
                    ("no network/filesystem/process isolation: unprivileged user namespaces are disabled",))
ENDPOINTS = {"llm": {"endpoints": [{"base_url": "http://127.0.0.1:9/v1", "api_key_env": "ROUTER_KEY"},
                                   {"base_url": "http://127.0.0.1:9/v1"}]},
             "analyze": {"llm": {"base_url": "http://127.0.0.1:9/v1", "api_key_env": "ANALYZE_KEY"}},
             "task_model": {"llm": {"base_url": "http://127.0.0.1:9/v1", "api_key_env": "TASK_KEY"}}}


@pytest.fixture
def no_isolation(monkeypatch: pytest.MonkeyPatch) -> None:
    """This host as one that forbids user namespaces (the real such host: the tests further down)."""
    monkeypatch.setattr(isolation_notice, "availability", lambda: NONE)


def test_every_key_variable_a_config_names_is_collected():
    cfg = RunConfig.model_validate(ENDPOINTS)
    assert key_env_names(cfg) == ["ANALYZE_KEY", "OPENAI_API_KEY", "ROUTER_KEY", "TASK_KEY"]
    assert key_env_names(RunConfig()) == ["OPENAI_API_KEY"]  # the main key, and the openai embedder's
    env = {"ANALYZE_KEY": ANALYZE_CANARY, "TASK_KEY": "", "OPENAI_API_KEY": CANARY, "UNRELATED_KEY": "x"}
    assert keys_in_reach(cfg, env) == ["ANALYZE_KEY", "OPENAI_API_KEY"]  # empty: no key


def test_a_key_written_in_the_config_counts_too():
    cfg = RunConfig.model_validate({"llm": {"api_key": CANARY}})
    assert keys_in_reach(cfg, {}) == ["llm.api_key"]
    assert keys_in_reach(cfg, {"OPENAI_API_KEY": CANARY}) == ["OPENAI_API_KEY"]  # loaded from there


def test_no_isolation_and_a_key_refuses_naming_the_variables_never_the_values(no_isolation):
    cfg = RunConfig.model_validate(ENDPOINTS)
    env = {"ANALYZE_KEY": ANALYZE_CANARY, "TASK_KEY": CANARY}
    refusal = unisolated_key_refusal(cfg, env)
    assert refusal is not None and "\n" not in refusal
    assert "ANALYZE_KEY, TASK_KEY hold LLM keys" in refusal and "sandbox.isolate: false" in refusal
    assert CANARY not in refusal and ANALYZE_CANARY not in refusal
    verdict = isolation_verdict(cfg, env)
    assert verdict.state == "refuse" and verdict.refusal == refusal
    assert "ANALYZE_KEY, TASK_KEY" in verdict.detail and CANARY not in verdict.detail


def test_no_isolation_without_a_key_or_with_isolate_false_goes_ahead(no_isolation):
    cfg = RunConfig()
    for env in ({}, {"OPENAI_API_KEY": ""}):
        assert unisolated_key_refusal(cfg, env) is None
        verdict = isolation_verdict(cfg, env)
        assert verdict.state == "warn" and verdict.lines == (f"[evoforge] sandbox: {NONE.missing[0]}",)
    off = RunConfig.model_validate({"sandbox": {"isolate": False}})
    assert unisolated_key_refusal(off, {"OPENAI_API_KEY": CANARY}) is None
    assert isolation_verdict(off, {"OPENAI_API_KEY": CANARY}).state == "off"


def test_candidates_on_a_remote_dask_cluster_are_not_this_hosts_to_isolate(no_isolation):
    remote = RunConfig.model_validate({"engine": {"executor": "dask", "dask_address": "tcp://203.0.113.7:8786"}})
    assert unisolated_key_refusal(remote, {"OPENAI_API_KEY": CANARY}) is None
    local = RunConfig.model_validate({"engine": {"executor": "dask"}})  # a local cluster: here
    assert unisolated_key_refusal(local, {"OPENAI_API_KEY": CANARY}) is not None


# -- as an ordinary user on a host whose kernel forbids user namespaces (tests/unprivileged.py) --

@pytest.fixture
def home() -> Iterator[Path]:
    """The test user's home, with a one-file task (these tests make a user: root only, as in CI)."""
    folder = fresh_user_home()
    value_task(folder)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _as_user(home: Path, command: str, config: str, **env: str):
    (home / "config.yaml").write_text(config)
    args = ["--workspace", str(home / "ws"), "--config", str(home / "config.yaml")]
    if command == "run":
        args = [str(home / "task"), *args, "--max-evals", "2", "--quiet", "--no-mlflow"]
    return run_as_user([sys.executable, "-m", "evoforge.flows.cli", command, *args], home,
                       env=user_env(home, **env), forbid_userns=True)


def _isolation_line(done) -> str:
    return next(line for line in done.stdout.splitlines() if line.split()[1:2] == ["isolation"])


def _files_holding(root: Path, secret: str) -> list[Path]:
    return [path for path in root.rglob("*")
            if path.is_file() and not path.is_symlink() and secret.encode() in path.read_bytes()]


CONFIG = ("cognition: {enabled: false}\n"
          "analyze: {llm: {base_url: 'http://127.0.0.1:9/v1', api_key_env: ANALYZE_KEY}}\n")


def test_a_run_beside_a_key_without_isolation_refuses_and_doctor_says_so(home: Path) -> None:
    keys = {"OPENAI_API_KEY": CANARY, "ANALYZE_KEY": ANALYZE_CANARY}
    done = _as_user(home, "run", CONFIG, **keys)
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evoforge: error: sandbox: no isolation here ("), lines
    assert "ANALYZE_KEY, OPENAI_API_KEY hold LLM keys" in lines[0]
    assert "set sandbox.isolate: false to run candidates unisolated anyway" in lines[0]
    assert "Traceback" not in done.stderr
    for secret in (CANARY, ANALYZE_CANARY):
        assert secret not in done.stdout + done.stderr
        assert _files_holding(home, secret) == []
    assert not (home / "ws" / "task" / "run.log").exists()  # refused before the run folder
    doctor = _as_user(home, "doctor", CONFIG, **keys)
    line = _isolation_line(doctor)
    assert doctor.returncode == 1 and line.startswith("MISSING  isolation  none: "), doctor.stdout
    assert "a run refuses to start while ANALYZE_KEY, OPENAI_API_KEY hold LLM keys" in line
    assert CANARY not in doctor.stdout + doctor.stderr and ANALYZE_CANARY not in doctor.stdout + doctor.stderr


def test_isolate_false_accepts_running_candidates_beside_the_key(home: Path) -> None:
    config = "cognition: {enabled: false}\nsandbox: {isolate: false}\n"
    done = _as_user(home, "run", config, OPENAI_API_KEY=CANARY)
    assert done.returncode == 0, done.stderr[-3000:]
    notices = [line for line in done.stderr.splitlines() if line.startswith("[evoforge] sandbox:")]
    assert notices == ["[evoforge] sandbox: no network/filesystem/process isolation: sandbox.isolate is "
                       "false (set it true to isolate)"]
    assert (home / "ws" / "task" / "run.log").is_file()
    assert CANARY not in done.stdout + done.stderr and _files_holding(home, CANARY) == []
    doctor = _as_user(home, "doctor", config, OPENAI_API_KEY=CANARY)
    assert doctor.returncode == 0
    assert _isolation_line(doctor).startswith("off      isolation  sandbox.isolate: false")


def test_an_empty_key_variable_is_no_key_and_the_run_goes_ahead_with_its_notice(home: Path) -> None:
    config = "cognition: {enabled: false}\n"
    done = _as_user(home, "run", config, OPENAI_API_KEY="")
    assert done.returncode == 0, done.stderr[-3000:]
    notices = [line for line in done.stderr.splitlines() if line.startswith("[evoforge] sandbox:")]
    assert len(notices) == 1 and "unprivileged user namespaces are disabled" in notices[0], done.stderr
    doctor = _as_user(home, "doctor", config, OPENAI_API_KEY="")
    line = _isolation_line(doctor)
    assert doctor.returncode == 0 and line.startswith("warn     isolation  none: "), doctor.stdout
    assert "a run goes ahead unisolated while no LLM key is in its environment" in line
