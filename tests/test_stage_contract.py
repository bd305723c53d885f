"""The stage contract: a stage is one file. The README's example plugs in with `--plugin`, keeps
its own data on every node (stored and copied by its types), takes `--workers`, brings a sink;
`evoforge stages` prints the pipeline as data; every stage takes a worker count."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from evoforge.flows.cli import main
from evoforge.flows.prepare import build_pipeline
from evoforge.infra.config import ConfigError, RunConfig
from evoforge.infra.node_data import NodeData
from evoforge.infra.nodes import Node
from evoforge.infra.nodestore import NodeStore
from evoforge.stages.algorithms import asi_evolve
from evoforge.stages.pipeline.pipeline import Pipeline, PipelineError
from evoforge.stages.pipeline.stage import COMMIT
from evoforge.stages.population.item import Item, ItemUpdate
from tests.helpers import REPO, read_nodes, read_status


def readme_plugin(tmp_path: Path) -> Path:
    """The docs' one-file stage (docs/extend/stage.md), written out as a user would save it."""
    text = (REPO / "docs" / "extend" / "stage.md").read_text()
    (code,) = re.findall(r"```python\n(\"\"\"diff_size\.py:.*?)```", text, re.S)
    path = tmp_path / "diff_size.py"
    path.write_text(code)
    return path


def test_the_pipeline_is_explicit_data_in_order():
    pipeline = asi_evolve.pipeline()
    assert [s.name for s in pipeline.line] == ["learn", "research", "engineer", "debug", "param_search",
                                               "judge", "analyze", "verify"]
    assert [s.name for s in pipeline.side] == ["reflect"]
    every = pipeline.routes({s.name for s in pipeline.stages})
    assert every == {"learn": "research", "research": "engineer", "engineer": "debug",
                     "debug": "param_search", "param_search": "judge", "judge": "analyze",
                     "analyze": "verify", "verify": COMMIT, "reflect": "engineer"}
    # a run that leaves stages out routes past them; a side stage goes where its `then` would
    some = pipeline.routes({"research", "engineer", "analyze", "reflect"})
    assert some == {"research": "engineer", "engineer": "analyze", "analyze": COMMIT, "reflect": "engineer"}
    assert pipeline.entry({"research", "engineer"}).name == "research"


