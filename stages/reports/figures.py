"""The report's figures: gather a run's nodes and timeline into plain data, draw the PNGs into
`<run>/report/`, and give report.md the section that embeds them.

The data functions are pure (nodes and timeline rows in, lists and dicts out), so tests check
what a plot shows without reading pixels; `write_figures` draws them with infra/plots.py.
"""

from __future__ import annotations

import bisect
import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evoforge.infra import plots
from evoforge.infra.nodes import EVALUATED, FAILED, REJECTED, Node
from evoforge.infra.runfiles import RunPaths
from evoforge.infra.timeline import read_timeline
from evoforge.stages.evaluation.guardrails import QUICK_TEST_PREFIX, STATIC_PREFIX

log = logging.getLogger("evoforge.report")

_PREFIXES = ("rejected before evaluation: ", QUICK_TEST_PREFIX, STATIC_PREFIX, "evaluator reported error: ")
_EXCEPTION = re.compile(r"\b([A-Z][A-Za-z]*(?:Error|Exception|Timeout|Interrupt|Exit))\b")
_HEX_ID = re.compile(r"\b(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b")  # a node id, not a number's digits
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
_WHERE = re.compile(r"\s*\(in [^()]*(?:\([^()]*\)[^()]*)*\)\s*$")  # "(in evaluate(), evaluator.py:63)"
_LABEL = 60


@dataclass(frozen=True)
class Figure:
    """One plot of the report: its title, file, and one line on what it shows."""

    title: str
    path: Path
    caption: str


# --- the time axis -------------------------------------------------------------------------------
def wall_clock(rows: Sequence[dict[str, Any]]) -> Callable[[float], float]:
    """Clock time -> the run's wall seconds, from the timeline's (t, wall_s) pairs: between two
    lines the clock advances at most as far as `wall_s` did, so the gap between two sessions of a
    resumed run is squeezed out. With no timeline, seconds since the first evaluation (the caller's)."""
    pairs = sorted((r["t"], r["wall_s"]) for r in rows if "t" in r and "wall_s" in r)
    ts = [t for t, _ in pairs]

    def to_wall(t: float) -> float:
        i = bisect.bisect_right(ts, t) - 1
        if i < 0:  # before the first line (the seed's evaluation): count back from it
            return max(0.0, pairs[0][1] - (pairs[0][0] - t)) if pairs else t
        t0, w0 = pairs[i]
        step = pairs[i + 1][1] - w0 if i + 1 < len(pairs) else float("inf")
        return w0 + min(t - t0, max(0.0, step))

    return to_wall


def evaluation_order(nodes: Sequence[Node]) -> list[Node]:
    """The nodes an evaluation ran on, in the order the evaluations finished."""
    return sorted((n for n in nodes if n.evaluated_at is not None), key=lambda n: n.evaluated_at or 0.0)


# --- the data behind each plot ---------------------------------------------------------------------
def best_curve(nodes: Sequence[Node], level: str, maximize: bool,
               to_wall: Callable[[float], float]) -> tuple[list[int], list[float], list[float]]:
    """(evaluation index, wall minutes, best score so far) at every evaluation from the first one
    that produced a score at `level`."""
    evals, minutes, best_so_far = [], [], []
    best: float | None = None
    for i, node in enumerate(evaluation_order(nodes), start=1):
        score = node.score(level) if node.status == EVALUATED else None
        if score is not None and (best is None or (score > best if maximize else score < best)):
            best = score
        if best is not None:
            evals.append(i)
            minutes.append(to_wall(node.evaluated_at or 0.0) / 60)
            best_so_far.append(best)
    return evals, minutes, best_so_far


