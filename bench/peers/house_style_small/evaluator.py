"""house_style on fewer cases (the first 30 train, 10 val and 20 test cases), so that a peer
comparison on a slow CPU model fits in minutes; run, metric and feedback are house_style's own."""

from evoforge.evaluators.tasks.house_style.evaluator import cases as _all_cases
from evoforge.evaluators.tasks.house_style.evaluator import feedback, metric, run

SIZES = {"train": 30, "val": 10, "test": 20}

__all__ = ["cases", "feedback", "metric", "run"]


def cases() -> dict[str, list[dict]]:
    """The first SIZES[split] cases of each of house_style's splits."""
    every = _all_cases()
    return {split: every[split][:size] for split, size in SIZES.items()}
