"""Improvement step of the tour project: shorten the constructed tour with local moves.

``improve(points, tour)`` returns a shorter (never longer) tour through the same cities. It runs
up to MAX_PASSES sweeps of 2-opt (reverse a stretch of the tour) restricted to each city's
NEIGHBOURS nearest cities, optionally followed by or-opt (move a run of 1-3 cities elsewhere).
The whole file may change.
"""

from helpers import Point, distance_matrix

MAX_PASSES = 1  # sweeps over the tour; a sweep that finds no gain ends the search early
NEIGHBOURS = 5  # a move may only join a city to one of this many nearest cities
BOTH_SIDES = False  # 2-opt also tries replacing the edge before each city, not only the one after
FIRST_GAIN = True  # take a city's first improving move (else its best one)
OR_OPT = False  # after 2-opt, move runs of cities to a better place in the tour
SEGMENTS = [1, 2, 3]  # run lengths or-opt tries, in this order
SCAN = "forward"  # one of "forward", "backward": the order a sweep visits the cities in
MIN_GAIN = 1e-9  # smaller gains are rounding noise and ignored


def _order(n: int) -> range:
    return range(n - 1, -1, -1) if SCAN == "backward" else range(n)


def _reverse(tour: list[int], pos: list[int], i: int, j: int) -> None:
    """Replace edges (tour[i], tour[i+1]) and (tour[j], tour[j+1]) by reversing the stretch between."""
    i, j = min(i, j), max(i, j)
    tour[i + 1:j + 1] = tour[i + 1:j + 1][::-1]
    for k in range(i + 1, j + 1):
        pos[tour[k]] = k


def two_opt_pass(tour: list[int], dist: list[list[float]], near: list[list[int]]) -> bool:
    """One 2-opt sweep over the tour, changed in place; True when some move was made."""
    n = len(tour)
    pos = [0] * n
    for k, city in enumerate(tour):
        pos[city] = k
    moved = False
    for a in [tour[k] for k in _order(n)]:
        sides = (1, -1) if BOTH_SIDES else (1,)
        best, move = MIN_GAIN, None
        for side in sides:
            b = tour[(pos[a] + side) % n]
            for c in near[a]:
                d = tour[(pos[c] + side) % n]
                if c == b or d == a:
                    continue
                gain = dist[a][b] + dist[c][d] - dist[a][c] - dist[b][d]
                if gain > best:
                    best, move = gain, (side, c)
                    if FIRST_GAIN:
                        break
            if move and FIRST_GAIN:
                break
        if move:
            side, c = move
            i, j = pos[a], pos[c]
            _reverse(tour, pos, i if side == 1 else i - 1, j if side == 1 else j - 1)
            moved = True
    return moved


def or_opt_pass(tour: list[int], dist: list[list[float]], near: list[list[int]]) -> bool:
    """One or-opt sweep: move a run of cities next to a near city when that shortens the tour."""
    moved = False
    for length in SEGMENTS:
        i = 0
        while i + length <= len(tour) and len(tour) > length + 2:
            run = tour[i:i + length]
            prev, after = tour[i - 1], tour[(i + length) % len(tour)]
            saved = dist[prev][run[0]] + dist[run[-1]][after] - dist[prev][after]
            rest = tour[:i] + tour[i + length:]
            place = {city: k for k, city in enumerate(rest)}
            best, move = MIN_GAIN, None
            for c in near[run[0]] + near[run[-1]]:
                if c not in place:
                    continue
                k = place[c]
                for p, q in ((rest[k - 1], c), (c, rest[(k + 1) % len(rest)])):
                    if (p, q) == (prev, after):
                        continue
                    for seg in (run, run[::-1]):
                        gain = saved - dist[p][seg[0]] - dist[seg[-1]][q] + dist[p][q]
                        if gain > best:
                            best, move = gain, (place[p], seg)
            if move:
                k, seg = move
                tour[:] = rest[:k + 1] + seg + rest[k + 1:]
                moved = True
            i += 1
    return moved


def improve(points: list[Point], tour: list[int]) -> list[int]:
    """A tour through the same cities as ``tour``, no longer than it."""
    tour = list(tour)
    if len(tour) < 5:
        return tour
    dist = distance_matrix(points)
    k = max(1, min(NEIGHBOURS, len(tour) - 1))
    near = [sorted((c for c in range(len(tour)) if c != a), key=row.__getitem__)[:k]
            for a, row in enumerate(dist)]
    for _ in range(MAX_PASSES):
        moved = two_opt_pass(tour, dist, near)
        if OR_OPT:
            moved = or_opt_pass(tour, dist, near) or moved
        if not moved:
            break
    return tour
