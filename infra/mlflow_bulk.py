"""Write many (nested) MLflow runs in one database transaction (the MLflow sink's batches).

Imported only by the tracker on the MLflow sink's thread (it imports MLflow).

The per-call path (``MlflowClient.create_run`` + ``log_batch`` + an artifact upload +
``set_terminated``) opens about ten SQLAlchemy sessions per run and stages the artifacts in a
temp folder. For a SQL tracking store, :func:`write_runs` writes exactly the rows MLflow writes
for such a run (``runs``, ``tags``, ``params``, ``metrics``, ``latest_metrics``, and, for linked
traces, ``entity_associations``) for a whole batch of runs in one transaction, and writes the
text artifacts straight into each run's local artifact folder.

What a reader (``MlflowClient.get_run``/``search_runs``/``list_artifacts``/
``get_metric_history``, the MLflow UI) sees is the same as with the per-call path; only ids and
times differ. For any other store (e.g. an ``http://`` tracking server), a workspace-aware SQL
store, or an MLflow whose tables no longer have the columns this module knows, :func:`write_runs`
falls back to the per-call path.

MLflow internals this depends on (written against MLflow 3.17):

* ``mlflow.tracking._tracking_service.utils._get_store`` (the cached store ``MlflowClient`` uses)
* ``mlflow.store.tracking.sqlalchemy_store.SqlAlchemyStore``: ``ManagedSessionMaker``,
  ``get_experiment``, ``ARTIFACTS_FOLDER_NAME``, ``supports_workspaces``
* ``mlflow.store.tracking.dbmodels.models``: ``SqlRun``, ``SqlTag``, ``SqlParam``, ``SqlMetric``,
  ``SqlLatestMetric``, ``SqlEntityAssociation`` (their tables; columns checked by
  :func:`bulk_supported`); ``mlflow.entities.entity_type.EntityAssociationType``
* ``mlflow.utils.validation``: ``_validate_param``, ``_validate_tag``, ``_validate_metric``,
  ``_validate_run_id``; ``mlflow.utils.mlflow_tags._get_run_name_from_tags``;
  ``mlflow.utils.name_utils._generate_random_name``; ``mlflow.utils.uri.append_to_uri_path``;
  ``mlflow.utils.file_utils.local_file_uri_to_path``
"""

from __future__ import annotations

import logging
import math
import numbers
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlflow.entities import LifecycleStage, Metric, Param, RunStatus, RunTag, SourceType
from mlflow.entities.entity_type import EntityAssociationType
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from mlflow.store.tracking.dbmodels.models import (
    SqlEntityAssociation,
    SqlLatestMetric,
    SqlMetric,
    SqlParam,
    SqlRun,
    SqlTag,
)
from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
from mlflow.tracking import MlflowClient
from mlflow.tracking._tracking_service.utils import _get_store
from mlflow.utils.file_utils import local_file_uri_to_path
from mlflow.utils.mlflow_tags import _get_run_name_from_tags
from mlflow.utils.name_utils import _generate_random_name
from mlflow.utils.uri import append_to_uri_path
from mlflow.utils.validation import (
    _validate_metric,
    _validate_param,
    _validate_run_id,
    _validate_tag,
)

from evoforge.infra.mlflow_texts import check_text_name, is_local, write_texts

_log = logging.getLogger(__name__)

PARENT_RUN_ID_TAG = "mlflow.parentRunId"
RUN_NAME_TAG = "mlflow.runName"
USER_TAG = "mlflow.user"  # MlflowClient.create_run reads user_id from it; it sets no such tag
MAX_PARAM_VAL_LENGTH = 6000
_LINKS_PER_CALL = 100  # MlflowClient.link_traces_to_run accepts at most this many ids

# The columns of the rows written here, as MLflow 3.17 has them. Another set means the schema
# moved on and the bulk path no longer knows every value MLflow writes: fall back to per-call.
_COLUMNS = {
    SqlRun: {"run_uuid", "name", "source_type", "source_name", "entry_point_name", "user_id",
             "status", "start_time", "end_time", "deleted_time", "source_version",
             "lifecycle_stage", "artifact_uri", "experiment_id"},
    SqlTag: {"key", "value", "run_uuid"},
    SqlParam: {"key", "value", "run_uuid"},
    SqlMetric: {"key", "value", "timestamp", "step", "is_nan", "run_uuid"},
    SqlLatestMetric: {"key", "value", "timestamp", "step", "is_nan", "run_uuid"},
    SqlEntityAssociation: {"association_id", "source_type", "source_id", "destination_type",
                           "destination_id", "created_time"},
}


