"""User errors end in one clear line and exit code 2; the read-only commands work on a run."""

from __future__ import annotations

import io
import logging
import socket

import pytest

from evoforge.flows.cli import main
from evoforge.flows.runlog import cli_run_log


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if not line.startswith("[evoforge]")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_missing_task_folder_is_exit_2(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope"), "--workspace", str(tmp_path)]) == 2
    assert "nope" in _one_line_error(capsys)


def test_unknown_config_key_is_named(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("budget:\n  max_evls: 3\n")
    assert main(["run", "circle_packing", "--config", str(cfg), "--workspace", str(tmp_path)]) == 2
    assert _one_line_error(capsys) == (f"evoforge: error: {cfg}: unknown key 'budget.max_evls' "
                                       "(did you mean 'budget.max_evals'?)")


def test_a_bad_flag_value_is_one_line_naming_the_flag_not_the_usage_block(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["run", "circle_packing", "--workers", "research=abc"])
    assert stop.value.code == 2
    line = _one_line_error(capsys)
    assert line.startswith("evoforge: error: --workers: takes stage=count pairs") and "usage:" not in line


def test_a_flag_value_the_config_refuses_names_the_flag_not_the_key(tmp_path, capsys):
    assert main(["run", "circle_packing", "--max-evals", "-3", "--workspace", str(tmp_path)]) == 2
    assert _one_line_error(capsys) == ("evoforge: error: --max-evals: Input should be greater than or "
                                       "equal to 1 (got -3)")


def test_help_still_prints_the_usage_and_exits_0(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["run", "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: evoforge run") and "--max-evals" in out


def test_a_misspelt_command_or_flag_gets_a_did_you_mean(capsys):
    for argv, hint in ((["staus", "x"], "(did you mean 'status'?)"),
                       (["run", "circle_packing", "--max-evlas", "3"], "(did you mean '--max-evals'?)")):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2 and _one_line_error(capsys).endswith(hint)


def test_bad_config_value_is_exit_2(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("engine:\n  mode: turbo\n")
    assert main(["run", "circle_packing", "--config", str(cfg)]) == 2
    assert "engine.mode" in _one_line_error(capsys)


def test_unreachable_llm_is_exit_2(tmp_path, capsys):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code = main(["run", "circle_packing", "--llm-base-url", f"http://127.0.0.1:{port}/v1",
                 "--workspace", str(tmp_path)])
    assert code == 2
    assert "unreachable" in _one_line_error(capsys)


def test_status_of_a_folder_without_a_run_is_exit_2(tmp_path, capsys):
    assert main(["status", str(tmp_path)]) == 2
    assert "no evoforge run" in _one_line_error(capsys)


def test_a_run_refused_before_it_made_its_folder_leaves_no_folder(tmp_path):
    run_log = tmp_path / "never-made" / "run.log"
    with pytest.raises(ValueError, match="refused"), cli_run_log(run_log):
        logging.getLogger("evoforge.run").warning("before the folder exists")
        raise ValueError("refused")
    assert not run_log.parent.exists()


@pytest.mark.filterwarnings("ignore:Logger 'prefect.flow_runs' attempted to send logs")  # (no flow run here)
def test_prefect_run_errors_go_to_run_log_not_the_terminal_with_each_traceback_once(tmp_path):
    terminal = io.StringIO()
    handler = logging.StreamHandler(terminal)
    logging.getLogger().addHandler(handler)
    try:
        with pytest.raises(RuntimeError), cli_run_log(tmp_path / "run.log"):
            try:
                raise RuntimeError("the seed failed")
            except RuntimeError as exc:
                logging.getLogger("evoforge.run").exception("the run failed")
                logging.getLogger("prefect.flow_runs").error("Encountered exception", exc_info=exc)
                logging.getLogger("prefect.flow_runs").error("Finished in state Failed")
                raise
        logging.getLogger("prefect.flow_runs").error("after the run: on the terminal again")
    finally:
        logging.getLogger().removeHandler(handler)
    log = (tmp_path / "run.log").read_text()
    assert log.count("Traceback (most recent call last)") == 1
    assert "Encountered exception" in log and "Finished in state Failed" in log
    assert "the run stopped: RuntimeError: the seed failed" in log
    assert terminal.getvalue() == "after the run: on the terminal again\n"
