"""Each key goes only to its endpoint: four recording servers (main, Analyzer, task model,
embeddings), a distinct canary key in each variable; the run's backends, the embedder and
`evoforge doctor`'s probes each send every server only its own key, or none (infra/llm/keys.py)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from evoforge.cognition.embeddings import make_embedder
from evoforge.flows.doctor import check_embedder, check_llm
from evoforge.infra.config import CognitionConfig, ConfigError, LLMConfig, RunConfig
from evoforge.infra.llm import keys
from evoforge.infra.llm.factory import endpoint_backend, make_backend
from tests.json_handler import JsonHandler

MAIN, TASK, EMBED = "sk-canary-main-7f3a", "sk-canary-task-1c9e", "sk-canary-embed-4b2d"
CANARIES = (MAIN, TASK, EMBED)
MESSAGES = [{"role": "user", "content": "2 + 2?"}]


class Recorder(ThreadingHTTPServer):
    """An OpenAI-compatible stand-in that answers anything and records each request's bearer token."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.tokens: list[tuple[str, str]] = []  # (path, the token sent; "" for none)
        self.needs_key = False  # answer 401 to a request without a real key

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def seen(self) -> set[str]:
        return {token for _, token in self.tokens}


class _Handler(JsonHandler):
    server: Recorder

    def _record(self) -> dict:
        token = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        self.server.tokens.append((self.path, token))
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length)) if length else {}

    def do_GET(self) -> None:  # noqa: N802
        self._record()
        if self.server.needs_key and self.server.tokens[-1][1] in ("", keys.NO_KEY):
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self._send({"object": "list", "data": [{"id": "canary-model", "object": "model", "created": 0,
                                                "owned_by": "test"}]})

    def do_POST(self) -> None:  # noqa: N802
        body = self._record()
        if self.path.endswith("/embeddings"):
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            self._send({"object": "list", "model": "e", "usage": {"prompt_tokens": 1, "total_tokens": 1},
                        "data": [{"object": "embedding", "index": i, "embedding": [1.0, 0.0, 0.0]}
                                 for i in range(len(texts))]})
            return
        self._send({"id": "c", "object": "chat.completion", "created": 0, "model": "canary-model",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "4"}}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}})


@pytest.fixture
def servers() -> Iterator[dict[str, Recorder]]:
    made = {name: Recorder() for name in ("main", "analyze", "task", "embed")}
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in made.values()]
    for thread in threads:
        thread.start()
    try:
        yield made
    finally:
        for server in made.values():
            server.shutdown()
            server.server_close()


