"""evoforge's log lines in the Prefect flow run's Logs tab, at INFO, without touching the terminal.

Prefect's own handlers follow PREFECT_LOGGING_LEVEL (WARNING by default here, see prefect_env.py),
so the `evoforge` logger gets its own `APILogHandler` for the length of the flow run. Records logged
outside any Prefect run context (the MLflow thread, evaluation threads) are bound to the flow run
that attached the handler, instead of being dropped with a warning.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from uuid import UUID

from prefect.context import FlowRunContext, get_run_context
from prefect.exceptions import MissingContextError
from prefect.logging.handlers import APILogHandler


class _BindFlowRun(logging.Filter):
    """Give a record logged outside a Prefect run context this flow run's id."""

    def __init__(self, flow_run_id: UUID):
        super().__init__()
        self.flow_run_id = flow_run_id

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "flow_run_id", None) is None:
            try:
                get_run_context()
            except MissingContextError:
                record.flow_run_id = self.flow_run_id
        return True


@dataclass
class PrefectLog:
    """An attached API handler and the logger settings it replaced."""

    logger: logging.Logger
    handler: APILogHandler
    level: int
    propagate: bool


def attach_prefect_log(name: str = "evoforge", level: int = logging.INFO) -> PrefectLog | None:
    """Send the `name` logger's records, from `level` up, to the current flow run's logs (not to
    the terminal: the logger stops propagating while attached); None outside a flow run."""
    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return None
    handler = APILogHandler(level=level)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    handler.addFilter(_BindFlowRun(ctx.flow_run.id))
    logger = logging.getLogger(name)
    attached = PrefectLog(logger, handler, logger.level, logger.propagate)
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > level:
        logger.setLevel(level)
    logger.propagate = False
    return attached


async def detach_prefect_log(attached: PrefectLog | None) -> None:
    """Stop sending the logger's records to the flow run, restore its level and propagation, and
    send what is queued, so the Logs tab is complete when the run shows its final state."""
    if attached is None:
        return
    attached.logger.removeHandler(attached.handler)
    attached.logger.setLevel(attached.level)
    attached.logger.propagate = attached.propagate
    try:
        await APILogHandler.aflush()
    except Exception as exc:  # tracking: a warning, the run's own result stands
        attached.logger.warning("could not send the last log lines to Prefect: %s", exc)
