"""Online bin packing: items arrive one by one and each goes into the open bin priority() prefers."""

import numpy as np


# EVOLVE-BLOCK-START
def priority(item: float, bins: np.ndarray) -> np.ndarray:
    """Score each open bin that can hold ``item``; the item goes into the highest-scoring one.

    Args:
        item: the size of the arriving item
        bins: remaining capacity of every open bin with room for the item (all >= item)

    Returns:
        one finite score per bin, shape ``bins.shape``
    """
    gap = bins - item  # room left in each bin after placing the item
    score = -gap  # best fit: prefer the bin the item fills most
    score -= 10.0 * ((gap > 1.0) & (gap < 17.0))  # avoid leaving a sliver too small to use
    return score


# EVOLVE-BLOCK-END


def run_online(items, capacity) -> int:
    """Pack ``items`` in arrival order into bins of size ``capacity``; return the number of bins.

    The item goes into the open bin with the highest priority among those with room for it
    (ties: the oldest bin); a new bin is opened when no open bin has room.
    """
    remaining = np.empty(len(items))
    used = 0
    for item in items:
        fits = np.flatnonzero(remaining[:used] >= item)
        if fits.size == 0:
            remaining[used] = capacity - item
            used += 1
        else:
            remaining[fits[np.argmax(priority(float(item), remaining[fits]))]] -= item
    return used
