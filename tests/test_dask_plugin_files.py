"""A run's `--plugin` files reach its Dask workers: an artifact kind defined in a file (the JSON
kind of docs/extend/artifact-kind.md) is evaluated in worker processes that never saw the file,
loaded there and on the scheduler under the module name it has in the flow. Without it the
scheduler cannot read the task graph (the run fails) and a worker cannot read the job (the run
never finishes)."""

from __future__ import annotations

import json
import os
import sys

import pytest

pytest.importorskip("prefect_dask")  # the dask extra; the dev extra installs it

from distributed import Client, LocalCluster  # noqa: E402

from evoforge.infra.plugin_files import module_name  # noqa: E402
from tests.helpers import read_nodes, run_cli  # noqa: E402
from tests.test_plugins_files import doc_plugin, json_task  # noqa: E402

pytestmark = pytest.mark.slow


def _plugin_modules() -> list[str]:
    return sorted(m for m in sys.modules if m.startswith("evoforge_plugin_"))


def test_an_artifact_kind_from_a_plugin_file_is_evaluated_on_dask_workers(tmp_path):
    kind, task = doc_plugin(tmp_path, "artifact-kind.md", "json_doc.py"), json_task(tmp_path)
    config = tmp_path / "c.yaml"
    config.write_text("cognition:\n  enabled: false\n")
    run_dir = tmp_path / "run"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      local_directory=str(tmp_path / "worker-local")) as cluster, Client(cluster) as client:
        worker_pids = set(client.run(os.getpid).values())
        assert all(modules == [] for modules in client.run(_plugin_modules).values())
        done = run_cli(["run", str(task), "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                        "--plugin", str(kind), "--config", str(config), "--max-evals", "5", "--seed", "3",
                        "--quiet", "--no-mlflow", "--executor", "dask", "--dask-address",
                        cluster.scheduler_address], tmp_path, timeout=240)
        on_workers = client.run(_plugin_modules)
        on_scheduler = client.run_on_scheduler(_plugin_modules)  # (this process: earlier tests' files too)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(on_workers) == 2 and all(modules == [module_name(kind)] for modules in on_workers.values())
    assert module_name(kind) in on_scheduler
    evaluated = [n for n in read_nodes(run_dir) if n.was_evaluated]
    assert len(evaluated) == 5 and all(n.error is None and n.score_full is not None for n in evaluated)
    assert all(isinstance(json.loads(n.code), dict) for n in evaluated)
    assert {int(n.artifacts["evaluated_on"].rsplit(":", 1)[1]) for n in evaluated} <= worker_pids
