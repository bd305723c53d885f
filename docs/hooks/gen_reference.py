"""MkDocs hook: adds the reference pages generated from the code (config keys, CLI) to the site.

Named in mkdocs.yml under ``hooks:``; the pages exist only in the built site, never as files in
docs/, so they cannot fall behind the code. tests/test_docs.py checks what they say.
"""

from __future__ import annotations

from cli_reference import cli_page
from config_reference import config_page
from mkdocs.structure.files import File, Files

GENERATED = {"reference/config.md": config_page, "reference/cli.md": cli_page}


def on_files(files: Files, config) -> Files:
    """Add each generated page to the site's files."""
    for path, page in GENERATED.items():
        files.append(File.generated(config, path, content=page()))
    return files
