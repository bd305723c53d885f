"""A run whose folder's disk fills stops with one line naming the folder and its free space, exit
code 75 and no traceback on the terminal; nothing recorded is lost, and with space back the same
command resumes to the budget, no node evaluated or stored twice. The disk is a small tmpfs (this
needs root, which CI has: there the test fails rather than skips when it cannot mount)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from bench.crash_kills import Series, mlflow_audit
from evoforge.flows.cli import DISK_FULL
from evoforge.flows.engine import EngineFailure
from evoforge.infra.disk_full import DiskFull
from evoforge.infra.nodes import FAILED
from evoforge.infra.runfiles import RunPaths
from tests.engine_fakes import FakeEngineer, FakeResearch, Log, make_harness
from tests.helpers import read_nodes, read_status, run_cli

_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
LINE = re.compile(r"^evoforge: the run folder (\S+) is out of disk space \((\d+(\.\d)? [kMG]?B) free\): "
                  r"nothing recorded is lost; free space and run the same command to resume$")


@contextlib.contextmanager
def small_disk(folder: Path, size_mb: int) -> Iterator[Path]:
    """A tmpfs of `size_mb` mounted on `folder` for the length of the block."""
    folder.mkdir(parents=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        if _CI:
            pytest.fail("CI runs as root: the disk-full test must mount its tmpfs")
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        if _CI:
            pytest.fail(f"cannot mount a tmpfs in CI: {mounted.stderr.strip()}")
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _fill(folder: Path, leave_bytes: int) -> Path:
    """A filler file that leaves about `leave_bytes` free on `folder`'s disk."""
    filler = folder / "filler"
    with filler.open("wb") as handle:
        handle.write(b"\0" * max(0, shutil.disk_usage(folder).free - leave_bytes))
    return filler


@pytest.mark.slow
def test_a_full_disk_stops_the_run_in_one_line_and_the_same_command_resumes_it(tmp_path):
    budget = 40
    with small_disk(tmp_path / "disk", 12) as disk:
        workspace = disk / "ws"
        run_dir = workspace / "circle_packing"
        args = ["run", "circle_packing", "--workspace", str(workspace), "--max-evals", str(budget),
                "--seed", "3", "--quiet"]
        _fill(disk, leave_bytes=2_200_000)  # about 15 evaluations' worth with MLflow in the workspace
        full = run_cli(args, tmp_path)
        assert full.returncode == DISK_FULL == 75, full.stderr
        err = full.stderr.splitlines()
        assert "Traceback" not in full.stderr and "Logging error" not in full.stderr
        assert [line for line in err if not line.startswith("[evoforge]")] == [err[-1]]  # one line
        said = LINE.match(err[-1])
        assert said is not None, err[-1]
        assert Path(said.group(1)) == run_dir
        assert "Traceback" not in full.stdout

        stored = read_nodes(run_dir)  # the database opens after the full disk
        before = {n.id: n.evaluated_at for n in stored if n.was_evaluated}
        assert 0 < len(before) < budget  # the disk filled part-way

        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)  # space is back
        done = run_cli(args, tmp_path)
        assert done.returncode == 0, done.stderr
        nodes = read_nodes(run_dir)
        by_id = {n.id: n for n in nodes}
        assert sum(n.was_evaluated for n in nodes) == budget == read_status(run_dir)["evaluations"]
        assert all(by_id[i].evaluated_at == at for i, at in before.items())  # none lost, none again
        with duckdb.connect(str(run_dir / "nodes.duckdb"), read_only=True) as db:
            twice = db.execute("SELECT id FROM node_rows GROUP BY id HAVING count(*) > 1").fetchall()
        assert twice == []  # every node stored once (older versions dropped at the close)
        series = Series(run_dir, workspace, tmp_path / "prefect-home", budget)
        running, missing, extra = mlflow_audit(series, nodes)
        assert (running, missing, extra) == ([], [], [])  # MLflow caught up: one run per candidate


def _engineer_meeting_a_full_disk(log: Log, path: Path, at: int) -> FakeEngineer:
    """An engineer whose `at`-th run meets a full disk writing `path`."""
    calls = []

    def observe() -> None:
        calls.append(1)
        if len(calls) == at:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))

    return FakeEngineer(log, 0.01, observe=observe)


def test_a_full_disk_in_the_run_folder_met_inside_a_stage_stops_the_run_and_fails_no_node(tmp_path):
    log = Log()
    engineer = _engineer_meeting_a_full_disk(log, tmp_path / "optuna.db", at=3)
    h = make_harness(tmp_path, [FakeResearch(log, 0.01), engineer], max_evals=50,
                     view={"paths": RunPaths(tmp_path)})
    with pytest.raises(EngineFailure) as stopped:
        asyncio.run(h.run(limit_s=20))
    assert isinstance(stopped.value.__cause__, DiskFull)
    assert stopped.value.__cause__.path == str(tmp_path / "optuna.db")
    assert not [n for n in h.nodes() if n.status == FAILED]  # the candidate goes on at the resume
    h.close()


def test_a_full_disk_outside_the_run_folder_met_inside_a_stage_is_that_candidates_failure(tmp_path):
    log = Log()
    elsewhere = Path("/tmp/evoforge-sandbox-0/evoforge-eval-x/program.py")  # a candidate's own folder
    (tmp_path / "run").mkdir()
    engineer = _engineer_meeting_a_full_disk(log, elsewhere, at=3)
    h = make_harness(tmp_path / "run", [FakeResearch(log, 0.01), engineer], max_evals=6,
                     view={"paths": RunPaths(tmp_path / "run")})
    asyncio.run(h.run(limit_s=20))
    failed = [n for n in h.nodes() if n.status == FAILED]
    assert len(failed) == 1 and "No space left on device" in (failed[0].error or "")
    h.close()
