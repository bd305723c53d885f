"""`evoforge cognition ingest PATH...`: documents to pending cognition items, by an LLM; and the
parsers of `ingest` and `review` (review runs in cognition_review_cli.py)."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

NEEDS_LLM = ("cognition ingest needs an LLM: set llm.base_url (or --llm-base-url) and llm.model "
             "(or --llm-model), or llm.endpoints, in the config")
INGEST_FLAGS = {"workspace": "--workspace", "llm.base_url": "--llm-base-url", "llm.model": "--llm-model"}

Common = Callable[[argparse.ArgumentParser], argparse.ArgumentParser]


def add_ingest_parsers(which: Any, common: Common) -> None:
    """Add `cognition ingest` and `cognition review` to the cognition subcommands."""
    ingest = common(which.add_parser("ingest", help="extract pending items from PDF, markdown, HTML or "
                                                    "text documents (or folders of them) with an LLM"))
    ingest.add_argument("paths", nargs="+", type=Path)
    ingest.add_argument("--task", help="the task the items belong to (default: useful for every task)")
    ingest.add_argument("--llm-base-url", help="OpenAI-compatible server URL (default llm.base_url)")
    ingest.add_argument("--llm-model", help="model name (default: the server's first model)")
    ingest.add_argument("--context-window", type=int,
                        help="the extraction model's context window in tokens (default: the config's, "
                             "else the server's, else 4096)")
    ingest.add_argument("--json", action="store_true", help="the report as JSON")
    review = common(which.add_parser("review", help="accept, edit or reject pending items (interactive "
                                                    "without flags)"))
    review.add_argument("--accept", nargs="+", metavar="ID", default=[], help="accept these pending items")
    review.add_argument("--reject", nargs="+", metavar="ID", default=[], help="reject these pending items")
    review.add_argument("--accept-all", action="store_true", help="accept every pending item")
    review.add_argument("--from", dest="from_file", type=Path, metavar="FILE",
                        help="lines 'accept ID' or 'reject ID' ('#' starts a comment)")
    review.add_argument("--list", action="store_true", help="list the pending items")
    review.add_argument("--task", help="only this task's items and task-less ones")
    review.add_argument("--json", action="store_true", help="with --list: as JSON")


def _print_report(report: Any, model: str) -> None:
    print(f"read {report.files} file(s) ({report.skipped} skipped), {report.pages} page(s), "
          f"{report.units} unit(s); {report.chunks} chunk(s) for a {report.window}-token window; "
          f"{report.llm_calls} LLM call(s) to {model}")
    print(f"items proposed {report.proposed}; quote not found {report.quote_not_found}; incomplete "
          f"{report.incomplete}; malformed answers {report.malformed_answers}; duplicates "
          f"{report.duplicates}; pending added {report.pending_added}")
    for failure in report.failures:
        print(f"  failed: {failure}")
    if report.pending_added:
        print("review them with: evoforge cognition review")


def run_ingest(ns: argparse.Namespace) -> int:
    """Run `cognition ingest`; returns the exit code."""
    from evoforge.cognition import CognitionError, open_base
    from evoforge.cognition.documents import read_documents
    from evoforge.infra.config_load import load_config

    overrides = {"workspace": ns.workspace, "llm.base_url": ns.llm_base_url, "llm.model": ns.llm_model}
    cfg = load_config(ns.config, overrides, origins=INGEST_FLAGS)
    if not (cfg.llm.base_url or cfg.llm.endpoints):
        raise CognitionError(NEEDS_LLM)
    if ns.context_window is not None and ns.context_window < 128:
        raise CognitionError("--context-window must be at least 128 tokens")
    reading = read_documents(ns.paths)
    base = open_base(cfg.cognition, cfg.workspace)
    report, model = asyncio.run(_ingest(cfg, reading, base, ns))
    if ns.json:
        print(json.dumps(report.as_dict() | {"model": model}, indent=2))
    else:
        _print_report(report, model)
    return 0


async def _ingest(cfg: Any, reading: Any, base: Any, ns: argparse.Namespace) -> tuple[Any, str]:
    from evoforge.cognition.documents.chunks import DEFAULT_WINDOW
    from evoforge.cognition.ingest import Extraction, ingest
    from evoforge.infra.llm.factory import make_backend

    llm = make_backend(cfg.llm, cfg.seed)
    try:
        model = await llm.check()
        window = ns.context_window or llm.context_window or DEFAULT_WINDOW
        # the answer's room: llm.max_tokens, at most a quarter of the window (the rest holds source text)
        answer = min(cfg.llm.max_tokens, max(256, window // 4))
        how = Extraction(window, answer, min(cfg.llm.temperature, 0.2))
        report = await ingest(reading, llm, base, how, task=ns.task, person=getpass.getuser(),
                              max_similarity=cfg.cognition.dedupe_similarity)
    finally:
        await llm.close()
    return report, model