def error_class(error: str | None) -> str:
    """A short, stable name for an error text: the exception it names (the last one, as in a
    traceback) with its message, or else its first clause; numbers, ids and quoted names blanked
    out, so that errors differing only in values count as one."""
    text = (error or "").strip()
    quick = text.startswith(QUICK_TEST_PREFIX)
    for prefix in _PREFIXES:
        text = text.removeprefix(prefix)
    text = _WHERE.sub("", text)
    found = list(_EXCEPTION.finditer(text))
    if found:
        text = text[found[-1].start():]
    else:
        text = re.split(r"[:;\n]", text, maxsplit=1)[0]
    text = _NUMBER.sub("N", _QUOTED.sub("'…'", _HEX_ID.sub("…", text.split("\n")[0])))
    name = " ".join(text.split()) or "no reason recorded"
    name = name if len(name) <= _LABEL else name[:_LABEL - 1] + "…"
    return f"quick test: {name}" if quick else name


def failure_reason(node: Node) -> str | None:
    """'<level>: <error class>' for a failed or rejected node (what status.json counts as
    failed), None for any other."""
    if node.status not in (FAILED, REJECTED):
        return None
    where = node.failed_stage or str(node.status)
    return f"{where}: {error_class(node.error)}"


def failure_counts(nodes: Sequence[Node]) -> dict[str, int]:
    """How many nodes failed for each reason."""
    return dict(Counter(r for n in nodes if (r := failure_reason(n)) is not None))


def ancestry(best_id: str | None, nodes: Sequence[Node]) -> list[str]:
    """The ids from `best_id` up through its parents to the seed (best first)."""
    by_id = {n.id: n for n in nodes}
    path: list[str] = []
    node = by_id.get(best_id or "")
    while node is not None and node.id not in path:
        path.append(node.id)
        node = by_id.get(node.parent_id or "")
    return path


def lineage_data(nodes: Sequence[Node], level: str) -> tuple[dict[str, tuple[float, float]],
                                                              list[tuple[str, str]]]:
    """Each scored node at (evaluation index, score at `level`), and the parent -> child edges."""
    points = {}
    for i, node in enumerate(evaluation_order(nodes), start=1):
        score = node.score(level)
        if score is not None:
            points[node.id] = (float(i), score)
    edges = [(n.parent_id, n.id) for n in nodes if n.parent_id in points and n.id in points]
    return points, edges  # type: ignore[return-value]


def best_node_id(nodes: Sequence[Node], level: str, maximize: bool) -> str | None:
    """The evaluated node with the best score at `level` (the earliest on a tie)."""
    scored = [n for n in nodes if n.status == EVALUATED and n.score(level) is not None]
    if not scored:
        return None
    sign = 1.0 if maximize else -1.0
    return max(scored, key=lambda n: (sign * n.score(level), -n.created_at)).id  # type: ignore[operator]


