"""`evoforge cognition add|search|list|remove|ingest|review`: manage the workspace's cognition base."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from evoforge.flows.cognition_ingest_cli import add_ingest_parsers, run_ingest


def add_cognition_parser(subparsers: Any) -> None:
    """Add the `cognition` command and its subcommands to the CLI."""
    cognition = subparsers.add_parser("cognition", help="the cognition base of prior knowledge")
    which = cognition.add_subparsers(dest="cognition", required=True)

    def common(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        parser.add_argument("--workspace", help="the base is WORKSPACE/cognition (default evoforge-runs)")
        parser.add_argument("--config", type=Path, help="YAML config file (its cognition section)")
        return parser

    add = common(which.add_parser("add", help="add seed items from a .md or .jsonl file or a folder"))
    add.add_argument("path", type=Path)
    add.add_argument("--task", help="the task the items belong to (default: useful for every task)")
    search = common(which.add_parser("search", help="the items nearest in meaning to a query"))
    search.add_argument("query", nargs="+", help="a phrase (quoted or not)")
    search.add_argument("--k", type=int, help="how many items (default cognition.top_k)")
    search.add_argument("--task", help="only this task's items and task-less ones")
    search.add_argument("--min-score", type=float,
                        help="lowest similarity (default cognition.min_similarity)")
    search.add_argument("--json", action="store_true")
    listing = common(which.add_parser("list", help="every item, oldest first"))
    listing.add_argument("--task", help="only this task's items and task-less ones")
    listing.add_argument("--status", choices=("pending", "accepted", "rejected"),
                         help="only items of this review status")
    listing.add_argument("--json", action="store_true")
    show = common(which.add_parser("show", help="one item in full, and the runs and people it came from"))
    show.add_argument("id")
    show.add_argument("--json", action="store_true")
    remove = common(which.add_parser("remove", help="delete an item by id"))
    remove.add_argument("id")
    add_ingest_parsers(which, common)


def show_item(item: Any, origins: list[str]) -> str:
    """An item in full: its fields, then each run, task and person it came from."""
    claim = f"; claim {item.verdict}" if item.verdict else ""
    where = f", {item.locator}" if item.locator else ""
    lines = [f"{item.id}  {item.title}", f"status: {item.status}{claim}", f"task: {item.task or 'any task'}",
             f"source: {item.source}{where}", "", item.text]
    if item.quote:
        lines += ["", f"quote: \"{item.quote}\""]
    lines += ["", "came from:", *(f"  - {origin}" for origin in origins or [item.provenance])]
    return "\n".join(lines)


def _line(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[:width - 1] + "…"


def run_cognition(ns: argparse.Namespace) -> int:
    """Run the cognition subcommand the arguments name; returns the exit code."""
    if ns.cognition == "ingest":
        return run_ingest(ns)
    if ns.cognition == "review":
        from evoforge.flows.cognition_review_cli import run_review  # loads the cognition base's modules

        return run_review(ns)
    # loaded here, not at the top: LanceDB is not needed to build the CLI's parser
    from evoforge.cognition import CognitionError, open_base, read_seeds
    from evoforge.cognition.workspace import person_of
    from evoforge.infra.config_load import load_config

    cfg = load_config(ns.config, {"workspace": ns.workspace})
    base = open_base(cfg.cognition, cfg.workspace)
    if ns.cognition == "add":
        person = person_of(cfg.cognition)
        items = [replace(item, person=person) for item in read_seeds(ns.path, task=ns.task)]
        added = base.add(items)
        print(f"added {len(added)} item(s) to {base.folder}; {len(items) - len(added)} already present")
    elif ns.cognition == "search":
        k = cfg.cognition.top_k if ns.k is None else ns.k
        if k < 1:
            raise CognitionError("--k must be at least 1")
        min_score = cfg.cognition.min_similarity if ns.min_score is None else ns.min_score
        hits = base.search(" ".join(ns.query), k=k, task=ns.task, min_score=min_score)
        if ns.json:
            print(json.dumps([asdict(item) | {"score": round(score, 4)} for item, score in hits], indent=2))
        elif not hits:
            print(f"no item at similarity >= {min_score} in {base.folder}")
        else:
            for item, score in hits:
                print(f"{score:.3f}  {item.id}  {item.title}  [{item.task or 'any task'}]")
                print(f"       {_line(item.text)}")
    elif ns.cognition == "list":
        items = base.list(task=ns.task, status=ns.status)
        if ns.json:
            print(json.dumps([asdict(item) for item in items], indent=2))
        elif not items:
            print(f"no items in {base.folder}")
        else:
            for item in items:
                trust = f", {item.verdict}" if item.verdict else ""
                print(f"{item.id}  [{item.task or 'any task'}]  {item.status}{trust}  {item.title}  "
                      f"({item.provenance})")
    elif ns.cognition == "show":
        found = base.get(ns.id)
        if found is None:
            raise CognitionError(f"no cognition item with id '{ns.id}' in {base.folder}")
        origins = base.origins_of(found.id)
        if ns.json:
            print(json.dumps(asdict(found) | {"origins": [asdict(o) for o in origins]}, indent=2))
        else:
            print(show_item(found, [o.describe() for o in origins]))
    else:
        if not base.remove(ns.id):
            raise CognitionError(f"no cognition item with id '{ns.id}' in {base.folder}")
        print(f"removed {ns.id}")
    return 0
