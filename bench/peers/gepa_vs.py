"""GEPA three ways on one prompt task and one model: GEPA 0.1.4 itself, MLflow's GEPA optimiser
(`mlflow.genai.optimize_prompts`), and `evoforge run --algorithm gepa`.

The task is house_style on 30 train / 10 val / 20 test cases (bench/peers/house_style_small); the
same server is every system's task model and its reflection (proposer) model, reached through two
counting lanes (bench/peers/proxy.py), so calls and tokens are counted the same way for all.
Each system gets the same budget of task-model calls on train and val (GEPA's max_metric_calls;
evoforge's is set as proposals and evaluations that spend about as many, and the calls actually
made are reported). The winner's test score is then measured by this script, 20 more task-model
calls on the test cases, the same way for every system (not counted in the budget).
Run it with /tmp/peersvenv's Python (see README.md)::

    /tmp/peersvenv/bin/python bench/peers/gepa_vs.py --base-url http://127.0.0.1:18431/v1 \\
        --model SmolLM2-135M-Instruct.Q4_1 --budget 60
    /tmp/peersvenv/bin/python bench/peers/gepa_vs.py --sim --budget 60   # evoforge's simulator
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm: no download at import

from common import (  # noqa: E402
    RESULTS,
    SEED_PROMPT,
    TASK,
    TASK_DIR,
    add_server_args,
    chat,
    check_server_args,
    evoforge_env,
    llm_server,
    machine,
    messages_for,
    require,
    score_on,
    write,
)
from proxy import Lanes  # noqa: E402

SYSTEMS = ("gepa", "mlflow", "evoforge")


def gepa_data(split: str) -> list[dict[str, Any]]:
    """The split's cases as GEPA DefaultAdapter instances (the user message is house_style's)."""
    return [{"input": f"Question: {case['question']}", "additional_context": {},
             "answer": str(case["answer"]), "case": case} for case in TASK.cases()[split]]


def run_gepa(args: argparse.Namespace, lanes: Lanes, model: str, run_dir: Path) -> dict[str, Any]:
    """GEPA 0.1.4's optimize(): DefaultAdapter, its LM (litellm, OpenAI-compatible) on both lanes."""
    import gepa
    from gepa.adapters.default_adapter.default_adapter import DefaultAdapter, EvaluationResult
    from gepa.lm import LM

    def evaluator(data: dict[str, Any], response: str) -> EvaluationResult:
        score = TASK.metric(data["case"], response)
        text = TASK.feedback(data["case"], response, score) or "All correct."
        return EvaluationResult(score=score, feedback=text)

    task_lm = LM(f"openai/{model}", temperature=0.0, max_tokens=args.task_max_tokens, num_retries=0,
                 api_base=lanes["task"].base_url, api_key="unused")
    reflection_lm = LM(f"openai/{model}", temperature=0.8, max_tokens=args.proposer_max_tokens, num_retries=0,
                       api_base=lanes["proposer"].base_url, api_key="unused")
    result = gepa.optimize(seed_candidate={"system_prompt": SEED_PROMPT}, trainset=gepa_data("train"),
                           valset=gepa_data("val"),
                           adapter=DefaultAdapter(model=task_lm, evaluator=evaluator),
                           reflection_lm=reflection_lm, reflection_minibatch_size=args.minibatch,
                           max_metric_calls=args.budget, run_dir=str(run_dir), seed=args.seed,
                           raise_on_exception=False)
    best = result.best_idx
    return {"best_prompt": result.best_candidate["system_prompt"],
            "best_val": round(result.val_aggregate_scores[best], 4),
            "seed_val": round(result.val_aggregate_scores[0], 4), "candidates": len(result.candidates),
            "metric_calls_reported": result.total_metric_calls}


