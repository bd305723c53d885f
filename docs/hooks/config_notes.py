"""What a config key does, for the keys whose model in infra/config.py has no comment yet.

The reference takes a key's comment from the model's source first; these fill the gaps (the
wording of the hand-written reference they replace). A test checks that every key named here
exists (a dotted key, or Model.field for the item models)
and still has no comment of its own, so this list only shrinks. Example::

    NOTES["budget.max_evals"]  # 'evaluations in the run folder, resumed ones included'
"""

NOTES = {
    "seed": "seeds every random choice of the run (samplers, routing, Optuna)",
    "workspace": "run folders, mlflow.db, cognition/",
    "llm.base_url": "an OpenAI-compatible server (--llm-base-url); null: the offline proposer (no LLM)",
    "llm.model": "null: the server's first model (--llm-model)",
    "llm.timeout_s": "the least a whole LLM request is waited for; once the endpoint's pace is "
                     "measured, 3x its predicted seconds when that is longer",
    "llm.max_retries": "on 429 / 5xx / timeouts / connection errors",
    "llm.backoff_s": "first retry delay, doubled each time, jittered (at most 60 s)",
    "llm.temperature": "sampling temperature of the proposer's calls",
    "llm.max_tokens": "answer length; lowered to what the context window leaves; a cut-off answer is "
                      "asked once more with twice the room, cut off again it fails its node",
    "llm.answer_format": "diff (SEARCH/REPLACE) | rewrite (the whole block) | mixed",
    "llm.diff_fraction": "share of diff prompts in mixed mode",
    "budget.max_evals": "evaluations in the run folder, resumed ones included (--max-evals)",
    "budget.max_wall_s": "wall-clock limit of one invocation (--max-wall-s)",
    "budget.max_tokens": "LLM tokens in + out over the run (--max-tokens)",
    "budget.max_proposals": "all proposals, failed ones too; null: 4 x max_evals",
    "engine.mode": "async | sync (generations with a barrier, the baseline; --mode)",
    "engine.progress_interval_s": "seconds between status.json snapshots and progress lines",
    "search.sampler": "how parents are chosen (--sampler): a registered sampler's name, a plug-in's too "
                      "(evoforge plugins), checked when the run is built; see Choosing parents",
    "search.map_elites_features": "complexity, diversity or task metrics (each needs feature_ranges)",
    "search.islands": "islands of the islands sampler",
    "staleness.policy": "full | guarded | reflective (--staleness)",
    "adaptive.enabled": "move workers toward the slow stage every tau_s (--adaptive)",
    "adaptive.tau_s": "seconds between adaptive decisions",
    "adaptive.min_workers": "no stage goes below this many workers",
    "sandbox.timeout_s": "wall-clock limit of one evaluation; null: the task's timeout_s",
    "sandbox.memory_mb": "address-space limit of one evaluation",
    "sandbox.max_procs": "processes one evaluation may run at once",
    "sandbox.max_open_files": "open file descriptors of one evaluation",
    "analyze.enabled": "the Analyzer reports on every evaluated candidate",
    "task_model.max_tokens": "answer length of one task-model call (a sandboxed call gets no more)",
    "task_model.temperature": "sampling temperature of the task model",
    "ace.mode": "offline (train cases, round and round) | online (val stream, once)",
    "judge.weight": "LLM judge blended into fitness; 0: off",
    "param_search.enabled": "Optuna TPE on the knobs of every new structure that declares some",
    "rounds.size": "finished candidates per round; null: one per plan slot",
    "plan.slots": "hypothesis branches at once",
    "plan.every": "re-plan every this many rounds",
    "promotion.every": "gated tasks: promote every this many rounds",
    "promotion.top_k": "the top-K pilot candidates not yet promoted go to `full`",
    "tracking.mlflow": "track the run in MLflow (--no-mlflow turns it off)",
    "tracking.tracking_uri": "null: sqlite:///<workspace>/mlflow.db",
    "tracking.experiment": "null: evoforge/<task>",
    "cognition.enabled": "prior knowledge from <workspace>/cognition/ (LanceDB), shared by runs",
    "cognition.top_k": "items retrieved per query",
    "EndpointConfig.base_url": "the endpoint's OpenAI-compatible server, e.g. http://gpu-a:8000/v1",
    "ModelPrice.input_per_mtok": "USD per million prompt tokens",
    "ModelPrice.output_per_mtok": "USD per million answer tokens",
}