@dataclass
class RunRecord:
    """One run to write, with the runs nested under it.

    Attributes:
        name: The run name (``info.run_name`` and the ``mlflow.runName`` tag). Empty: taken
            from a ``mlflow.runName`` tag, else a random name, as ``create_run`` does.
        parent_run_id: Id of the run this one is nested under (the ``mlflow.parentRunId``
            tag); None for a top-level run. Not used for ``children``: their parent is the
            record they are listed in.
        params: Param key -> value; values are ``str()``-ed and cut to 6000 characters as
            MLflow does.
        metrics: Metric key -> value, logged at ``step``. Values that are not real numbers, or
            are NaN/inf, are skipped.
        tags: Extra run tags; values are ``str()``-ed. Keys are validated as ``set_tag``/
            ``log_batch`` do; values cut to 8000 characters.
        status: Final status: FINISHED, FAILED, KILLED (any ``RunStatus`` name).
        texts: Text artifacts, file name (may contain ``/``) -> text; empty texts are skipped.
        children: Runs nested under this one.
        start_time, end_time: Epoch milliseconds; default: the time of the write.
        step: The step every metric is logged at.
        run_id: A pre-chosen run id (:func:`new_run_id`), e.g. to link traces before the run is
            written; default: a new one. Set to the written run's id (the per-call fallback
            cannot honour a pre-chosen id: ``create_run`` picks it).
        trace_ids: Traces linked to this run (what ``MlflowClient.link_traces_to_run`` does).
    """

    name: str
    parent_run_id: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, Any] = field(default_factory=dict)
    status: str = "FINISHED"
    texts: dict[str, str] = field(default_factory=dict)
    children: list[RunRecord] = field(default_factory=list)
    start_time: int | None = None
    end_time: int | None = None
    step: int = 0
    run_id: str | None = None
    trace_ids: list[str] = field(default_factory=list)


def new_run_id() -> str:
    """A run id as MLflow makes them."""
    return uuid.uuid4().hex


def bulk_supported(store: Any) -> bool:
    """True if ``store`` is a plain ``SqlAlchemyStore`` whose tables have exactly the columns
    this module writes."""
    if type(store) is not SqlAlchemyStore or getattr(store, "supports_workspaces", False):
        return False
    for model, columns in _COLUMNS.items():
        if set(model.__table__.columns.keys()) != columns:
            _log.warning("MLflow's %s table changed (%s); bulk run writes disabled",
                         model.__tablename__, sorted(model.__table__.columns.keys()))
            return False
    return True


def write_runs(store_uri: str, experiment_id: str, runs: list[RunRecord]) -> list[str]:
    """Write ``runs`` (and their ``children``, nested under them) to the tracking store.

    For a SQL store (sqlite, postgres, mysql, mssql) all rows of all the runs go in one
    transaction: either every run of the batch is written or none is (the artifact folders a
    failed batch made are removed again). Text artifacts are written before the rows, so a run
    is never visible without them. Other stores get the per-call ``MlflowClient`` path.

    Args:
        store_uri: The tracking URI, e.g. ``sqlite:////path/mlflow.db``.
        experiment_id: The experiment the runs go to (must be active).
        runs: The runs to write.

    Returns:
        The run ids of ``runs``, in order (every record's, children's too, is also set on its
        ``run_id``).

    Raises:
        MlflowException: a bad param/metric/tag key, a bad status, a bad artifact file name,
            a run name contradicting the ``mlflow.runName`` tag, a pre-chosen run id that
            exists, an inactive or unknown experiment, a database error (MLflow's session
            wraps it). Nothing of the batch is written then.
    """
    if not runs:
        return []
    store = _get_store(store_uri)
    if not bulk_supported(store):
        return _write_runs_per_call(store_uri, experiment_id, runs)
    return _write_runs_bulk(store, store_uri, experiment_id, runs)


# ---- helpers shared by both paths ---------------------------------------------------------------

def _now_ms() -> int:
    return int(time.time() * 1000)


def _metric_items(metrics: dict[str, Any]) -> Iterator[tuple[str, float]]:
    """The metrics worth logging: real numbers, finite, as floats."""
    for key, value in metrics.items():
        if isinstance(value, numbers.Real):
            value = float(value)
            if math.isfinite(value):
                yield key, value


