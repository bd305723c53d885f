"""Algorithms are plug-ins: a registered name or one `.py` file names the run's stages and the
artifact kinds it evolves, and sets config defaults that a user's own settings override. The
README's one-file algorithm runs as written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from evoforge.flows.cli import main
from evoforge.flows.prepare import RunRequest, build_pipeline, prepare, with_algorithm_defaults
from evoforge.infra.config import ConfigError, RunConfig
from evoforge.infra.config_load import load_config
from evoforge.stages.algorithms import ALGORITHMS, Algorithm, AlgorithmError, algorithm_named
from evoforge.stages.algorithms.asi_evolve import AsiEvolve, pipeline
from evoforge.stages.engineer import Engineer
from evoforge.stages.pipeline.pipeline import Pipeline
from evoforge.stages.research import Research
from tests.helpers import REPO, read_nodes

QUICK = "cognition: {enabled: false}\nanalyze: {enabled: false}\n"  # no embedder, no Analyzer: fast


def readme_algorithm(tmp_path: Path) -> Path:
    """The docs' one-file algorithm (docs/extend/algorithm.md), written out as a user would save it."""
    text = (REPO / "docs" / "extend" / "algorithm.md").read_text()
    (code,) = re.findall(r"```python\n(\"\"\"research_only\.py:.*?)```", text, re.S)
    path = tmp_path / "research_only.py"
    path.write_text(code)
    return path


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if not line.startswith("[evoforge]")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


class PromptsOnly(Algorithm):
    name, about, kinds = "prompts-only", "a test algorithm for prompts and playbooks", ("text", "playbook")

    def pipeline(self) -> Pipeline:
        return Pipeline((Research(), Engineer()))


class Uniform(Algorithm):
    name, about, kinds = "uniform-test", "a test algorithm that samples parents uniformly", ("program",)
    defaults = {"search": {"sampler": "uniform", "elite_size": 7}}

    def pipeline(self) -> Pipeline:
        return Pipeline((Research(), Engineer()))


