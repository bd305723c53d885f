"""Construction step of the tour project: a first closed tour through every city.

``build_tour(points)`` returns the city indices in visiting order (the tour closes back on its
start); ``improve.py`` then shortens it. Only the code between the EVOLVE markers may change.
"""

import heapq

from helpers import Point, distance_matrix

# EVOLVE-BLOCK-START
METHOD = "neighbour"  # one of "neighbour", "insertion"
START = "first"  # one of "first", "centre", "corner", "outlier"
CANDIDATES = 1  # neighbour method: how many of the nearest unvisited cities are weighed per step
LOOKAHEAD = 0.5  # neighbour method: weight of a candidate's distance to its nearest unvisited city
PICK = "nearest"  # insertion method: insert next the city one of "nearest", "farthest" from the tour


def start_city(points: list[Point]) -> int:
    """The city the tour starts from, by the START rule."""
    if START == "first":
        return 0
    cx = sum(x for x, _ in points) / len(points)
    cy = sum(y for _, y in points) / len(points)
    if START == "corner":
        return min(range(len(points)), key=lambda c: points[c][0] + points[c][1])
    spread = [(x - cx) ** 2 + (y - cy) ** 2 for x, y in points]
    if START == "outlier":
        return max(range(len(points)), key=spread.__getitem__)
    return min(range(len(points)), key=spread.__getitem__)


def step_cost(dist: list[list[float]], here: int, city: int, unvisited: set[int]) -> float:
    """The cost of stepping from ``here`` to ``city``, counting LOOKAHEAD of the hop after it."""
    onward = min((dist[city][other] for other in unvisited if other != city), default=0.0)
    return dist[here][city] + LOOKAHEAD * onward


def nearest_neighbour(dist: list[list[float]], start: int) -> list[int]:
    """Walk from ``start``, each time to the best of the CANDIDATES nearest unvisited cities."""
    tour = [start]
    unvisited = set(range(len(dist))) - {start}
    while unvisited:
        here = tour[-1]
        near = heapq.nsmallest(max(1, CANDIDATES), unvisited, key=dist[here].__getitem__)
        city = near[0] if len(near) == 1 else min(near, key=lambda c: step_cost(dist, here, c, unvisited))
        tour.append(city)
        unvisited.remove(city)
    return tour


def insertion(dist: list[list[float]], start: int) -> list[int]:
    """Grow the tour from ``start`` by inserting one city at a time where it adds the least length."""
    tour = [start]
    gap = {city: dist[start][city] for city in range(len(dist)) if city != start}
    while gap:
        pick = max if PICK == "farthest" else min
        city = pick(gap, key=gap.__getitem__)
        del gap[city]
        row = dist[city]
        at = min(range(len(tour)),
                 key=lambda k: row[tour[k - 1]] + row[tour[k]] - dist[tour[k - 1]][tour[k]])
        tour.insert(at, city)
        for other in gap:
            gap[other] = min(gap[other], row[other])
    return tour


def build_tour(points: list[Point]) -> list[int]:
    """A closed tour through every city, as city indices in visiting order."""
    dist = distance_matrix(points)
    start = start_city(points)
    if METHOD == "insertion":
        return insertion(dist, start)
    return nearest_neighbour(dist, start)
# EVOLVE-BLOCK-END
