"""Score a harness around the task model: classify() sorts short texts by topic, asking the LLM.

``evaluate(program_path)`` imports the candidate and calls ``classify(text, labels, examples,
llm)`` on each of the fixed cases (generated here from a seed: no download), up to ``WORKERS`` at
once. ``llm(messages) -> str`` is the run's task model, reached from the sandbox through the link
the run provides (``evoforge_channel``: no key, no network; each call counted and held to the
money budget). A case scores 1 when classify() returns its label, else 0; a case whose call
failed (refused for the budget, failed, timed out) scores 0 and is named in the
``task_model_errors`` artifact; when every call failed the evaluation fails with the last reason.
``combined_score`` is the share of cases right; ``mistakes`` shows the first few wrong cases with
the model's answer, for the proposer.
"""

import importlib.util
import random
import threading
from concurrent.futures import ThreadPoolExecutor

from evoforge_channel import TaskModelError, llm

SEED = 11
LABELS = ("sports", "cooking", "weather", "music")
TOPIC_WORDS = {
    "sports": ("goal", "match", "team", "coach", "league", "referee", "stadium", "player", "season",
               "tackle", "trophy", "striker"),
    "cooking": ("oven", "recipe", "flour", "garlic", "simmer", "spoon", "butter", "pepper", "kitchen",
                "bake", "onion", "sauce"),
    "weather": ("rain", "cloud", "storm", "sunny", "forecast", "wind", "thunder", "humid", "frost",
                "breeze", "drizzle", "snow"),
    "music": ("guitar", "melody", "chorus", "drum", "concert", "violin", "rhythm", "singer", "album",
              "piano", "tempo", "lyrics"),
}
FILLER = ("today", "really", "people", "again", "about", "there", "always", "little", "after", "before",
          "every", "other", "maybe", "still", "quite", "never")
EXAMPLES_PER_LABEL = 6  # the labelled examples a harness may show the model
CASES_PER_LABEL = 6
WORKERS = 8
MISTAKES_SHOWN = 5


def _text(rng: random.Random, label: str, topic: int, filler: int) -> str:
    chosen = rng.sample(TOPIC_WORDS[label], topic) + rng.sample(FILLER, filler)
    rng.shuffle(chosen)
    return " ".join(chosen)


def data() -> tuple[list[tuple[str, str]], list[dict]]:
    """(the labelled examples, the cases): the same on every call."""
    rng = random.Random(SEED)
    examples = [(_text(rng, label, 3, 1), label) for _ in range(EXAMPLES_PER_LABEL) for label in LABELS]
    cases = [{"id": f"c{i}", "text": _text(rng, label, 3, 3), "label": label}
             for i, label in enumerate(label for _ in range(CASES_PER_LABEL) for label in LABELS)]
    return examples, cases


def _load(program_path: str):
    spec = importlib.util.spec_from_file_location("program", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def evaluate(program_path: str) -> dict:
    program = _load(program_path)
    examples, cases = data()
    lock = threading.Lock()
    errors: list[str] = []
    answered = [0]

    def one(case: dict) -> tuple[float, str]:
        answers: list[str] = []

        def ask(messages, **options) -> str:
            try:
                answer = llm(messages, **options)
            except TaskModelError as exc:
                with lock:
                    errors.append(f"[{case['id']}] {exc}")
                raise
            with lock:
                answered[0] += 1
            answers.append(answer)
            return answer

        try:
            got = program.classify(case["text"], list(LABELS), list(examples), ask)
        except TaskModelError:
            return 0.0, ""
        if got == case["label"]:
            return 1.0, ""
        said = answers[-1].splitlines()[0] if answers and answers[-1].strip() else "(no answer)"
        return 0.0, f"[{case['id']}] text {case['text']!r}: expected {case['label']}, got {got!r}; " \
                    f"the model said: {said[:200]}"

    with ThreadPoolExecutor(WORKERS) as pool:
        results = list(pool.map(one, cases))
    if errors and not answered[0]:
        raise RuntimeError(f"every task model call failed (last: {errors[-1]})")
    right = sum(score for score, _ in results)
    mistakes = [note for _, note in results if note][:MISTAKES_SHOWN]
    report = {"combined_score": right / len(cases), "correct": right, "cases": float(len(cases)),
              "failed_calls": float(len(errors))}
    if mistakes:
        report["mistakes"] = "\n".join(mistakes)
    if errors:
        report["task_model_errors"] = "\n".join(errors[:MISTAKES_SHOWN])
    return report
