"""What LLM calls cost: USD from the price table (per million tokens), by model name."""

from __future__ import annotations

from collections.abc import Mapping

from evoforge.infra.config import ModelPrice


def call_cost(prices: Mapping[str, ModelPrice], model: str, tokens_in: int, tokens_out: int) -> float | None:
    """USD for these tokens of `model`, or None when the price table does not name it.

    >>> call_cost({"m": ModelPrice(input_per_mtok=0.15, output_per_mtok=0.6)}, "m", 2_000_000, 1_000_000)
    0.9
    >>> call_cost({}, "m", 10, 10) is None
    True
    """
    price = prices.get(model)
    if price is None:
        return None
    return (tokens_in * price.input_per_mtok + tokens_out * price.output_per_mtok) / 1_000_000