def _segments(rows: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The timeline cut into sessions (per-stage `finished` counts restart in each)."""
    out: list[list[dict[str, Any]]] = []
    for row in rows:
        if not out or row.get("session") != out[-1][-1].get("session"):
            out.append([])
        out[-1].append(row)
    return out


def throughput(rows: Sequence[dict[str, Any]], window: int = 5) -> list[plots.Series]:
    """Items finished per minute per stage over wall minutes, over `window` timeline lines."""
    xs: dict[str, list[float]] = {}
    ys: dict[str, list[float]] = {}
    for part in _segments(rows):
        for j in range(1, len(part)):
            a, b = part[max(0, j - window)], part[j]
            dt = b["wall_s"] - a["wall_s"]
            if dt <= 0:
                continue
            for stage, g in b.get("stages", {}).items():
                done = g["finished"] - a.get("stages", {}).get(stage, {}).get("finished", 0)
                xs.setdefault(stage, []).append(b["wall_s"] / 60)
                ys.setdefault(stage, []).append(60.0 * done / dt)
    active = set(active_stages(rows))
    return [plots.Series(stage, xs[stage], ys[stage]) for stage in xs if stage in active]


def active_stages(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The stages that finished, ran or queued anything in the timeline (a stage the run left
    idle, e.g. `debug` with nothing to repair, would only crowd the plots)."""
    def active(stage: str) -> bool:
        return any(r.get("stages", {}).get(stage, {}).get(g, 0)
                   for r in rows for g in ("finished", "busy", "queue"))

    return [s for s in dict.fromkeys(s for r in rows for s in r.get("stages", {})) if active(s)]


def occupancy(rows: Sequence[dict[str, Any]]) -> tuple[list[float], dict[str, list[float]],
                                                          dict[str, list[float]], dict[str, list[float]]]:
    """(wall minutes, queue depth, workers, busy workers per active stage) at each timeline line."""
    minutes = [r["wall_s"] / 60 for r in rows]
    stages = active_stages(rows)
    pick = {g: {s: [r.get("stages", {}).get(s, {}).get(g, 0) for r in rows] for s in stages}
            for g in ("queue", "workers", "busy")}
    return minutes, pick["queue"], pick["workers"], pick["busy"]


# --- drawing and the markdown --------------------------------------------------------------------
def write_figures(paths: RunPaths, nodes: Sequence[Node], level: str, maximize: bool,
                  best_id: str | None = None) -> list[Figure]:
    """Draw every plot of the run into `paths.figures`; returns them in report order."""
    rows = read_timeline(paths.timeline)
    ordered = evaluation_order(nodes)
    start = ordered[0].evaluated_at if ordered else 0.0
    to_wall = wall_clock(rows) if rows else (lambda t: t - (start or 0.0))
    out = paths.figures
    best_id = best_id or best_node_id(nodes, level, maximize)
    evals, minutes, best = best_curve(nodes, level, maximize, to_wall)
    points, edges = lineage_data(nodes, level)
    chain = ancestry(best_id, nodes)
    counts = failure_counts(nodes)
    t_min, queues, workers, busy = occupancy(rows)
    return [
        Figure("Best score",
               plots.best_score_png(out / "best_score.png", evals, minutes, best, level, maximize),
               f"The best `{level}` score so far, over evaluations and over the run's wall minutes"),
        Figure("Lineage of the best program",
               plots.lineage_png(out / "lineage.png", points, edges, chain, f"{level} score"),
               f"Every scored candidate (x: evaluation index, y: `{level}` score), parent -> child edges; "
               f"in red the {len(chain)} programs from the seed to the best"),
        Figure("Throughput per stage",
               plots.lines_png(out / "throughput.png", "Items finished per minute, per stage", "items/min",
                               throughput(rows)),
               "Items each stage finished per minute (over about 10 s of timeline)"),
        Figure("Queues and workers",
               plots.queues_workers_png(out / "queues_workers.png", t_min, queues, workers, busy),
               "Items waiting for each stage, and each stage's workers (dashed: busy ones)"),
        Figure("Failure reasons", plots.failures_png(out / "failures.png", counts),
               f"{sum(counts.values())} failed or rejected candidates by stage and error class"),
    ]


def figures_section(figures: Sequence[Figure], root: Path) -> list[str]:
    """report.md's figures, as image links relative to the run folder."""
    lines = ["## Figures", ""]
    for fig in figures:
        lines += [f"### {fig.title}", "", f"![{fig.title.lower()}]({fig.path.relative_to(root).as_posix()})",
                  "", fig.caption + ".", ""]
    return lines


def report_figures(paths: RunPaths, nodes: Sequence[Node], stage: str, maximize: bool,
                   best_id: str | None = None) -> tuple[list[str], list[Figure]]:
    """Draw the figures; returns report.md's section and the figures drawn. Figures that cannot
    be drawn (a full disk, say) are named in the section and logged, and the report goes on."""
    start = time.perf_counter()
    try:
        figures = write_figures(paths, nodes, stage, maximize, best_id)
    except (OSError, ValueError) as exc:
        log.warning("the report's figures were not drawn: %s: %s", type(exc).__name__, exc)
        return ["## Figures", "", f"Not drawn: {type(exc).__name__}: {exc}", ""], []
    log.info("drew %d report figures in %.2f s (%s)", len(figures), time.perf_counter() - start,
             paths.figures)
    return figures_section(figures, paths.root), figures
