"""User errors end in one clear line and exit code 2; the read-only commands work on a run."""

from __future__ import annotations

import socket

from evoforge.flows.cli import main


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) >= 1 and "Traceback" not in "\n".join(err)
    return err[-1]


def test_missing_task_folder_is_exit_2(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope"), "--workspace", str(tmp_path)]) == 2
    assert "nope" in _one_line_error(capsys)


def test_unknown_config_key_is_named(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("budget:\n  max_evls: 3\n")
    assert main(["run", "circle_packing", "--config", str(cfg), "--workspace", str(tmp_path)]) == 2
    assert "max_evls" in _one_line_error(capsys)


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
