"""Guess a number: the evaluator scores how close ``guess()`` comes to its hidden target."""


# EVOLVE-BLOCK-START
def guess() -> float:
    """Return the guess; only the numbers below need to change."""
    base = 1.5
    step = 0.25
    return base + 2.0 * step


# EVOLVE-BLOCK-END