def test_evoforge_stages_prints_the_runs_stages_order_workers_and_routes(capsys):
    assert main(["stages", "--workers", "analyze=3,engineer=4", "--json"]) == 0
    rows = {r["stage"]: r for r in json.loads(capsys.readouterr().out)}
    assert [r["order"] for r in rows.values()] == list(range(1, 10))
    assert rows["analyze"]["workers"] == 3 and rows["engineer"]["workers"] == 4
    assert rows["learn"]["workers"] == rows["research"]["workers"] == 8  # learn is sized like research
    assert rows["reflect"]["workers"] == 4 and not rows["reflect"]["enabled"]  # sized like engineer
    assert rows["engineer"]["then"] == "debug" and rows["analyze"]["then"] == "verify"
    assert rows["verify"]["then"] == "commit" and rows["verify"]["workers"] == 4  # sized like engineer
    assert rows["learn"]["entry"] and rows["engineer"]["evaluates"] and rows["engineer"]["runs_on_seed"]
    assert rows["param_search"]["runs_on_seed"] and rows["param_search"]["own_sinks"]
    assert rows["debug"]["data"] == ["debug.attempts"]
    assert main(["stages"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:5] == ["#", "stage", "line", "on", "workers"]
    assert table[3].split()[:6] == ["3", "engineer", "main", "yes", "2", "debug"]


@pytest.mark.parametrize("name", [s.name for s in asi_evolve.pipeline().stages])
def test_every_stage_takes_a_worker_count(name):
    cfg = RunConfig.model_validate({"engine": {"workers": {name: 5}}})
    stage = build_pipeline(cfg).get(name)
    assert stage.workers(cfg).initial == 5


def test_a_worker_count_for_a_stage_the_run_does_not_have_is_one_line_naming_the_stages():
    cfg = RunConfig.model_validate({"engine": {"workers": {"analyse": 2}}})
    with pytest.raises(ConfigError) as info:
        build_pipeline(cfg)
    assert str(info.value) == ("engine.workers (--workers): no stage 'analyse' (did you mean 'analyze'?); "
                               "the run's stages: learn, research, engineer, debug, param_search, judge, "
                               "analyze, verify, reflect")


def test_a_plugin_following_a_stage_the_pipeline_lacks_is_refused(tmp_path):
    plugin = tmp_path / "lost.py"
    plugin.write_text("from evoforge.stages.pipeline.stage import Stage, StageResult\n"
                      "class Lost(Stage):\n    name, after = 'lost', 'nowhere'\n"
                      "    async def run(self, item, ctx):\n        return StageResult(item.node)\n")
    with pytest.raises(ConfigError, match="goes after 'nowhere', which is not in the pipeline"):
        build_pipeline(RunConfig.model_validate({"engine": {"plugins": [str(plugin)]}}))
    with pytest.raises(PipelineError, match="two stages share the name 'research'"):
        Pipeline((*asi_evolve.pipeline().line, asi_evolve.pipeline().get("research")))


@dataclass
class Notes(NodeData, owner="contract_test_notes"):
    seen: int = 0
    tags: list[str] = field(default_factory=list)


def test_stage_data_is_copied_and_stored_by_its_types(tmp_path):
    node = Node(id="a", run_id="r", code="x")
    Notes.of(node).tags.append("first")
    copy = node.copy()
    Notes.of(copy).tags.append("second")  # a private copy: the original's list is untouched
    assert Notes.peek(node).tags == ["first"] and Notes.peek(copy).tags == ["first", "second"]
    node.owned["unloaded_plugin"] = {"kept": [1, 2]}  # a stage this process did not load
    with NodeStore(tmp_path / "n.duckdb") as store:
        store.put(node)
        back = store.get("a")
    assert back.owned["contract_test_notes"] == Notes(0, ["first"])  # read back as its dataclass
    assert back.owned["unloaded_plugin"] == {"kept": [1, 2]}  # and the unknown one as it was


def test_a_database_of_an_earlier_version_keeps_its_nodes_and_their_stage_data(tmp_path):
    import duckdb

    from evoforge.stages.debug import RepairData
    from evoforge.stages.tuning.param_study import TuningData

    con = duckdb.connect(str(tmp_path / "n.duckdb"))  # the layout an earlier evoforge wrote
    con.execute("CREATE TABLE nodes (id VARCHAR PRIMARY KEY, run_id VARCHAR, code VARCHAR, status VARCHAR, "
                "score_full DOUBLE, created_at DOUBLE, attempts VARCHAR, trials_run BIGINT)")
    con.execute("""INSERT INTO nodes VALUES ('old', 'r', 'x = 1', 'evaluated', 2.0, 1.0,
                   '[{"error": "boom"}]', 7)""")
    con.close()
    with NodeStore(tmp_path / "n.duckdb", read_only=True) as store:  # read as it is
        (old,) = store.all()
    assert RepairData.peek(old).attempts == [{"error": "boom"}] and TuningData.peek(old).trials_run == 7
    with NodeStore(tmp_path / "n.duckdb") as store:  # a writer moves it over, keeping everything
        store.put(old.copy(score_full=3.0))
        (again,) = store.all()
    assert again.score_full == 3.0 and RepairData.peek(again).attempts == [{"error": "boom"}]
    assert TuningData.peek(again).trials_run == 7 and again.code == "x = 1"


def test_item_updates_are_typed_and_leave_the_rest_alone():
    item = Item(v_i=0, parent=Node(id="p", run_id="r", code=""), answer="before")
    item.apply(None, ItemUpdate(prompt=[{"role": "user", "content": "x"}]))
    assert item.answer == "before" and item.prompt == [{"role": "user", "content": "x"}]
    with pytest.raises(TypeError):
        ItemUpdate(study=1)  # not an item field: refused where it is written


@pytest.mark.slow
def test_the_readme_stage_plugs_in_with_no_other_file_keeps_its_data_takes_workers_and_a_sink(tmp_path):
    plugin = readme_plugin(tmp_path)
    before = {p: p.read_bytes() for layer in ("flows", "stages", "infra", "evaluators", "cognition")
              for p in (REPO / layer).rglob("*.py")}
    run_dir = tmp_path / "run"
    code = main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                 "--plugin", str(plugin), "--workers", "research=4,diff_size=3", "--max-evals", "10",
                 "--no-mlflow", "--quiet"])
    assert code == 0
    status = read_status(run_dir)
    assert "engineer(2) -> diff_size(3) -> debug(4)" in (run_dir / "run.log").read_text()  # behind
    # the engineer, with the workers it was given
    evaluated = [n for n in read_nodes(run_dir) if n.was_evaluated and n.origin != "seed"]
    lines = {n.id: n.owned["diff_size"].lines for n in evaluated}  # read back as its dataclass
    assert evaluated and all(count > 0 for count in lines.values())  # its data, stored with the node
    logged = dict(line.split() for line in (run_dir / "diff_sizes.txt").read_text().splitlines())
    assert {node: str(count) for node, count in lines.items()}.items() <= logged.items()
    assert status["sinks"]["diff_size_log"]["recorded"] > 0 and not status["tracking_failures"]
    after = {p: p.read_bytes() for p in before}
    assert after == before  # nothing of evoforge's own was changed to plug it in
