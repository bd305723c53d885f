"""The documentation is part of the product: every code block of README.md and docs/ is checked
against the real code (commands parse, configs load, task files load, Python compiles and runs),
and the generated reference pages say what the code says."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from evoforge.evaluators.task import load_task
from evoforge.evaluators.task_yaml import TaskError, read_task_yaml
from evoforge.flows.cli import build_parser
from evoforge.infra.config import RunConfig
from evoforge.infra.config_load import load_config

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
sys.path.insert(0, str(DOCS / "hooks"))  # the generators of the reference pages (mkdocs.yml's hook)

from cli_reference import cli_page, subcommands  # noqa: E402
from config_notes import NOTES  # noqa: E402
from config_reference import config_page, field_comments, keys  # noqa: E402
from gen_reference import GENERATED  # noqa: E402

SNIPPET = re.compile(r'^--8<-- "(.+)"$', re.M)  # pymdownx.snippets: a file of the repo, included
FENCE = re.compile(r"^(\s*)```(\w*)(.*)$")
COMMAND_LANGS = ("bash", "sh", "shell")
OUTPUT_LANGS = ("", "text")  # shown, not run: output, trees, sample files
CHECKED_LANGS = (*COMMAND_LANGS, "yaml", "python", "json", "toml")

# Python blocks compiled but not run here, each with why (a stale entry fails the test below).
NOT_RUN = {
    "import mlflow": "reads a finished run's MLflow store",
    "from dask_jobqueue import SLURMCluster": "needs a SLURM cluster (a recipe, not run here)",
    "from dask_kubernetes.operator import KubeCluster": "needs a Kubernetes cluster (a recipe, not run here)",
}


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str
    line: int
    lang: str
    title: str
    body: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line} ({self.lang or 'no language'})"


def pages() -> dict[str, str]:
    """Every page the docs show: README, docs/**/*.md with snippets included, the generated ones."""
    out = {"README.md": (REPO / "README.md").read_text()}
    for path in sorted(DOCS.rglob("*.md")):
        text = SNIPPET.sub(lambda m: (REPO / m.group(1)).read_text(), path.read_text())
        out[path.relative_to(REPO).as_posix()] = text
    for name, page in GENERATED.items():
        out[f"docs/{name} (generated)"] = page()
    return out


def blocks_of(page: str, text: str) -> list[Block]:
    """The fenced blocks of one page, indented ones (in list items) included."""
    out, open_at, body = [], None, []
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if open_at is None and match:
            indent, lang, rest = match.groups()
            title = re.search(r'title="([^"]*)"', rest)
            open_at = (number, indent, lang, title.group(1) if title else "")
            body = []
        elif open_at is not None and line.strip() == "```":
            number_open, indent, lang, title = open_at
            text_body = "\n".join(b[len(indent):] if b.startswith(indent) else b for b in body)
            out.append(Block(page, number_open, lang, title, text_body + "\n"))
            open_at = None
        elif open_at is not None:
            body.append(line)
    assert open_at is None, f"{page}:{open_at[0]}: a code block is never closed"
    return out


ALL = [b for page, text in pages().items() for b in blocks_of(page, text)]


def blocks(*langs: str) -> list[Block]:
    return [b for b in ALL if b.lang in langs]


def evoforge_commands(only: str | None = None) -> list[list[str]]:
    """Every `evoforge …` line of the shell blocks (after any VAR=value prefixes), as argv."""
    out = []
    for block in blocks(*COMMAND_LANGS):
        if only is not None and block.page != only:
            continue
        for line in block.body.splitlines():
            words = line.split("#")[0].replace("&", "").split()
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                words = words[1:]
            if words[:1] == ["evoforge"]:
                out.append(words[1:])
    return out


def test_every_code_block_is_of_a_language_the_tests_check_or_is_output():
    unknown = [str(b) + f" ```{b.lang}" for b in ALL if b.lang not in CHECKED_LANGS + OUTPUT_LANGS]
    assert not unknown, f"add a check for these blocks' language in tests/test_docs.py: {unknown}"
    assert len(ALL) > 80  # the pages were read, blocks and all


def test_every_evoforge_command_in_the_docs_parses():
    parser = build_parser()
    commands = evoforge_commands()
    assert len(commands) >= 40
    assert {argv[0] for argv in commands} >= {"run", "status", "leaderboard", "best", "report", "tasks",
                                              "stages", "algorithms", "llm-sim", "cognition", "deploy",
                                              "serve-llm", "bench"}
    for argv in commands:
        if argv == ["--version"]:
            continue  # argparse prints it and exits (tests/test_readme.py runs it)
        parser.parse_args(argv)


def test_a_broken_command_in_a_block_fails_the_check():
    (block,) = blocks_of("x.md", "```bash\nevoforge run circle_packing --max-evlas 3\n```\n")
    argv = block.body.split()[1:]
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)


def test_every_bench_script_the_docs_run_exists():
    scripts = {word for b in blocks(*COMMAND_LANGS) for word in b.body.split() if word.startswith("bench/")
               and word.endswith(".py")}
    assert len(scripts) >= 15
    assert [s for s in scripts if not (REPO / s).is_file()] == []


def _check_yaml(block: Block, tmp_path: Path) -> None:
    """A yaml block is a run config (untitled, or titled with a .yaml file name), a task.yaml
    (title="task.yaml"), or says it is a fragment in its title."""
    folder = tmp_path / f"{Path(block.page).stem}-{block.line}"
    folder.mkdir()
    data = yaml.safe_load(block.body)
    if "fragment" in block.title:
        return
    if block.title == "task.yaml":
        for key in ("program", "prompt", "playbook"):  # the files a task.yaml names must exist
            if key in data:
                (folder / data[key]).write_text("")
        (folder / "task.yaml").write_text(block.body)
        read_task_yaml(folder)
        return
    path = folder / (block.title if block.title.endswith(".yaml") else "config.yaml")
    path.write_text(block.body)
    try:
        load_config(path, environ={})
    except Exception as error:
        raise AssertionError(f"{block}: not a run config ({error}); a task.yaml block says "
                             f"title=\"task.yaml\", a part of a file has 'fragment' in its title") from error


def test_every_yaml_block_loads_as_what_it_says_it_is(tmp_path):
    checked = blocks("yaml")
    assert {b.title for b in checked} >= {"config.yaml", "task.yaml"}
    for block in checked:
        _check_yaml(block, tmp_path)


def test_a_bad_key_in_a_yaml_block_fails_the_check(tmp_path):
    config, task = blocks_of("x.md", '```yaml title="config.yaml"\nbudget: {max_evls: 3}\n```\n'
                                     '```yaml title="task.yaml"\nkind: files\nfilez: [a.py]\n```\n')
    with pytest.raises(AssertionError, match="max_evls"):
        _check_yaml(config, tmp_path)
    with pytest.raises(TaskError, match="filez"):
        _check_yaml(task, tmp_path)


def test_every_json_block_parses():
    for block in blocks("json"):
        json.loads(block.body)


def test_every_toml_block_parses():  # a plug-in package's pyproject.toml (tests/test_plugins_package.py)
    assert blocks("toml")
    for block in blocks("toml"):
        tomllib.loads(block.body)


def _plugin(block: Block) -> bool:
    """A plug-in file (its docstring opens with its file name): run by its own test."""
    return re.match(r'"""\w+\.py:', block.body) is not None


