"""Cognition base benchmark, per embedder: retrieval latency at 1k and 10k items, embedding time
and throughput, and top-1 accuracy on paraphrase pairs that share no content word.

    python bench/cognition_bench.py [--embedders onnx minilm] [--sizes 1000 10000] [--queries 200]
                                    [--json bench/out/cognition.json]

Embedders: ``onnx`` (the default: all-MiniLM-L6-v2 int8 on onnxruntime, no torch) and ``minilm``
(the same model on torch, the ``embed`` extra). Retrieval is timed twice: LanceDB alone
(``search_vector``: the query already embedded) and end to end (``search``: the embedder embeds the
query, then LanceDB). Distractor items are synthetic sentences from templates; the paraphrase
targets are added on top of them, so top-1 accuracy is measured both among the pairs alone and
among 10k distractors plus the built-in tasks' seed items. With both embedders, their agreement
(cosine of the two vectors of each distractor text) is reported too.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import re
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from evoforge.cognition import (
    CognitionBase,
    CognitionItem,
    LexicalEmbedder,
    MiniLMEmbedder,
    OnnxEmbedder,
    task_seeds,
)
from evoforge.cognition.embedder import Embedder
from evoforge.evaluators.task import builtin_tasks_dir

EMBEDDERS = {"onnx": OnnxEmbedder, "minilm": MiniLMEmbedder}

# (stored text, query): no content word in common, only the meaning
PAIRS = [
    ("Start from a honeycomb lattice arrangement", "place the discs on a hexagonal grid"),
    ("Solve a linear program for the radii once the centres are fixed",
     "with positions frozen, an LP yields optimal circle sizes"),
    ("Tiny circles belong in the corners of the square", "put little discs into each nook"),
    ("Restart the optimiser many times from random initial layouts",
     "run several independent attempts with different seeds, keep the winner"),
    ("Penalise any bin left with a sliver too small to hold anything",
     "punish placements whose leftover gap is useless"),
    ("Prefer the bin that the item fills most tightly",
     "choose the container where the object leaves least slack"),
    ("Lower the learning rate when the validation loss stops improving",
     "reduce the step size once held-out error plateaus"),
    ("Cache expensive function results to avoid recomputation",
     "memoise costly calls so work is not repeated"),
    ("Vectorise loops with numpy array operations", "replace python iteration by whole-matrix arithmetic"),
    ("Add dropout to reduce overfitting",
     "randomly silence neurons during training so the network generalises"),
    ("Mirror symmetry halves the number of free variables",
     "a reflected layout needs only half the unknowns"),
    ("Shrink every radius slightly so rounding cannot create overlaps",
     "reduce each size by a hair to stay valid despite floating point error"),
    ("Jitter a few centres and re-run local descent", "nudge some positions randomly, then polish again"),
    ("Stop early when the time budget is nearly used up", "quit before the deadline expires"),
    ("Normalise the input features to zero mean and unit variance",
     "standardise each column by subtracting its average and dividing by its spread"),
    ("Use gradient information supplied analytically for faster convergence",
     "exact derivatives help the solver finish sooner"),
    ("Return a perfect fit bonus when nothing remains in the bin", "reward closing a container completely"),
    ("Large circles should sit in the middle", "big discs go toward the centre"),
    ("Seed the random generator for reproducible results",
     "fix the rng state so reruns give identical output"),
    ("Batch several requests together to raise throughput",
     "group calls into one bundle so more work completes per second"),
    ("Record every failed candidate with the reason it failed",
     "log each rejected attempt alongside why it broke"),
    ("Swap a small and a large circle to escape a local optimum",
     "exchange a tiny disc with a big one to leave a poor basin"),
    ("Check that the returned array has the same shape as the input",
     "verify the output's dimensions match what came in"),
    ("Prune unpromising candidates before the full evaluation",
     "discard weak proposals ahead of the expensive test"),
]
STOP = {"the", "a", "an", "of", "on", "for", "to", "from", "with", "any", "that", "in", "into", "each",
        "once", "are", "is", "and", "so", "by", "its", "as", "has", "when", "before", "one", "more", "what",
        "why", "then", "not", "some", "few", "every", "all", "be", "can", "should", "only", "up", "s",
        "whose", "where", "most", "least", "many", "times", "keep", "it", "same", "out", "go", "give",
        "yields", "help"}

_VERBS = ["tune", "measure", "cache", "sort", "merge", "split", "profile", "log", "retry", "validate",
          "compress", "index", "schedule", "sample", "rank", "filter", "encode", "shard", "trace", "monitor"]
_OBJECTS = ["the database writes", "each HTTP request", "the model checkpoints", "the worker queue",
            "every user session", "the feature store", "the training batches", "incoming events",
            "the search results", "cached thumbnails", "the audit trail", "nightly reports",
            "the GPU kernels",
            "config files", "the leaderboard", "API tokens", "shipping labels", "sensor readings",
            "invoice totals", "the build artefacts", "email digests", "video frames", "the web crawler",
            "order histories", "payment retries"]
_HOWS = ["after every deploy", "with a bounded buffer", "in small batches", "by customer region",
         "once an hour", "behind a feature flag", "with exponential backoff", "in a background thread",
         "per tenant", "before the nightly job", "using a bloom filter", "with a write-ahead log",
         "in reverse order", "under a read lock", "across three replicas", "with checksums",
         "at the edge", "only on weekdays", "through a message bus", "with a sliding window",
         "in a sandbox", "during low traffic", "from a snapshot", "by priority", "with a dry run"]


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", text.lower()) if w not in STOP}


def distractors(count: int, seed: int = 0) -> list[str]:
    """``count`` distinct synthetic sentences about software chores."""
    combos = [f"{v.capitalize()} {o} {h}." for v in _VERBS for o in _OBJECTS for h in _HOWS]
    return random.Random(seed).sample(combos, count)


class Precomputed(Embedder):
    """The real embedder's vectors, computed once: the bench times retrieval, not re-embedding."""

    def __init__(self, inner: Embedder, texts: list[str]) -> None:
        self.inner = inner
        self.name = inner.name
        self._known = dict(zip(texts, inner.embed(texts), strict=True)) if texts else {}

    @property
    def dim(self) -> int:
        """The inner embedder's dimension."""
        return self.inner.dim

    def embed(self, texts: list[str]) -> np.ndarray:
        """Known vectors from the table, the rest from the inner embedder."""
        missing = [t for t in texts if t not in self._known]
        if missing:
            self._known.update(zip(missing, self.inner.embed(missing), strict=True))
        return np.stack([self._known[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)


def _ms(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1e3, ordered[int(0.95 * (len(ordered) - 1))] * 1e3


def _items(texts: list[str], task: str | None = None) -> list[CognitionItem]:
    return [CognitionItem.create("", text, task=task, provenance="bench", created_at=0.0) for text in texts]


def time_retrieval(base: CognitionBase, model: Embedder, queries: list[str], repeat: int) -> dict[str, float]:
    """p50/p95 of search_vector (LanceDB) and search (embed + LanceDB), with and without a task filter."""
    vectors = model.embed(queries)
    live = CognitionBase(base.folder, model)  # the plain model: every search embeds its query
    out: dict[str, float] = {}
    picks = [random.Random(i).randrange(len(queries)) for i in range(repeat)]
    for label, task in (("", None), ("task_", "circle_packing")):
        lance, full = [], []
        for i in picks:
            start = time.perf_counter()
            base.search_vector(vectors[i], k=5, task=task)
            lance.append(time.perf_counter() - start)
            start = time.perf_counter()
            live.search(queries[i], k=5, task=task)
            full.append(time.perf_counter() - start)
        out[f"{label}lance_p50_ms"], out[f"{label}lance_p95_ms"] = _ms(lance)
        out[f"{label}e2e_p50_ms"], out[f"{label}e2e_p95_ms"] = _ms(full)
    return out


def accuracy(base: CognitionBase) -> float:
    """Share of paraphrase queries whose top hit is their pair."""
    right = 0
    for text, query in PAIRS:
        hits = base.search(query, k=1)
        right += bool(hits) and hits[0][0].text == text
    return right / len(PAIRS)


def measure(model: Embedder, texts: list[str], sizes: list[int], repeat: int, root: Path) -> dict:
    """One embedder's figures: load, ~50-text and bulk embedding time, one query, retrieval, top-1."""
    start = time.perf_counter()
    model.embed(["load"])
    load_s = time.perf_counter() - start
    fifty = [t for t, _ in PAIRS] + [q for _, q in PAIRS]
    start = time.perf_counter()
    model.embed([t + "." for t in fifty])  # unseen texts: no cache hit
    fifty_s = time.perf_counter() - start
    start = time.perf_counter()
    embedder = Precomputed(model, texts)
    throughput = len(texts) / (time.perf_counter() - start)
    singles = []
    for repeat_no in range(1, 5):
        for _, query in PAIRS:
            start = time.perf_counter()
            model.embed([query + "?" * repeat_no])  # a text never embedded before: no cache hit
            singles.append(time.perf_counter() - start)
    seeds = (task_seeds(builtin_tasks_dir() / "circle_packing", "circle_packing")
             + task_seeds(builtin_tasks_dir() / "bin_packing", "bin_packing"))
    queries = [q for _, q in PAIRS]
    figures: dict = {"name": model.name, "model_load_s": load_s, "embed_48_texts_s": fifty_s,
                     "embed_items_per_s": throughput, "embed_one_query_p50_ms": _ms(singles)[0],
                     "sizes": {}, "vectors": embedder.embed(texts)}
    for size in sizes:
        base = CognitionBase(root / f"n{size}", embedder)
        start = time.perf_counter()
        for chunk in range(0, size, 1000):
            base.add(_items(texts[chunk:min(size, chunk + 1000)]))
        build_s = time.perf_counter() - start
        base.add(seeds + _items([t for t, _ in PAIRS]))
        row = {"items": base.count(), "build_s": build_s, **time_retrieval(base, model, queries, repeat)}
        row["top1_with_distractors"] = accuracy(base)
        figures["sizes"][size] = row
    pairs_only = CognitionBase(root / "pairs", model)
    pairs_only.add(_items([t for t, _ in PAIRS]))
    figures["top1_pairs_only"] = accuracy(pairs_only)
    return figures


def report(label: str, figures: dict, count: int) -> None:
    """Print one embedder's figures as a paragraph and a table."""
    print(f"\n{label} ({figures['name']}): load {figures['model_load_s']:.2f} s; 48 short texts "
          f"{figures['embed_48_texts_s'] * 1e3:.0f} ms; embedding {figures['embed_items_per_s']:.0f} items/s "
          f"({count} short texts); one query {figures['embed_one_query_p50_ms']:.1f} ms p50; "
          f"top-1 among the 24 pair texts only {figures['top1_pairs_only']:.0%}\n")
    print("| items | search p50 / p95 (LanceDB) | + task filter | search p50 / p95 (embed + LanceDB) "
          "| + task filter | top-1 (of 24 pairs, among all items) |")
    print("|---|---|---|---|---|---|")
    for row in figures["sizes"].values():
        print(f"| {row['items']} | {row['lance_p50_ms']:.1f} / {row['lance_p95_ms']:.1f} ms "
              f"| {row['task_lance_p50_ms']:.1f} / {row['task_lance_p95_ms']:.1f} ms "
              f"| {row['e2e_p50_ms']:.1f} / {row['e2e_p95_ms']:.1f} ms "
              f"| {row['task_e2e_p50_ms']:.1f} / {row['task_e2e_p95_ms']:.1f} ms "
              f"| {row['top1_with_distractors']:.0%} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedders", nargs="+", choices=sorted(EMBEDDERS), default=["onnx", "minilm"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--queries", type=int, default=200, help="timed searches per setting")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    shared = [(t, q) for t, q in PAIRS if _words(t) & _words(q)]
    if shared:
        raise SystemExit(f"paraphrase pairs share words: {[(_words(t) & _words(q)) for t, q in shared]}")

    texts = distractors(max(args.sizes))
    figures: dict = {"embedders": {}}
    with tempfile.TemporaryDirectory() as root:
        for label in args.embedders:
            figures["embedders"][label] = measure(EMBEDDERS[label](), texts, args.sizes, args.queries,
                                                  Path(root) / label)
        logging.getLogger("evoforge.cognition").setLevel(logging.ERROR)  # its warning, once per search
        lexical = CognitionBase(Path(root) / "lexical", LexicalEmbedder())
        lexical.add(_items([t for t, _ in PAIRS]))
        figures["top1_pairs_only_lexical"] = accuracy(lexical)
    vectors = [figures["embedders"][label].pop("vectors") for label in args.embedders]
    if len(vectors) == 2:
        cosines = (vectors[0] * vectors[1]).sum(axis=1)
        figures["agreement"] = {"texts": len(texts), "min_cosine": float(cosines.min()),
                                "mean_cosine": float(cosines.mean())}

    for label in args.embedders:
        report(label, figures["embedders"][label], len(texts))
    print(f"\nlexical fallback: top-1 among the 24 pair texts only {figures['top1_pairs_only_lexical']:.0%}")
    if "agreement" in figures:
        agreement = figures["agreement"]
        print(f"{' vs '.join(args.embedders)}: cosine of the two vectors of each of "
              f"{agreement['texts']} texts "
              f"min {agreement['min_cosine']:.4f}, mean {agreement['mean_cosine']:.4f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