def _param_value(value: Any) -> str:
    return str(value)[:MAX_PARAM_VAL_LENGTH]


# ---- the bulk path ------------------------------------------------------------------------------

def _walk(records: list[RunRecord], parent_id: str | None,
          top: bool = True) -> Iterator[tuple[RunRecord, str | None]]:
    """Each record with the id of the run it is nested under, parents before children."""
    for record in records:
        yield record, (record.parent_run_id if top else parent_id)
        if record.children:
            if record.run_id is None:
                record.run_id = new_run_id()
            yield from _walk(record.children, record.run_id, top=False)


def _walk_existing(records: list[RunRecord]) -> Iterator[tuple[RunRecord, None]]:
    """Every record (children too) as given, without choosing ids."""
    for record in records:
        yield record, None
        yield from _walk_existing(record.children)


def _prepare(record: RunRecord, parent_id: str | None, experiment_id: int,
             artifact_location: str, now: int) -> dict[str, Any]:
    """The validated rows MLflow writes for one run: what ``create_run(tags={parentRunId,
    **tags})``, ``log_batch(metrics, params)`` and ``set_terminated(status)`` write."""
    run_id = record.run_id or new_run_id()
    _validate_run_id(run_id)
    if len(run_id) > 32:  # runs.run_uuid is VARCHAR(32)
        raise MlflowException(f"Run id {run_id!r} is longer than 32 characters",
                              INVALID_PARAMETER_VALUE)
    try:
        status = RunStatus.to_string(RunStatus.from_string(record.status))
    except Exception as exc:  # RunStatus raises a bare Exception
        raise MlflowException(f"Bad run status {record.status!r}: {exc}",
                              INVALID_PARAMETER_VALUE) from exc

    raw_tags: dict[str, str] = {}
    if parent_id is not None:
        raw_tags[PARENT_RUN_ID_TAG] = parent_id
    raw_tags.update({key: str(value) for key, value in record.tags.items()})
    name_tag = _get_run_name_from_tags([RunTag(k, v) for k, v in raw_tags.items()])
    if record.name and name_tag and record.name != name_tag:  # create_run's rule
        raise MlflowException(
            "Both 'run_name' argument and 'mlflow.runName' tag are specified, but with "
            f"different values (run_name='{record.name}', mlflow.runName='{name_tag}').",
            INVALID_PARAMETER_VALUE)
    run_name = record.name or name_tag or _generate_random_name()
    if not name_tag:
        raw_tags[RUN_NAME_TAG] = run_name  # create_run appends it last
    tags = [_validate_tag(k, v, path=f"tags[{i}]") for i, (k, v) in enumerate(raw_tags.items())]
    params = [_validate_param(k, _param_value(v), path=f"params[{i}]")
              for i, (k, v) in enumerate(record.params.items())]
    metrics = list(_metric_items(record.metrics))
    for i, (key, value) in enumerate(metrics):
        _validate_metric(key, value, now, record.step, path=f"metrics[{i}]")
    for name, text in record.texts.items():
        if text:
            check_text_name(name)

    start = record.start_time if record.start_time is not None else now
    end = record.end_time if record.end_time is not None else max(now, start)
    artifact_uri = append_to_uri_path(artifact_location, run_id,
                                      SqlAlchemyStore.ARTIFACTS_FOLDER_NAME)
    record.run_id = run_id
    return {
        "run": {
            "run_uuid": run_id, "name": run_name,
            "source_type": SourceType.to_string(SourceType.UNKNOWN), "source_name": "",
            "entry_point_name": "", "user_id": raw_tags.get(USER_TAG, "unknown"),
            "status": status, "start_time": start, "end_time": end, "deleted_time": None,
            "source_version": "", "lifecycle_stage": LifecycleStage.ACTIVE,
            "artifact_uri": artifact_uri, "experiment_id": experiment_id,
        },
        "tags": [{"run_uuid": run_id, "key": t.key, "value": t.value} for t in tags],
        "params": [{"run_uuid": run_id, "key": p.key, "value": p.value} for p in params],
        # one value per key at one step: the latest_metrics row equals the metrics row
        "metrics": [{"run_uuid": run_id, "key": key, "value": value, "timestamp": now,
                     "step": record.step, "is_nan": False} for key, value in metrics],
        "links": [{"association_id": uuid.uuid4().hex,
                   "source_type": EntityAssociationType.TRACE, "source_id": trace_id,
                   "destination_type": EntityAssociationType.RUN, "destination_id": run_id,
                   "created_time": now} for trace_id in dict.fromkeys(record.trace_ids)],
        "artifact_uri": artifact_uri,
    }


