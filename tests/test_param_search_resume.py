"""A staged run killed in the middle of a structure's Optuna study resumes it: the finished trials
are kept, the defaults are not evaluated again, and only the missing trials run."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from evoforge.infra.nodes import EVALUATED
from evoforge.stages.engineer_data import EngineerData
from evoforge.stages.tuning.param_study import INTERRUPTED, SOURCE_DEFAULT, TuningData
from tests.gated_tasks import write_staged_task
from tests.helpers import cli_env, read_nodes, run_cli

pytestmark = pytest.mark.slow

TRIALS = 6


def _studies(db: Path) -> dict[str, list[optuna.trial.FrozenTrial]]:
    storage = optuna.storages.RDBStorage(f"sqlite:///{db}")
    return {s.study_name: storage.get_all_trials(s._study_id, deepcopy=False)
            for s in storage.get_all_studies()}


_FINISHED_NEW = """
    SELECT s.study_name, count(*) FROM trials t JOIN studies s ON s.study_id = t.study_id
    WHERE t.state IN ('COMPLETE', 'FAIL') AND s.study_id > 1 AND t.number > 0
    GROUP BY s.study_name"""


def _wait_mid_study(run_dir: Path, proc: subprocess.Popen, timeout: float = 180) -> str:
    """The name of a design's study (not the seed's, the first) with at least 2 finished new
    trials and more to go; read with plain read-only sqlite, so the reader never creates the
    schema the run is creating."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        db = run_dir / "optuna.db"
        if db.exists():
            try:
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
                    rows = con.execute(_FINISHED_NEW).fetchall()
            except sqlite3.Error:  # the run is still creating the tables: look again
                rows = []
            for name, finished in rows:
                if 2 <= finished < TRIALS:
                    return name
        time.sleep(0.05)
    raise AssertionError("no study was caught mid-way")


def test_a_study_cut_off_by_a_kill_continues_where_it_stopped(tmp_path):
    task = write_staged_task(tmp_path)
    run_dir = tmp_path / "run"
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"param_search": {"trials": TRIALS, "startup": 2, "parallel": 1},
                                  "plan": {"slots": 1}, "cognition": {"enabled": False},
                                  "tracking": {"mlflow": False}}))
    args = ["run", str(task), "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
            "--config", str(config), "--max-evals", "4", "--workers", "research=1,engineer=1",
            "--seed", "3", "--quiet"]
    proc = subprocess.Popen([sys.executable, "-m", "evoforge.flows.cli", *args], cwd=tmp_path,
                            env=cli_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    name = _wait_mid_study(run_dir, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    before = {t.number: (t.state, dict(t.params), t.value) for t in _studies(run_dir / "optuna.db")[name]}

    done = run_cli(args, tmp_path)
    assert done.returncode == 0, done.stderr
    after = _studies(run_dir / "optuna.db")[name]
    for trial in after:  # every trial finished before the kill is still there, unchanged
        if trial.number in before and before[trial.number][0].is_finished():
            assert (trial.state, dict(trial.params), trial.value) == before[trial.number]
    interrupted = [t for t in after if t.user_attrs.get("error") == INTERRUPTED]
    counted = [t for t in after if t.state.is_finished() and t.user_attrs.get("source") != SOURCE_DEFAULT
               and t.user_attrs.get("error") != INTERRUPTED]
    defaults = [t for t in after if t.user_attrs.get("source") == SOURCE_DEFAULT]
    assert len(counted) == TRIALS and len(defaults) == 1  # only the missing trials ran
    assert len(after) == 1 + TRIALS + len(interrupted)
    node = next(n for n in read_nodes(run_dir) if f"node-{n.id}" == name)
    assert node.status == EVALUATED and TuningData.peek(node).trials_run == TRIALS
    assert node.artifacts.get("defaults", "").startswith("evaluated by an earlier session")
    assert EngineerData.peek(node).score_default == pytest.approx(defaults[0].value)
