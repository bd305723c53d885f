"""`evoforge cognition ingest` and `review`, end to end on documents that ship on this machine
(R's own manuals, which `.ci/run` installs with r-base-core, and shared-mime-info's spec), with
the LLM simulator's deterministic extraction, and once with the real small model."""

from __future__ import annotations

import io
import json
from pathlib import Path

import prefect
import pytest

from evoforge.cognition import CognitionError
from evoforge.cognition.documents import read_documents
from evoforge.cognition.documents.chunks import chunk_budget, pack
from evoforge.cognition.entries import normalise
from evoforge.flows.cli import main
from evoforge.infra.llm_sim.process import SimulatorProcess
from evoforge.infra.llm_sim.server import SimConfig
from tests.real_model import RealModel

PARALLEL_PDF = Path("/usr/lib/R/library/parallel/doc/parallel.pdf")  # r-base-core: 14 pages, no outline
MIME_SPEC_PDF = Path("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf")  # 17 pages, an outline
R_ABOUT_HTML = Path("/usr/share/R/doc/html/about.html")  # r-base-core
PREFECT_MD = Path(prefect.__file__).parent / "server" / "AGENTS.md"  # prefect: a dependency


def _shipped(path: Path) -> Path:
    """The document, failing (never skipping) when this machine lacks it."""
    if not path.is_file():
        pytest.fail(f"{path} is not installed here (r-base-core / shared-mime-info / prefect)")
    return path


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def sim():
    with SimulatorProcess(SimConfig(median_s=0.005, sigma=0.0)) as process:
        yield process


def test_pdf_pages_and_outline_sections_become_located_units():
    spec = read_documents([_shipped(MIME_SPEC_PDF)]).documents[0]
    assert spec.pages == 17
    locators = [unit.locator for unit in spec.units]
    assert "page 2, §1.3. Language used in this specification" in locators
    assert any(loc.endswith("§2.13. Nonregular files") for loc in locators)
    rfc = next(u for u in spec.units if u.locator.endswith("§1.3. Language used in this specification"))
    assert '"MUST", "MUST NOT"' in rfc.text
    parallel = read_documents([_shipped(PARALLEL_PDF)]).documents[0]
    assert parallel.pages == 14 and [u.locator for u in parallel.units][:3] == ["page 1", "page 2", "page 3"]


def test_markdown_html_and_folders_keep_their_sections(tmp_path):
    md = read_documents([_shipped(PREFECT_MD)]).documents[0]
    assert md.units[0].locator == "§ Prefect Server" and len(md.units) >= 3
    assert all(u.locator.startswith("§ Prefect Server > ") for u in md.units[1:])
    html = read_documents([_shipped(R_ABOUT_HTML)]).documents[0]
    about = next(u for u in html.units if u.locator == "§ About")
    assert "free software environment for statistical computing" in " ".join(about.text.split())
    package = _shipped(PARALLEL_PDF).parent.parent  # R's parallel package: its manual, files of other types
    reading = read_documents([package])
    assert [d.path for d in reading.documents] == [PARALLEL_PDF] and len(reading.skipped) >= 10
    grid = read_documents([package.parent / "grid" / "doc"])  # PDFs and .txt notes, read in sorted order
    assert {d.path.suffix for d in grid.documents} == {".pdf", ".txt"} and not grid.skipped
    assert [d.path for d in grid.documents] == sorted(d.path for d in grid.documents)
    with pytest.raises(CognitionError, match="Rlogo.pdf: the PDF has no extractable text"):
        read_documents([R_ABOUT_HTML.parent])  # R's html folder holds a logo as a text-less PDF


def test_chunks_fit_the_window_and_long_units_keep_their_locator():
    units = read_documents([_shipped(PARALLEL_PDF)]).documents[0].units
    budget = chunk_budget(512, 128, str(PARALLEL_PDF))
    chunks = pack(units, budget)
    assert len(chunks) > len(units)  # pages longer than a chunk were split
    flat = [u for chunk in chunks for u in chunk]
    assert [u.locator for u in flat] == sorted((u.locator for u in flat), key=lambda s: int(s.split()[1]))
    for chunk in chunks:
        assert sum(len(u.text) + len(u.locator) + 8 for u in chunk) <= budget * 3 + 3 * len(chunk)
    assert normalise(" ".join(u.text for u in flat)) == normalise(" ".join(u.text for u in units))