def test_every_python_block_compiles_and_the_self_contained_ones_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(REPO / "evaluators" / "compat"))  # what the sandbox provides
    ran, plugins = 0, 0
    for block in blocks("python"):
        code = compile(block.body, str(block), "exec")
        first = block.body.lstrip().splitlines()[0]
        if _plugin(block):
            plugins += 1
        elif not any(first.startswith(prefix) for prefix in NOT_RUN):
            exec(code, {"__name__": f"docs_block_{block.line}"})  # noqa: S102
            ran += 1
    assert ran >= 6 and plugins == 6
    firsts = [b.body.lstrip().splitlines()[0] for b in blocks("python")]
    assert all(any(f.startswith(prefix) for f in firsts) for prefix in NOT_RUN)  # no stale entry


def test_a_python_block_with_a_syntax_error_fails_the_check():
    (block,) = blocks_of("x.md", "```python\ndef broken(:\n    pass\n```\n")
    with pytest.raises(SyntaxError):
        compile(block.body, str(block), "exec")


def test_the_plugin_examples_are_where_their_tests_read_them():
    found = {re.match(r'"""(\w+\.py):', b.body).group(1): b.page for b in blocks("python") if _plugin(b)}
    assert found == {"diff_size.py": "docs/extend/stage.md", "research_only.py": "docs/extend/algorithm.md",
                     "event_count.py": "docs/extend/sink.md", "newest.py": "docs/extend/sampler.md",
                     "json_doc.py": "docs/extend/artifact-kind.md", "json_line.py": "docs/extend/plugins.md"}


def test_the_task_folder_example_loads_and_its_evaluator_scores_its_program(tmp_path, monkeypatch):
    files = {b.title: b.body for b in blocks("python") if b.page == "docs/guide/task-folders.md" and b.title}
    assert set(files) == {"initial_program.py", "evaluator.py"}
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    task = load_task(str(tmp_path))
    assert task.better(2.0, 1.0)
    namespace: dict = {}
    exec(compile(files["evaluator.py"], "evaluator.py", "exec"), namespace)  # noqa: S102
    result = namespace["evaluate"](str(tmp_path / "initial_program.py"))
    assert result["value"] == 1.0 and result["combined_score"] == pytest.approx(-2.14159)


