"""run.log takes evoforge's records for the length of a run, then gives the logger back as it was."""

from __future__ import annotations

import logging

from evoforge.flows.runlog import attach_run_log, detach_run_log


def test_the_run_log_gets_the_records_and_the_logger_comes_back_as_it_was(tmp_path):
    logger = logging.getLogger("evoforge")
    before = (logger.level, logger.propagate)
    attached = attach_run_log(tmp_path / "run.log")
    logging.getLogger("evoforge.test").info("inside the run")
    assert logger.propagate is False and logger.level == logging.INFO
    detach_run_log(attached)
    assert (logger.level, logger.propagate) == before and attached.handler not in logger.handlers
    assert "inside the run" in (tmp_path / "run.log").read_text()