def run_mlflow(args: argparse.Namespace, lanes: Lanes, model: str, run_dir: Path) -> dict[str, Any]:
    """mlflow.genai.optimize_prompts with its GepaPromptOptimizer; the reflection model is a
    litellm "openai:/MODEL" URI, pointed at the proposer lane through OPENAI_API_BASE (MLflow passes
    GEPA no api_base) and given GEPA's reflection_lm_kwargs (without them litellm sets no token
    limit and the server generates until its context is full); train_data is the val cases
    (MLflow hands GEPA no separate valset)."""
    import mlflow
    from mlflow.entities import Feedback
    from mlflow.genai.optimize import GepaPromptOptimizer
    from mlflow.genai.scorers import scorer

    os.environ["OPENAI_API_BASE"] = lanes["proposer"].base_url
    os.environ.setdefault("OPENAI_API_KEY", "unused")  # litellm insists on a key; the server ignores it
    mlflow.set_tracking_uri(f"sqlite:///{run_dir / 'mlflow.db'}")
    mlflow.set_experiment("peers-gepa")
    prompt = mlflow.genai.register_prompt(name="house_style", template=SEED_PROMPT)
    by_question = {case["question"]: case for split in ("train", "val") for case in TASK.cases()[split]}

    def predict_fn(question: str) -> str:
        system = mlflow.genai.load_prompt(prompt.uri).format()
        messages = messages_for(system, by_question[question])
        return chat(lanes["task"].base_url, model, messages, args.task_max_tokens)

    @scorer
    def house_style(inputs: dict[str, Any], outputs: str) -> Feedback:
        case = by_question[inputs["question"]]
        score = TASK.metric(case, outputs)
        return Feedback(value=score, rationale=TASK.feedback(case, outputs, score) or "All correct.")

    data = [{"inputs": {"question": case["question"]}, "expectations": {"answer": case["answer"]}}
            for case in TASK.cases()["val"]]
    optimizer = GepaPromptOptimizer(reflection_model=f"openai:/{model}", max_metric_calls=args.budget,
                                    gepa_kwargs={"reflection_minibatch_size": args.minibatch,
                                                 "seed": args.seed, "reflection_lm_kwargs": {
                                                     "max_tokens": args.proposer_max_tokens,
                                                     "temperature": 0.8}})
    result = mlflow.genai.optimize_prompts(predict_fn=predict_fn, train_data=data, prompt_uris=[prompt.uri],
                                           optimizer=optimizer, scorers=[house_style])
    best = result.optimized_prompts[0]
    return {"best_prompt": best.template, "best_val": result.final_eval_score,
            "seed_val": result.initial_eval_score}