def _write_runs_bulk(store: SqlAlchemyStore, store_uri: str, experiment_id: str,
                     runs: list[RunRecord]) -> list[str]:
    experiment = store.get_experiment(experiment_id)
    if experiment.lifecycle_stage != LifecycleStage.ACTIVE:
        raise MlflowException(
            f"The experiment {experiment.experiment_id} must be in the 'active' state. "
            f"Current state is {experiment.lifecycle_stage}.", INVALID_PARAMETER_VALUE)
    chosen = [record.run_id for record, _ in _walk_existing(runs) if record.run_id]
    now = _now_ms()
    exp_id = int(experiment.experiment_id)
    prepared = [(record, _prepare(record, parent_id, exp_id, experiment.artifact_location, now))
                for record, parent_id in _walk(runs, None)]
    ids = [rows["run"]["run_uuid"] for _, rows in prepared]
    if len(set(ids)) != len(ids):
        raise MlflowException("The same run id twice in one batch", INVALID_PARAMETER_VALUE)
    if chosen:  # ids the caller picked must be new: no artifact may land in an existing run
        with store.ManagedSessionMaker() as session:
            taken = [row[0] for row in session.query(SqlRun.run_uuid)
                     .filter(SqlRun.run_uuid.in_(chosen)).all()]
        if taken:
            raise MlflowException(f"Run ids exist already: {taken}", INVALID_PARAMETER_VALUE)

    made: list[Path] = []  # run folders this call created: removed again if the batch fails
    try:
        for record, rows in prepared:
            if any(record.texts.values()):
                uri = rows["artifact_uri"]
                if is_local(uri):
                    run_folder = Path(local_file_uri_to_path(uri)).parent
                    if not run_folder.exists():
                        made.append(run_folder)
                write_texts(uri, record.texts, store_uri)
        metric_rows = [m for _, rows in prepared for m in rows["metrics"]]
        tables = (
            (SqlRun, [rows["run"] for _, rows in prepared]),
            (SqlTag, [t for _, rows in prepared for t in rows["tags"]]),
            (SqlParam, [p for _, rows in prepared for p in rows["params"]]),
            (SqlMetric, metric_rows),
            (SqlLatestMetric, metric_rows),
            (SqlEntityAssociation, [lk for _, rows in prepared for lk in rows["links"]]),
        )
        with store.ManagedSessionMaker(read_only=False) as session:
            for model, table_rows in tables:
                if table_rows:
                    session.execute(model.__table__.insert(), table_rows)  # one executemany
    except BaseException:
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    return [record.run_id for record in runs]  # type: ignore[misc]


# ---- the per-call path (any store) --------------------------------------------------------------

def _write_runs_per_call(store_uri: str, experiment_id: str, runs: list[RunRecord]) -> list[str]:
    """Per run: create_run, log_batch, one artifact upload, link_traces_to_run,
    set_terminated; then its children."""
    client = MlflowClient(tracking_uri=store_uri)

    def one(record: RunRecord, parent_id: str | None) -> str:
        tags = {PARENT_RUN_ID_TAG: parent_id} if parent_id is not None else {}
        tags.update({key: str(value) for key, value in record.tags.items()})
        run = client.create_run(experiment_id, start_time=record.start_time,
                                run_name=record.name or None, tags=tags)
        run_id = run.info.run_id
        record.run_id = run_id
        now = _now_ms()
        client.log_batch(
            run_id,
            metrics=[Metric(k, v, now, record.step) for k, v in _metric_items(record.metrics)],
            params=[Param(k, _param_value(v)) for k, v in record.params.items()],
        )
        write_texts(run.info.artifact_uri, record.texts, store_uri)
        trace_ids = list(dict.fromkeys(record.trace_ids))
        for i in range(0, len(trace_ids), _LINKS_PER_CALL):
            client.link_traces_to_run(trace_ids[i:i + _LINKS_PER_CALL], run_id)
        client.set_terminated(run_id, status=record.status, end_time=record.end_time)
        for child in record.children:
            one(child, run_id)
        return run_id

    return [one(record, record.parent_run_id) for record in runs]
