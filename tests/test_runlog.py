"""run.log takes evoforge's records for the length of a run, then gives them back."""

from __future__ import annotations

import logging

from evoforge.flows.runlog import attach_run_log, detach_run_log


def test_the_run_log_gets_the_records_and_propagation_comes_back_after(tmp_path):
    logger = logging.getLogger("evoforge")
    handler = attach_run_log(tmp_path / "run.log")
    logging.getLogger("evoforge.test").warning("inside the run")
    assert logger.propagate is False
    detach_run_log(handler)
    assert logger.propagate is True and handler not in logger.handlers
    assert "inside the run" in (tmp_path / "run.log").read_text()