@pytest.mark.slow
def test_the_readme_algorithm_runs_from_its_file_and_lists_only_its_stages(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = readme_algorithm(tmp_path)
    (tmp_path / "c.yaml").write_text(QUICK)
    assert main(["run", "circle_packing", "--algorithm", str(path), "--max-evals", "4", "--workspace",
                 str(tmp_path / "ws"), "--config", "c.yaml", "--quiet", "--no-mlflow"]) == 0
    run_dir = tmp_path / "ws" / "circle_packing"
    evaluated = [n for n in read_nodes(run_dir) if n.was_evaluated and n.origin != "seed"]
    assert evaluated  # the run designed and evaluated candidates with research and the engineer alone
    assert "stages research(8) -> engineer(2)," in (run_dir / "run.log").read_text()
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["search"]["sampler"] == "ucb1"  # the algorithm's default reached the run
    capsys.readouterr()
    assert main(["stages", "--algorithm", str(path), "--json"]) == 0
    assert [r["stage"] for r in json.loads(capsys.readouterr().out)] == ["research", "engineer"]


def test_the_readme_algorithm_loads_from_its_file(tmp_path):
    algorithm = algorithm_named(str(readme_algorithm(tmp_path)))
    assert (algorithm.name, algorithm.kinds) == ("research-only", ("program",))
    assert algorithm.pipeline().names() == ["research", "engineer"]


def test_an_unknown_algorithm_is_exit_2_with_one_line_naming_the_known_ones(tmp_path, capsys):
    line = "evoforge: error: engine.algorithm (--algorithm): unknown algorithm 'x' (algorithms: asi-evolve"
    expected = line + "".join(f", {name}" for name in list(ALGORITHMS)[1:]) + ")"
    assert main(["run", "circle_packing", "--algorithm", "x", "--workspace", str(tmp_path)]) == 2
    assert _one_line_error(capsys) == expected
    assert main(["stages", "--algorithm", "x"]) == 2
    assert _one_line_error(capsys) == expected
    assert not (tmp_path / "circle_packing").exists()


def test_a_task_of_a_kind_the_algorithm_does_not_evolve_is_refused_in_one_line(tmp_path, capsys,
                                                                                monkeypatch):
    monkeypatch.setitem(ALGORITHMS, PromptsOnly.name, PromptsOnly)
    assert main(["run", "circle_packing", "--algorithm", "prompts-only", "--workspace", str(tmp_path),
                 "--no-mlflow"]) == 2
    assert _one_line_error(capsys) == ("evoforge: error: engine.algorithm (--algorithm): prompts-only "
                                       "evolves text, playbook tasks; task 'circle_packing' is a program "
                                       "task")
    assert not (tmp_path / "circle_packing").exists()  # refused before any run folder
    cfg = RunConfig.model_validate({"engine": {"algorithm": "prompts-only"}})
    assert build_pipeline(cfg).names() == ["research", "engineer"]  # no task: no kind to check


def test_evoforge_algorithms_lists_asi_evolve_with_its_stages(capsys):
    assert main(["algorithms"]) == 0
    (line,) = [row for row in capsys.readouterr().out.splitlines() if row.startswith("asi-evolve ")]
    assert line.split()[1] == "program,files,text,playbook"
    assert ("learn -> research -> engineer -> debug -> param_search -> judge -> analyze -> verify  "
            "ASI-Evolve") in line
    assert main(["algorithms", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert list(rows) == list(ALGORITHMS)
    assert rows["asi-evolve"]["stages"] == [s.name for s in pipeline().line]
    assert rows["asi-evolve"]["side"] == ["reflect"] and rows["asi-evolve"]["about"] == AsiEvolve.about


def test_asi_evolve_is_the_default_and_its_class_gives_the_module_pipeline():
    assert RunConfig().engine.algorithm == "asi-evolve" and ALGORITHMS["asi-evolve"] is AsiEvolve
    assert AsiEvolve().pipeline().names() == pipeline().names() == build_pipeline(RunConfig()).names()
    assert set(AsiEvolve.kinds) == {"program", "files", "text", "playbook"} and AsiEvolve.defaults == {}


def test_a_user_set_config_value_wins_over_the_algorithms_default(tmp_path, monkeypatch):
    monkeypatch.setitem(ALGORITHMS, Uniform.name, Uniform)
    quick = {"engine.algorithm": "uniform-test", "cognition.enabled": False}
    unset = load_config(overrides=quick, environ={})
    assert with_algorithm_defaults(unset).search.sampler == "uniform"
    flag = load_config(overrides={**quick, "search.sampler": "ucb1"}, environ={})  # as --sampler sets it
    filled = with_algorithm_defaults(flag)
    assert (filled.search.sampler, filled.search.elite_size) == ("ucb1", 7)  # the other default still applies
    (tmp_path / "c.yaml").write_text("engine: {algorithm: uniform-test}\nsearch: {sampler: greedy}\n")
    from_file = load_config(tmp_path / "c.yaml", environ={})  # set to the value that is also the default
    assert with_algorithm_defaults(from_file).search.sampler == "greedy"
    assert unset.search.sampler == "greedy"  # the user's config object is left as it was
    # and the run's request carries the filled config (what the flow, Prefect and config.json see)
    for cfg, sampler in ((unset, "uniform"), (flag, "ucb1")):
        prepared = prepare(RunRequest(task="circle_packing", run_dir="", config=cfg))
        assert prepared.config.search.sampler == prepared.request.config.search.sampler == sampler
        assert prepared.pipeline.names() == ["research", "engineer"]


def test_an_algorithms_bad_default_is_one_line_naming_the_key(monkeypatch):
    class Typo(Uniform):
        name, defaults = "typo-test", {"search": {"sampler": "uniform", "samplr": "x"}}

    class BadValue(Uniform):
        name, defaults = "bad-value-test", {"search": {"elite_size": 0}}

    monkeypatch.setitem(ALGORITHMS, Typo.name, Typo)
    monkeypatch.setitem(ALGORITHMS, BadValue.name, BadValue)
    with pytest.raises(ConfigError) as info:
        with_algorithm_defaults(RunConfig.model_validate({"engine": {"algorithm": "typo-test"}}))
    assert str(info.value) == ("engine.algorithm (--algorithm): algorithm typo-test: defaults: no config key "
                               "'search.samplr'")
    with pytest.raises(ConfigError, match=r"algorithm bad-value-test: defaults: search\.elite_size: Input "
                                          r"should be greater than or equal to 1$"):
        with_algorithm_defaults(RunConfig.model_validate({"engine": {"algorithm": "bad-value-test"}}))


HEAD = "from evoforge.stages.algorithms.base import Algorithm\n"
ONE = ("class {cls}(Algorithm):\n    name, about, kinds = '{name}', 'x', {kinds}\n"
       "    def pipeline(self):\n        from evoforge.stages.algorithms.asi_evolve import pipeline\n"
       "        return pipeline()\n")


@pytest.mark.parametrize(("body", "error"), [
    ("", "defines 0 Algorithm subclasses, not one"),
    (ONE.format(cls="A", name="a", kinds="('program',)") + ONE.format(cls="B", name="b", kinds="()"),
     "defines 2 Algorithm subclasses (A, B), not one"),
    (ONE.format(cls="A", name="a", kinds="('prompt',)"),
     "A.kinds: 'prompt' is not an artifact kind (kinds: program, files, playbook, text)"),
    (ONE.format(cls="A", name="a", kinds="()"),
     "A.kinds: names no kind (kinds: program, files, playbook, text)"),
    ("class A(Algorithm):\n    kinds = ('program',)\n    def pipeline(self): ...\n", "A sets no name"),
    ("raise RuntimeError('boom')\n", "cannot load it (RuntimeError: boom)"),
])
def test_an_algorithm_file_that_is_not_one_algorithm_is_one_line_naming_it(tmp_path, body, error):
    path = tmp_path / "algo.py"
    path.write_text(HEAD + body)
    with pytest.raises(AlgorithmError) as info:
        algorithm_named(str(path))
    assert str(info.value) == f"algorithm file {path}: {error}"
    with pytest.raises(AlgorithmError, match=r"algorithm file .*missing\.py: no such file$"):
        algorithm_named(str(tmp_path / "missing.py"))
