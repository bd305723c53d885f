"""Prefix caching on a llama.cpp server: the prefill time a research call saves because evoforge
lays its prompts out static part first.

The research prompt (stages/research_prompt.py) starts with the part that is the same for every
call of a run (system message, task, objective, answer rules) and puts what varies (the parent, its
metrics, inspirations) after it, so a server that keeps the previous prompt's KV cache (llama.cpp
reuses the longest common prefix) prefills only the new tail. This bench sends the research prompts
of N different parents of one task twice, with `max_tokens=1` (so the time is the prefill):

- `static-first`: as evoforge sends them;
- `varying-first`: the same text with the parent's section moved to the front, so no two prompts
  share a prefix (what a prompt laid out the other way round costs).

It prints the median seconds per call of each layout, the prompt tokens, the seconds saved per
research call, and the `cached_tokens` the server reported (llama-cpp-python's server reports none).

    python bench/prefix_cache.py                      # starts `evoforge serve-llm --model smollm2`
    python bench/prefix_cache.py --base-url http://127.0.0.1:8011/v1 --calls 8 --json out.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import openai

from evoforge.evaluators.task import load_task
from evoforge.infra.nodes import Node
from evoforge.stages.research_prompt import research_messages

_ANNOUNCED = re.compile(r"--llm-base-url (\S+) --llm-model (\S+)")


def _prompts(task_name: str, calls: int) -> list[list[dict[str, str]]]:
    """Research prompts of `calls` different parents of the task (scores and motivations differ)."""
    task = load_task(task_name)
    out = []
    for i in range(calls):
        parent = Node(id=f"parent{i:04d}", run_id="bench", code=task.initial_code, score_full=1.0 + i / 100,
                      motivation=f"Variant {i}: moved circle {i} towards the corner and re-spaced the ring.",
                      metrics={"combined_score": 1.0 + i / 100, "validity": 1.0})
        out.append(research_messages(task, parent, [], "diff"))
    return out


def _varying_first(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """The same messages with the parent's section first: no prefix shared between parents."""
    user = messages[1]["content"]
    start = user.index("## Parent")
    end = user.index("\n", user.index("Metrics:")) + 1
    moved = user[start:end] + user[:start] + user[end:]
    return [messages[0], {"role": "user", "content": moved}]


def _time(client: openai.OpenAI, model: str, messages: list[dict[str, str]]) -> tuple[float, int, int]:
    start = time.perf_counter()
    answer = client.chat.completions.create(model=model, messages=messages,  # type: ignore[arg-type]
                                            max_tokens=1, temperature=0.0)
    seconds = time.perf_counter() - start
    usage = answer.usage
    details = getattr(usage, "prompt_tokens_details", None) if usage else None
    cached = int(getattr(details, "cached_tokens", 0) or 0) if details else 0
    return seconds, int(usage.prompt_tokens if usage else 0), cached


def measure(base_url: str, model: str, task: str, calls: int) -> dict[str, Any]:
    """Median prefill seconds per call of each layout (each layout's calls in a row)."""
    client = openai.OpenAI(base_url=base_url, api_key="EMPTY", timeout=600)
    prompts = _prompts(task, calls + 1)
    result: dict[str, Any] = {"task": task, "calls": calls, "base_url": base_url, "model": model}
    for name, layout in (("varying_first", _varying_first), ("static_first", lambda m: m)):
        _time(client, model, layout(prompts[0]))  # the first of a block fills the cache
        timed = [_time(client, model, layout(p)) for p in prompts[1:]]
        result[name] = {"median_s": round(statistics.median(t[0] for t in timed), 4),
                        "seconds": [round(t[0], 4) for t in timed],
                        "prompt_tokens": statistics.median(t[1] for t in timed),
                        "cached_tokens": sum(t[2] for t in timed)}
    saved = result["varying_first"]["median_s"] - result["static_first"]["median_s"]
    result["saved_s_per_call"] = round(saved, 4)
    result["saved_fraction"] = round(saved / result["varying_first"]["median_s"], 3)
    return result


def _serve() -> tuple[subprocess.Popen[str], str, str]:
    proc = subprocess.Popen([sys.executable, "-m", "evoforge.flows.cli", "serve-llm", "--model", "smollm2",
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        match = _ANNOUNCED.search(line)
        if match:
            return proc, match.group(1), match.group(2)
    raise SystemExit(f"evoforge serve-llm exited ({proc.wait()}) before it served")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", help="an OpenAI-compatible server (default: start SmolLM2)")
    parser.add_argument("--model", default="", help="the model to ask (default: the server's first)")
    parser.add_argument("--task", default="circle_packing")
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    proc = None
    base_url, model = args.base_url, args.model
    if not base_url:
        proc, base_url, model = _serve()
    try:
        if not model:
            model = openai.OpenAI(base_url=base_url, api_key="EMPTY").models.list().data[0].id
        result = measure(base_url, model, args.task, args.calls)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=60)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