def test_ingest_review_search_end_to_end(capsys, tmp_path, sim):
    ws = str(tmp_path / "ws")
    pdf = str(_shipped(PARALLEL_PDF))
    code, out, _ = _run(capsys, "cognition", "ingest", pdf, "--llm-base-url", sim.base_url, "--workspace", ws,
                        "--json")
    report = json.loads(out)
    assert code == 0 and report["pages"] == 14 and report["llm_calls"] == report["chunks"] >= 2
    assert report["model"] == "evoforge-sim" and report["pending_added"] >= 10
    assert report["quote_not_found"] == 0 and report["failures"] == []
    code, out, _ = _run(capsys, "cognition", "review", "--list", "--json", "--workspace", ws)
    pending = json.loads(out)
    assert len(pending) == report["pending_added"]
    text = normalise(" ".join(u.text for u in read_documents([Path(pdf)]).documents[0].units))
    for item in pending:
        assert item["status"] == "pending" and item["locator"].startswith("page ")
        assert normalise(item["quote"]) in text
        assert item["provenance"] == f"ingested from {pdf}, {item['locator']} by evoforge-sim"
    by_page = {item["locator"]: item["id"] for item in pending}
    cores, affinity, snow = by_page["page 3"], by_page["page 7"], by_page["page 4"]
    windows = by_page["page 9"]

    code, out, _ = _run(capsys, "cognition", "search", "parallel", "--workspace", ws, "--min-score", "-1")
    assert code == 0 and out.startswith("no item")  # pending items are never retrieved
    code, out, _ = _run(capsys, "cognition", "review", "--accept", cores, affinity, snow, "--reject", windows,
                        "--workspace", ws)
    assert code == 0 and out.startswith("accepted 3, rejected 1;")
    for query, wanted in [("how many processors the computer has for parallel jobs", cores),
                          ("pin each task of mclapply to a chosen processor", affinity),
                          ("a bundled copy of the snow package for clusters", snow)]:
        code, out, _ = _run(capsys, "cognition", "search", query, "--k", "10", "--min-score", "-1", "--json",
                            "--workspace", ws)
        hits = json.loads(out)
        assert code == 0 and hits[0]["id"] == wanted, (query, [h["title"] for h in hits])
        assert {h["id"] for h in hits} == {cores, affinity, snow}  # never a pending or rejected one

    code, out, _ = _run(capsys, "cognition", "ingest", pdf, "--llm-base-url", sim.base_url, "--workspace", ws,
                        "--json")
    again = json.loads(out)
    assert again["pending_added"] == 0 and again["duplicates"] == report["pending_added"]  # rejected too


def test_review_from_file_accept_all_and_unknown_ids(capsys, tmp_path, sim):
    ws = str(tmp_path / "ws")
    _run(capsys, "cognition", "ingest", str(_shipped(PARALLEL_PDF)), "--llm-base-url", sim.base_url,
         "--workspace", ws)
    code, out, _ = _run(capsys, "cognition", "review", "--list", "--json", "--workspace", ws)
    ids = [item["id"] for item in json.loads(out)]
    decisions = tmp_path / "decisions.txt"
    decisions.write_text(f"# first pass\naccept {ids[0]}\nreject {ids[1]}  # off topic\n\n")
    code, out, _ = _run(capsys, "cognition", "review", "--from", str(decisions), "--workspace", ws)
    assert code == 0 and out.startswith(f"accepted 1, rejected 1; {len(ids) - 2} pending left")
    code, out, err = _run(capsys, "cognition", "review", "--accept", ids[1], "--workspace", ws)
    assert code == 2 and f"'{ids[1]}'" in err and "rejected" in err and len(err.strip().splitlines()) == 1
    code, out, err = _run(capsys, "cognition", "review", "--reject", "feedfeedfeedfeed", "--workspace", ws)
    assert code == 2 and "no such item" in err and "Traceback" not in err
    code, out, _ = _run(capsys, "cognition", "review", "--accept-all", "--workspace", ws)
    assert code == 0 and out.startswith(f"accepted {len(ids) - 2}, rejected 0; 0 pending left")