# --- the generated reference pages ----------------------------------------------------------

def _fields(model: BaseModel, prefix: str = "") -> set[str]:
    """Every key of a config, the ones left out of dumps (secrets) included."""
    out = set()
    for name in type(model).model_fields:
        out.add(prefix + name)
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            out |= _fields(value, prefix + name + ".")
    return out


def _yaml_keys(data: dict, model: BaseModel, prefix: str = "") -> set[str]:
    """A YAML file's keys; a mapping-valued key (engine.workers) is one key."""
    out = set()
    for key, value in data.items():
        out.add(prefix + key)
        section = getattr(model, key, None)
        if isinstance(value, dict) and isinstance(section, BaseModel):
            out |= _yaml_keys(value, section, prefix + key + ".")
    return out


def test_the_config_reference_opens_with_the_full_default_config(tmp_path):
    (block,) = [b for b in blocks_of("config", config_page()) if b.lang == "yaml"]
    assert block.title == "config.yaml" and block.body.startswith("seed: 0 ")
    path = tmp_path / "c.yaml"
    path.write_text(block.body)
    assert load_config(path, environ={}) == RunConfig()
    assert _yaml_keys(yaml.safe_load(block.body), RunConfig()) == _fields(RunConfig())


def test_the_config_reference_has_a_row_with_type_default_and_meaning_for_every_key():
    page = config_page()
    every = keys(RunConfig)
    assert {k.path for k in every} == _fields(RunConfig())
    assert [k.path for k in every if not k.about] == []
    for key in every:
        if key.type != "section":
            assert f"| `{key.path}` | " in page, key.path
    budget = next(k for k in every if k.path == "budget.max_evals")
    assert (budget.type, budget.default) == ("int (>= 1)", "100")
    mode = next(k for k in every if k.path == "engine.mode")
    assert mode.type == "one of: async, sync"


def test_the_config_notes_only_fill_keys_the_code_leaves_uncommented():
    comments = field_comments()
    paths = {k.path: k for k in keys(RunConfig)}
    for name in NOTES:
        if name in paths:
            model, _, field = name.rpartition(".")
            owner = RunConfig
            for part in model.split(".") if model else []:
                owner = owner.model_fields[part].annotation
            assert not comments.get(owner.__name__, {}).get(field), (
                f"{name} has a comment in infra/config.py now: remove its note in docs/hooks/config_notes.py")
        else:
            model, field = name.split(".")
            assert field in comments[model] and not comments[model][field], name


def test_the_cli_reference_has_every_subcommand_and_its_help():
    page = cli_page()
    parser = build_parser()
    for _, _, sub in subcommands(parser):
        assert f"## `{sub.prog}`" in page
        for action in sub._actions:
            for flag in action.option_strings:
                assert flag in page, (sub.prog, flag)
        for _, _, nested in subcommands(sub):
            assert f"### `{nested.prog}`" in page
    assert page.count("```text") == 1 + len(subcommands(parser)) + sum(
        len(subcommands(sub)) for _, _, sub in subcommands(parser))


def test_the_task_yaml_reference_lists_exactly_the_keys_the_loader_allows(tmp_path):
    (tmp_path / "task.yaml").write_text("bogus: 1\n")
    with pytest.raises(TaskError) as error:
        read_task_yaml(tmp_path)
    allowed = set(re.search(r"\(allowed: (.*)\)", str(error.value)).group(1).split(", "))
    table = (DOCS / "reference" / "task-yaml.md").read_text()
    listed = set()
    for row in re.findall(r"^\| (`.*?) \|", table, re.M):
        listed |= set(re.findall(r"`(\w+)`", row))
    assert listed == allowed


# --- the site --------------------------------------------------------------------------------

def test_the_readmes_links_into_the_docs_exist():
    links = re.findall(r"\]\(((?:docs|bench)/[^)#]+)", (REPO / "README.md").read_text())
    assert len(links) >= 30
    assert [link for link in links if not (REPO / link).is_file()] == []


def test_the_site_builds_with_no_warning(tmp_path):
    """`mkdocs build --strict`: every page in the nav, every link and anchor resolves."""
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WARNING" not in done.stderr
    config = (tmp_path / "reference" / "config" / "index.html").read_text()
    assert "budget.max_evals" in config and "engine.workers" in config
    assert "evoforge serve-llm" in (tmp_path / "reference" / "cli" / "index.html").read_text()
