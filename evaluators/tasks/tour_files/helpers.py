"""Frozen helpers of the tour project: distances between cities and the length of a tour."""

import math

Point = tuple[float, float]


def distance_matrix(points: list[Point]) -> list[list[float]]:
    """The Euclidean distance between every pair of cities, as a list of rows."""
    return [[math.dist(p, q) for q in points] for p in points]


def tour_length(points: list[Point], tour: list[int]) -> float:
    """The length of the closed tour that visits ``tour`` in order and returns to its start."""
    return sum(math.dist(points[tour[k - 1]], points[tour[k]]) for k in range(len(tour)))
