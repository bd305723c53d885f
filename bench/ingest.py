"""Ingestion of a real document: pages read, units, chunks, items extracted, accepted, and how many
hand-written paraphrases of accepted items' ideas find the right item first.

    python bench/ingest.py [--pdf PATH] [--json bench/out/ingest.json]
    python bench/ingest.py --base-url URL --model NAME [--context-window 8192]   # a real model

Without --base-url the LLM simulator extracts (its deterministic mode: one item per unit, quoting
the unit's first long sentence); every item is then accepted, as a reviewer accepting all would,
and each paraphrase below is searched (k=1) in the default embedder's base. The paraphrases were
written by hand for shared-mime-info's spec (the default PDF), each naming the section its item
comes from; they reuse few of the item's words. With a real model the items differ, so only the
extraction counts are meaningful (paraphrase hits are reported, but not comparable).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from evoforge.cognition.documents import read_documents
from evoforge.cognition.entries import ACCEPTED, PENDING
from evoforge.cognition.ingest import Extraction, ingest
from evoforge.cognition.workspace import open_base
from evoforge.infra.config import CognitionConfig
from evoforge.infra.llm.openai_backend import OpenAIBackend
from evoforge.infra.llm_sim.process import SimulatorProcess
from evoforge.infra.llm_sim.server import SimConfig

SPEC = Path("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf")
PARAPHRASES = [  # (query, the section of the item it should find first)
    ("which revision of the standard is this and when was it last changed", "§1.1. Version"),
    ("applications label the kind of each file with a media type", "§1.2. What is this spec?"),
    ("how to read capitalised requirement words such as must and should",
     "§1.3. Language used in this specification"),
    ("every program ships exactly one description file into the packages folder",
     "§2.2. The source XML files"),
    ("a list with a weight, a type and a filename pattern on each line", "§2.4. The glob files"),
    ("content sniffing rules are kept in a binary layout that is quick to read", "§2.5. The magic files"),
    ("take the file's type from an extended attribute set by the user",
     "§2.10. Storing the MIME type using Extended Attributes"),
    ("one type inherits from another when all its files also belong to the other", "§2.11. Subclassing"),
    ("a mounted volume's root counts as a kind of directory", "§2.13. Nonregular files"),
    ("two programs may still disagree about what a file is", "§2.16. Security implications"),
    ("personal choices of users do not belong in this database", "§2.17. User modification"),
]


async def _ingest(pdf: Path, base_url: str, model: str | None, window: int, folder: str) -> dict:
    reading = read_documents([pdf])
    base = open_base(CognitionConfig(), Path(folder))
    llm = OpenAIBackend(base_url=base_url, model=model, timeout_s=600, max_retries=1)
    started = time.perf_counter()
    try:
        served = await llm.check()
        window = window or llm.context_window or 4096
        how = Extraction(window, max(256, window // 4), 0.2)
        report = await ingest(reading, llm, base, how, task=None, person="bench", max_similarity=0.9)
    finally:
        await llm.close()
    seconds = time.perf_counter() - started
    for item in base.list(status=PENDING):
        base.set_status(item.id, ACCEPTED)
    accepted = base.list(status=ACCEPTED)
    first, missed = 0, []
    for query, section in PARAPHRASES:
        hits = base.search(query, k=1)
        if hits and hits[0][0].locator.endswith(section):
            first += 1
        else:
            missed.append(f"{query!r} -> {hits[0][0].locator if hits else 'nothing'}")
    return {"model": served, "pages": report.pages, "units": report.units, "chunks": report.chunks,
            "llm_calls": report.llm_calls, "proposed": report.proposed,
            "quote_not_found": report.quote_not_found,
            "incomplete": report.incomplete, "malformed_answers": report.malformed_answers,
            "failures": report.failures,
            "duplicates": report.duplicates, "extracted": report.pending_added, "accepted": len(accepted),
            "paraphrases_first": f"{first}/{len(PARAPHRASES)}", "missed": missed,
            "ingest_seconds": round(seconds, 2)}


def main() -> None:
    """Run the benchmark once and print (and optionally write) its figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pdf", type=Path, default=SPEC)
    parser.add_argument("--base-url", help="a real OpenAI-compatible server (default: the simulator)")
    parser.add_argument("--model")
    parser.add_argument("--context-window", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        if args.base_url:
            figures = asyncio.run(_ingest(args.pdf, args.base_url, args.model, args.context_window, folder))
        else:
            with SimulatorProcess(SimConfig(median_s=0.005, sigma=0.0)) as sim:
                figures = asyncio.run(_ingest(args.pdf, sim.base_url, None, args.context_window, folder))
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
