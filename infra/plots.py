"""The report's PNG plots, each a pure function of plain data (lists and dicts) and a file path.

matplotlib is imported on the first plot, not with this module: it takes about half a second to
import and only a report draws. Figures are drawn on matplotlib's Agg canvas directly (no pyplot,
so no global figure state and no display needed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_DPI = 100
_BEST = "#d62728"


@dataclass(frozen=True)
class Series:
    """One labelled line of a plot."""

    label: str
    x: Sequence[float]
    y: Sequence[float]


def _figure(width: float = 7.0, height: float = 3.6, cols: int = 1, left_in: float = 0.8) -> tuple[Any, Any]:
    """A figure with `cols` axes side by side and fixed margins in inches (a layout engine would
    triple the drawing time: measured 0.11 s vs 0.35 s for the best-score figure)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazily: see the module docstring
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=_DPI)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=left_in / width, right=1 - 0.2 / width, bottom=0.55 / height,
                        top=1 - 0.45 / height, wspace=0.3)
    return fig, fig.subplots(1, cols, squeeze=False)[0]


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="gray")
    ax.set_xticks([])
    ax.set_yticks([])


def best_score_png(path: Path, evaluation: Sequence[int], minutes: Sequence[float],
                   best: Sequence[float], stage: str, maximize: bool) -> Path:
    """The best score so far over evaluations (left) and over the run's wall minutes (right)."""
    fig, (by_eval, by_time) = _figure(cols=2)
    word = "highest" if maximize else "lowest"
    for ax, x, label in ((by_eval, evaluation, "evaluation"), (by_time, minutes, "wall minutes")):
        if best:
            ax.step(x, best, where="post", color=_BEST)
            ax.plot(x, best, ".", color=_BEST, markersize=3)
        else:
            _empty(ax, "no evaluated candidate")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    by_eval.set_ylabel(f"best {stage} score ({word})")
    fig.suptitle("Best score so far")
    return _save(fig, path)


def lines_png(path: Path, title: str, ylabel: str, series: Sequence[Series],
              xlabel: str = "wall minutes") -> Path:
    """Labelled lines on one axis (e.g. items per minute per stage)."""
    fig, (ax,) = _figure()
    for s in series:
        ax.plot(s.x, s.y, label=s.label)
    if series:
        ax.legend(fontsize="small")
    else:
        _empty(ax, "no data")
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def queues_workers_png(path: Path, minutes: Sequence[float], queues: Mapping[str, Sequence[float]],
                       workers: Mapping[str, Sequence[float]], busy: Mapping[str, Sequence[float]]) -> Path:
    """Queue depth per stage (left); busy workers (solid) and workers (dotted) per stage (right),
    one colour per stage."""
    fig, (q_ax, w_ax) = _figure(width=10.0, cols=2)
    fig.subplots_adjust(right=1 - 1.5 / 10.0)  # room for the shared legend
    for i, stage in enumerate(queues):
        color = f"C{i % 10}"
        q_ax.step(minutes, queues[stage], where="post", color=color, label=stage)
        w_ax.step(minutes, busy.get(stage, ()), where="post", color=color)
        w_ax.step(minutes, workers.get(stage, ()), where="post", color=color, linestyle=":", alpha=0.8)
    for ax, title in ((q_ax, "Items waiting per stage"), (w_ax, "Workers: busy (solid), all (dotted)")):
        if not minutes:
            _empty(ax, "no timeline")
        ax.set(title=title, xlabel="wall minutes")
        ax.grid(alpha=0.3)
    if minutes:
        fig.legend(loc="center right", fontsize="small")
    return _save(fig, path)


def failures_png(path: Path, counts: Mapping[str, int]) -> Path:
    """A horizontal bar per failure reason, the most frequent on top."""
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    longest = max((len(k) for k in counts), default=0)
    fig, (ax,) = _figure(width=9.0, height=max(2.4, 1.0 + 0.28 * len(ordered)),
                         left_in=min(5.5, 0.3 + 0.056 * longest))
    if ordered:
        labels, values = [k for k, _ in ordered][::-1], [v for _, v in ordered][::-1]
        bars = ax.barh(labels, values, color="#7f7f7f")
        ax.tick_params(axis="y", labelsize=8)
        ax.bar_label(bars, padding=2, fontsize="small")
        ax.set_xlabel("candidates")
    else:
        _empty(ax, "no failed candidate")
    ax.set_title(f"Why candidates failed ({sum(counts.values())})")
    return _save(fig, path)


def lineage_png(path: Path, points: Mapping[str, tuple[float, float]], edges: Sequence[tuple[str, str]],
                best_path: Sequence[str], ylabel: str) -> Path:
    """Every scored candidate at (evaluation index, score), an edge from parent to child, and the
    best program's ancestry from the seed highlighted."""
    from matplotlib.collections import LineCollection  # lazily, as in _figure

    fig, (ax,) = _figure(width=8.0, height=4.2)
    if not points:
        _empty(ax, "no scored candidate")
        return _save(fig, path)
    segments = [(points[a], points[b]) for a, b in edges if a in points and b in points]
    ax.add_collection(LineCollection(segments, colors="#bbbbbb", linewidths=0.6, zorder=1))
    xs, ys = zip(*points.values(), strict=True)
    ax.scatter(xs, ys, s=9, color="#888888", zorder=2, label="candidate")
    chain = [points[n] for n in reversed(best_path) if n in points]  # seed first
    if chain:
        cx, cy = zip(*chain, strict=True)
        ax.plot(cx, cy, "-o", color=_BEST, markersize=4, linewidth=1.8, zorder=3,
                label=f"best's ancestry ({len(chain)} programs)")
        ax.scatter([cx[-1]], [cy[-1]], marker="*", s=160, color=_BEST, zorder=4, label="best")
    ax.autoscale_view()
    ax.set(title="Lineage of the best program", xlabel="evaluation index", ylabel=ylabel)
    ax.legend(fontsize="small", loc="best")
    ax.grid(alpha=0.3)
    return _save(fig, path)
