"""Two constants on separate lines: the evaluator scores CAUSE and never reads INERT."""

# EVOLVE-BLOCK-START
CAUSE = 2.0


def cause() -> float:
    """The value the score is made of."""
    return CAUSE


INERT = 5.0
# EVOLVE-BLOCK-END