def test_interactive_review_accepts_edits_rejects_and_quits(capsys, tmp_path, sim, monkeypatch):
    ws = str(tmp_path / "ws")
    _run(capsys, "cognition", "ingest", str(_shipped(MIME_SPEC_PDF)), "--llm-base-url", sim.base_url,
         "--workspace", ws)
    code, out, _ = _run(capsys, "cognition", "review", "--list", "--json", "--workspace", ws)
    first, second, third, fourth = json.loads(out)[:4]
    monkeypatch.setattr("sys.stdin", io.StringIO("a\ne\nWhat the spec covers\n\nr\nq\n"))
    code, out, _ = _run(capsys, "cognition", "review", "--workspace", ws)
    assert code == 0 and first["title"] in out and "accepted 2 (1 edited), rejected 1, skipped 0" in out
    code, out, _ = _run(capsys, "cognition", "list", "--json", "--workspace", ws)
    stored = {item["id"]: item for item in json.loads(out)}
    assert stored[first["id"]]["status"] == "accepted"
    assert stored[second["id"]]["status"] == "accepted"
    assert stored[second["id"]]["title"] == "What the spec covers"
    assert stored[second["id"]]["text"] == second["text"]  # Enter kept the text
    assert stored[third["id"]]["status"] == "rejected" and stored[fourth["id"]]["status"] == "pending"


def test_no_llm_and_unreadable_files_are_one_line_exit_2(capsys, tmp_path, monkeypatch, sim):
    for var in ("EVOFORGE_LLM_BASE_URL", "EVOFORGE_LLM_MODEL"):
        monkeypatch.delenv(var, raising=False)
    ws = str(tmp_path / "ws")
    code, out, err = _run(capsys, "cognition", "ingest", str(_shipped(PARALLEL_PDF)), "--workspace", ws)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "cognition ingest needs an LLM: set llm.base_url (or --llm-base-url)" in err
    corrupt = tmp_path / "cut.pdf"
    corrupt.write_bytes(_shipped(PARALLEL_PDF).read_bytes()[:3000])  # a real PDF, cut short
    empty = tmp_path / "empty.md"
    empty.write_text("\n\n")
    for bad in (corrupt, empty, tmp_path / "missing.pdf"):
        code, out, err = _run(capsys, "cognition", "ingest", str(bad), "--llm-base-url", sim.base_url,
                              "--workspace", ws)
        assert code == 2 and str(bad) in err and len(err.strip().splitlines()) == 1, err
        assert "Traceback" not in err


def test_real_model_lands_only_quotes_found_in_the_source(capsys, tmp_path, real_model: RealModel):
    ws = str(tmp_path / "ws")
    doc = str(_shipped(PREFECT_MD))
    code, out, _ = _run(capsys, "cognition", "ingest", doc, "--llm-base-url", real_model.base_url,
                        "--llm-model", real_model.model, "--context-window", "2048", "--json",
                        "--workspace", ws)
    report = json.loads(out)
    assert code == 0 and report["llm_calls"] == report["chunks"] >= 1
    kept = report["proposed"] - report["incomplete"] - report["quote_not_found"]
    assert kept == report["pending_added"] + report["duplicates"]
    code, out, _ = _run(capsys, "cognition", "review", "--list", "--json", "--workspace", ws)
    text = normalise(Path(doc).read_text())
    items = json.loads(out)
    assert len(items) == report["pending_added"]
    for item in items:
        assert normalise(item["quote"]).strip(" .…") in text
        assert item["provenance"].endswith(f"by {real_model.model}")


def test_only_items_quoting_four_words_or_more_of_the_chunk_are_kept():
    import asyncio

    from evoforge.cognition.documents import Unit
    from evoforge.cognition.extraction import Tally, extract_chunk
    from tests.scripted_llm import Scripted

    chunk = [Unit("page 1", "Sort the items by size. Put each item where it leaves the least room."),
             Unit("page 2", "Close the bin when nothing else fits in it.")]
    answer = ('1. Title: Best fit\nIdea: least room\nApplies: packing\nQuote: "put each item where it '
              'leaves  the least room"\nWhere: page 9\n\n'
              '2. Title: Short\nIdea: a word\nApplies: always\nQuote: "the items"\nWhere: page 1\n\n'
              '3. Title: Made up\nIdea: invented\nApplies: never\nQuote: "Open a new bin for every item"\n'
              'Where: page 2\n')
    tally = Tally()
    asyncio.run(extract_chunk(Scripted(answer), "doc.pdf", chunk, 1, tally, temperature=0.0, max_tokens=100))
    assert (tally.proposed, tally.incomplete, tally.quote_not_found) == (3, 1, 1)
    assert [(c.proposal.title, c.locator) for c in tally.checked] == [("Best fit", "page 1")]