def test_each_endpoint_the_embedder_and_doctor_send_only_their_own_key(servers, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", MAIN)
    monkeypatch.setenv("EVOFORGE_CANARY_TASK_KEY", TASK)
    monkeypatch.setenv("EVOFORGE_CANARY_EMBED_KEY", EMBED)
    cfg = RunConfig.model_validate({
        "llm": {"base_url": servers["main"].base_url, "model": "canary-model"},
        "analyze": {"llm": {"base_url": servers["analyze"].base_url}},  # no api_key_env: no key
        "task_model": {"llm": {"base_url": servers["task"].base_url,
                               "api_key_env": "EVOFORGE_CANARY_TASK_KEY"}},
        "cognition": {"embedding": "openai", "embedding_base_url": servers["embed"].base_url,
                      "embedding_api_key_env": "EVOFORGE_CANARY_EMBED_KEY"}})
    backends = [make_backend(cfg.llm, 0),
                endpoint_backend(cfg.llm, cfg.analyze.llm, 0, "analyze.llm"),
                endpoint_backend(cfg.llm, cfg.task_model.llm, 0, "task_model.llm")]

    async def calls() -> None:
        for backend in backends:
            try:
                assert (await backend.complete(MESSAGES, temperature=0.0, max_tokens=8)).text == "4"
            finally:
                await backend.close()

    asyncio.run(calls())
    assert make_embedder(cfg.cognition).embed(["a text"]).shape == (1, 3)
    doctor_lines = [check_llm(cfg), check_embedder(cfg)]
    assert [c.state for c in doctor_lines] == ["ok", "ok"], doctor_lines
    assert not any(canary in c.detail for c in doctor_lines for canary in CANARIES)  # never printed
    probed = {name: {path for path, _ in s.tokens} for name, s in servers.items()}
    assert all("/v1/models" in probed[name] for name in ("main", "analyze", "task")), probed  # doctor's
    assert servers["main"].seen() == {MAIN}
    assert servers["analyze"].seen() == {keys.NO_KEY, ""}  # the placeholder (doctor: no header)
    assert servers["task"].seen() == {TASK}
    assert servers["embed"].seen() == {EMBED}


def test_the_main_key_goes_to_the_main_url_only() -> None:
    env = {"OPENAI_API_KEY": MAIN, "MY_KEY": TASK}
    llm = LLMConfig(base_url="http://main:8000/v1")
    assert keys.endpoint_key(llm, "http://MAIN:8000/v1/", None, "analyze.llm", env) == MAIN  # same server
    assert keys.endpoint_key(llm, "http://other:8000/v1", None, "analyze.llm", env) is None
    assert keys.endpoint_key(llm, "http://other:8000/v1", "MY_KEY", "analyze.llm", env) == TASK
    router = LLMConfig(endpoints=[{"base_url": "http://a/v1"}, {"base_url": "http://b/v1",
                                                                 "api_key_env": "OPENAI_API_KEY"}])
    assert keys.endpoint_key(router, "http://a/v1", None, "llm.endpoints.0", env) is None  # no main URL
    assert keys.endpoint_key(router, "http://b/v1", "OPENAI_API_KEY", "llm.endpoints.1", env) == MAIN
    with pytest.raises(ConfigError, match=r"^analyze.llm.api_key_env: the environment variable NOPE is not"):
        keys.endpoint_key(llm, "http://other/v1", "NOPE", "analyze.llm", env)


def test_the_embedder_gets_its_own_key_or_the_main_key_only_at_the_sdk_default() -> None:
    env = {"OPENAI_API_KEY": MAIN, "EMBED_KEY": EMBED}
    assert keys.embedder_key(CognitionConfig(embedding="openai"), env) == MAIN  # OpenAI's own endpoint
    elsewhere = CognitionConfig(embedding="openai", embedding_base_url="http://embed:9000/v1")
    assert keys.embedder_key(elsewhere, env) is None
    own = elsewhere.model_copy(update={"embedding_api_key_env": "EMBED_KEY"})
    assert keys.embedder_key(own, env) == EMBED
    cfg = RunConfig.model_validate({"cognition": {"embedding": "openai",
                                                  "embedding_api_key_env": "EMBED_KEY"}})
    assert "EMBED_KEY" in keys.key_env_names(cfg)  # kept from candidates like every key variable
    with pytest.raises(ConfigError, match="cognition.embedding_api_key_env: the environment variable EMBED"):
        keys.embedder_key(own, {})


def test_doctor_names_a_missing_key_variable_and_a_401_without_a_key(servers, monkeypatch) -> None:
    monkeypatch.delenv("EVOFORGE_CANARY_UNSET", raising=False)
    cfg = RunConfig.model_validate({"llm": {"base_url": servers["main"].base_url},
                                    "task_model": {"llm": {"base_url": servers["task"].base_url,
                                                           "api_key_env": "EVOFORGE_CANARY_UNSET"}}})
    check = check_llm(cfg)
    assert check.state == "MISSING"
    assert ("task_model.llm.api_key_env: the environment variable EVOFORGE_CANARY_UNSET is not set"
            in check.detail)
    assert servers["task"].tokens == []  # not probed without its key
    servers["analyze"].needs_key = True
    cfg = RunConfig.model_validate({"llm": {"base_url": servers["main"].base_url},
                                    "analyze": {"llm": {"base_url": servers["analyze"].base_url}}})
    check = check_llm(cfg)
    assert check.state == "MISSING"
    assert (f"{servers['analyze'].base_url}: HTTP 401 on /models (no key sent: set analyze.llm.api_key_env)"
            in check.detail)