def run_evoforge(args: argparse.Namespace, lanes: Lanes, model: str, run_dir: Path) -> dict[str, Any]:
    """`evoforge run --algorithm gepa`: proposals (rollout + reflection + gate) and evaluations
    sized to spend about `budget` task-model calls: (budget - val) / (2 * minibatch) proposals."""
    n_val = len(TASK.cases()["val"])
    proposals = max(1, (args.budget - n_val) // (2 * args.minibatch))
    evals = 1 + max(1, (args.budget - n_val) // (2 * args.minibatch + n_val))
    config = {"cognition": {"enabled": False}, "gepa": {"minibatch": args.minibatch},
              "budget": {"max_proposals": proposals},
              "llm": {"max_tokens": args.proposer_max_tokens, "temperature": 0.8},
              "task_model": {"llm": {"base_url": lanes["task"].base_url, "model": model},
                             "max_tokens": args.task_max_tokens, "temperature": 0.0}}
    config_file = run_dir / "config.json"
    config_file.write_text(json.dumps(config))
    command = ["evoforge", "run", str(TASK_DIR), "--algorithm", "gepa", "--run-dir", str(run_dir / "run"),
               "--workspace", str(run_dir / "ws"), "--config", str(config_file), "--llm-base-url",
               lanes["proposer"].base_url, "--llm-model", model, "--max-evals", str(evals), "--seed",
               str(args.seed), "--quiet", "--no-mlflow"]
    done = subprocess.run(command, env=evoforge_env(), capture_output=True, text=True)
    (run_dir / "evoforge.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"evoforge run exited {done.returncode}: {(done.stderr or done.stdout)[-400:]}")
    status = json.loads((run_dir / "run" / "status.json").read_text())
    from evoforge.infra.nodestore import NodeStore

    with NodeStore(run_dir / "run" / "nodes.duckdb", read_only=True) as store:
        nodes, final = store.all(), store.final_scores()
        best = store.best()
    seed = next((n for n in nodes if n.origin == "seed"), None)
    return {"best_prompt": best.code if best else SEED_PROMPT, "best_val": status["best_score"],
            "seed_val": seed.score_full if seed else None, "max_proposals": proposals, "max_evals": evals,
            "proposals": status["proposals"], "evaluations": status["evaluations"],
            "gate_rejected": sum(1 for n in nodes if n.failed_stage == "gate"),
            "failed": sum(1 for n in nodes if n.status.value == "failed"),
            "not_evaluated_by_reason": dict(collections.Counter(
                f"{n.failed_stage}:{n.reason}" for n in nodes if n.evaluated_at is None)),
            "evoforge_test_winner": final[0].score if final else None,
            "final_report_test_evals": len(final), "task_model_calls_reported": status["task_model"]["calls"],
            "run_wall_s": round(status["wall_s"], 1)}  # evoforge's own clock: without process start-up


RUNNERS = {"gepa": run_gepa, "mlflow": run_mlflow, "evoforge": run_evoforge}


def one_system(name: str, args: argparse.Namespace, lanes: Lanes, model: str, root: Path) -> dict[str, Any]:
    """Run one system, then the test score of its winner; a system that cannot run is recorded as blocked."""
    run_dir = root / name
    run_dir.mkdir()
    lanes.reset()
    start = time.perf_counter()
    try:
        row: dict[str, Any] = {"system": name, "status": "ran", **RUNNERS[name](args, lanes, model, run_dir)}
    except Exception as err:  # a peer that cannot run here is a finding, recorded with its reason
        (run_dir / "error.txt").write_text(traceback.format_exc())
        return {"system": name, "status": "blocked", "reason": f"{type(err).__name__}: {err}"[:600],
                "wall_s": round(time.perf_counter() - start, 1), "llm": lanes.counts()}
    row["wall_s"] = round(time.perf_counter() - start, 1)
    row["llm"] = lanes.counts()
    # evoforge's final report scores its top candidates on the test cases inside the run: those
    # calls are outside the search budget, as this script's own test calls are for the peers
    test_calls = row.get("final_report_test_evals", 0) * len(TASK.cases()["test"])
    row["search_task_calls"] = row["llm"]["task"]["calls"] - test_calls
    row["llm_calls_total"] = row["search_task_calls"] + row["llm"]["proposer"]["calls"]
    lanes.reset()
    row["test_winner"] = score_on("test", row["best_prompt"], lanes["task"].base_url, model,
                                  args.task_max_tokens)
    row["test_llm"] = lanes.counts()["task"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_server_args(parser)
    parser.add_argument("--budget", type=int, default=60, help="task-model calls on train and val")
    parser.add_argument("--minibatch", type=int, default=3)
    parser.add_argument("--task-max-tokens", type=int, default=32)
    parser.add_argument("--proposer-max-tokens", type=int, default=512)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS / "peers_gepa.json")
    args = parser.parse_args()
    check_server_args(parser, args)
    systems = [s for s in args.systems.split(",") if s]
    if unknown := set(systems) - set(SYSTEMS):
        parser.error(f"unknown systems {sorted(unknown)}; choose from {', '.join(SYSTEMS)}")
    require(parser, ["gepa", "litellm"] if {"gepa", "mlflow"} & set(systems) else [])
    rows = []
    with llm_server(args) as (base_url, model), Lanes(base_url, ["task", "proposer"]) as lanes, \
            tempfile.TemporaryDirectory(prefix="peers-gepa-") as tmp:
        for name in systems:
            rows.append(one_system(name, args, lanes, model, Path(tmp)))
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "best_prompt"}), flush=True)
    write(args.out, {"benchmark": "gepa_vs", "task": "house_style (30 train / 10 val / 20 test)",
                     "model": model, "server": "simulator" if args.sim else "real",
                     "budget_task_model_calls": args.budget, "minibatch": args.minibatch,
                     "task_max_tokens": args.task_max_tokens, "proposer_max_tokens": args.proposer_max_tokens,
                     "machine": machine(), "systems": rows})


if __name__ == "__main__":
    main()
