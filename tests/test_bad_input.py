"""Bad input ends in one line `evoforge: error: ...` naming the flag, key or file, exit code 2, and
no traceback on the terminal (it goes to run.log): malformed task folders, evaluators that raise or
return garbage, invalid configs, bad flag values, unreachable URLs, a run folder in use. Inside a
run, a failing evaluator is a failed node with its reason and the run goes on."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evoforge.flows.cli import main
from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
from evoforge.infra.nodes import EVALUATED, FAILED
from evoforge.infra.vllm_server import free_port
from tests.helpers import cli_env, read_nodes, read_status

PROGRAM = "# EVOLVE-BLOCK-START\ndef f():\n    return 1.0\n# EVOLVE-BLOCK-END\n"
EVALUATOR = 'def evaluate(program_path):\n    return {"combined_score": 1.0}\n'
LOAD = ("import importlib.util\n\n\ndef _f(path):\n"
        "    spec = importlib.util.spec_from_file_location('candidate', path)\n"
        "    module = importlib.util.module_from_spec(spec)\n"
        "    spec.loader.exec_module(module)\n    return module.f()\n\n\n")

# name -> files of a task folder (None: the file is left out)
TASKS: dict[str, dict[str, str | bytes]] = {
    "good": {"initial_program.py": PROGRAM, "evaluator.py": EVALUATOR},
    "no_evaluator": {"initial_program.py": PROGRAM},
    "no_program": {"evaluator.py": EVALUATOR},
    "empty": {},
    "no_block": {"initial_program.py": "def f():\n    return 1.0\n", "evaluator.py": EVALUATOR},
    "two_blocks": {"initial_program.py": PROGRAM * 2, "evaluator.py": EVALUATOR},
    "program_syntax": {"initial_program.py": "# EVOLVE-BLOCK-START\ndef f(:\n# EVOLVE-BLOCK-END\n",
                       "evaluator.py": EVALUATOR},
    "program_binary": {"initial_program.py": b"\xff\xfe# EVOLVE-BLOCK-START\n", "evaluator.py": EVALUATOR},
    "evaluator_syntax": {"initial_program.py": PROGRAM, "evaluator.py": "def evaluate(p)\n    return 1\n"},
    "evaluator_no_evaluate": {"initial_program.py": PROGRAM, "evaluator.py": "def score(p):\n    return 1\n"},
    "evaluator_binary": {"initial_program.py": PROGRAM, "evaluator.py": b"\xff\xfe\x00"},
    "task_yaml_unparsable": {"initial_program.py": PROGRAM, "evaluator.py": EVALUATOR,
                             "task.yaml": "objective: [unclosed\n"},
    "task_yaml_unknown_key": {"initial_program.py": PROGRAM, "evaluator.py": EVALUATOR,
                              "task.yaml": "timeout: 5\n"},
    "task_yaml_bad_direction": {"initial_program.py": PROGRAM, "evaluator.py": EVALUATOR,
                                "task.yaml": "objective: {metric: combined_score, direction: up}\n"},
    "task_yaml_a_list": {"initial_program.py": PROGRAM, "evaluator.py": EVALUATOR, "task.yaml": "- a\n"},
    "task_yaml_missing_program": {"evaluator.py": EVALUATOR, "task.yaml": "program: main.py\n"},
    "config_yaml_unparsable": {"initial_program.py": PROGRAM, "evaluator.py": EVALUATOR,
                               "config.yaml": "evaluator: {timeout: [\n"},
    # evaluators that fail on the seed: one line, exit 2
    "seed_raises": {"initial_program.py": PROGRAM,
                    "evaluator.py": "def evaluate(program_path):\n    raise RuntimeError('boom')\n"},
    "seed_garbage": {"initial_program.py": PROGRAM,
                     "evaluator.py": "def evaluate(program_path):\n    return 'garbage'\n"},
    "seed_import_fails": {"initial_program.py": PROGRAM,
                          "evaluator.py": "import no_such_module_xyz\n\n\n" + EVALUATOR},
    # an evaluator that fails every candidate but the seed, three ways
    "fails_candidates": {"initial_program.py": PROGRAM, "evaluator.py": LOAD + (
        "def evaluate(program_path):\n    value = _f(program_path)\n    if value == 1.0:\n"
        "        return {'combined_score': 1.0}\n    kind = int(abs(value) * 1000) % 3\n"
        "    if kind == 0:\n        raise RuntimeError(f'evaluator refuses {value}')\n"
        "    return 'garbage' if kind == 1 else {'combined_score': float('nan')}\n")},
    # a run folder as a finished run leaves it, without its database
    "finished": {"status.json": '{"state": "finished", "best_score": 1.0, "best_node": "n1"}',
                 "best/program.py": PROGRAM, "leaderboard.md": "| rank | node |\n"},
    # an evaluation that takes a while, so that a run is going when it is looked at
    "slow": {"initial_program.py": PROGRAM, "evaluator.py": LOAD + (
        "def evaluate(program_path):\n    import time\n    time.sleep(0.5)\n"
        "    return {'combined_score': -abs(_f(program_path) - 3.0)}\n")},
}
CONFIGS = {
    "unknown_key.yaml": "budget:\n  max_evls: 3\n",
    "unknown_section.yaml": "budgte: {}\n",
    "misplaced_key.yaml": "max_evals: 3\n",
    "bad_type.yaml": "budget:\n  max_evals: many\n",
    "bad_value.yaml": "engine:\n  mode: turbo\n",
    "not_a_mapping.yaml": "- a\n- b\n",
    "not_yaml.yaml": "budget: [1, 2\n",
    "binary.yaml": b"\xff\xfe\x00",
    "section_a_number.yaml": "budget: 5\n",
    "endpoint_typo.yaml": "llm:\n  endpoints:\n    - bse_url: http://x/v1\n",
    "quiet.yaml": "cognition:\n  enabled: false\nguard:\n  repair_attempts: 0\n",
}

# (what is wrong, the command line, a text the one error line must hold: the flag, key or file)
BAD_INPUTS = [
    ("task folder without evaluator.py", "run {t}/no_evaluator", "evaluator.py"),
    ("task folder without a program", "run {t}/no_program", "initial_program.py"),
    ("empty task folder", "run {t}/empty", "evaluator.py"),
    ("no EVOLVE block", "run {t}/no_block", "initial_program.py: no EVOLVE-BLOCK-START"),
    ("two EVOLVE blocks", "run {t}/two_blocks", "initial_program.py: expected one"),
    ("program with a syntax error", "run {t}/program_syntax", "initial_program.py: syntax error"),
    ("program not UTF-8", "run {t}/program_binary", "initial_program.py: cannot read"),
    ("evaluator with a syntax error", "run {t}/evaluator_syntax", "evaluator.py: syntax error"),
    ("evaluator without evaluate()", "run {t}/evaluator_no_evaluate", "evaluator.py: no top-level"),
    ("evaluator not UTF-8", "run {t}/evaluator_binary", "evaluator.py: cannot read"),
    ("task.yaml not YAML", "run {t}/task_yaml_unparsable", "task.yaml: invalid YAML"),
    ("task.yaml unknown key", "run {t}/task_yaml_unknown_key", "task.yaml: unknown key 'timeout'"),
    ("task.yaml bad direction", "run {t}/task_yaml_bad_direction", "objective.direction"),
    ("task.yaml not a mapping", "run {t}/task_yaml_a_list", "task.yaml: expected a mapping"),
    ("task.yaml names a missing program", "run {t}/task_yaml_missing_program", "'main.py' does not exist"),
    ("config.yaml not YAML", "run {t}/config_yaml_unparsable", "config.yaml: invalid YAML"),
    ("no such task", "run circle_pack", "task 'circle_pack' not found"),
    ("config: unknown key", "run {t}/good --config {c}/unknown_key.yaml",
     "unknown key 'budget.max_evls' (did you mean 'budget.max_evals'?)"),
    ("config: unknown section", "run {t}/good --config {c}/unknown_section.yaml",
     "unknown key 'budgte' (did you mean 'budget'?)"),
    ("config: key in the wrong section", "run {t}/good --config {c}/misplaced_key.yaml",
     "unknown key 'max_evals' (did you mean 'budget.max_evals'?)"),
    ("config: bad type", "run {t}/good --config {c}/bad_type.yaml", "bad_type.yaml: budget.max_evals"),
    ("config: bad value", "run {t}/good --config {c}/bad_value.yaml", "bad_value.yaml: engine.mode"),
    ("config: not a mapping", "run {t}/good --config {c}/not_a_mapping.yaml", "not_a_mapping.yaml: the top"),
    ("config: not YAML", "run {t}/good --config {c}/not_yaml.yaml", "not_yaml.yaml: not valid YAML"),
    ("config: not UTF-8", "run {t}/good --config {c}/binary.yaml", "binary.yaml: cannot read"),
    ("config: a section that is a number", "run {t}/good --config {c}/section_a_number.yaml --max-evals 3",
     "'budget' is not a section"),
    ("config: endpoint key typo", "run {t}/good --config {c}/endpoint_typo.yaml",
     "did you mean 'llm.endpoints.0.base_url'?"),
    ("config: MLflow server unreachable", "run {t}/good --config {c}/tracking.yaml",
     "tracking.tracking_uri http://127.0.0.1:"),
    ("config: no such file", "run {t}/good --config {c}/nope.yaml", "nope.yaml"),
    ("config: a folder", "run {t}/good --config {c}", "config file not found"),
    ("--max-evals negative", "run {t}/good --max-evals -3", "--max-evals: Input should be greater"),
    ("--max-evals not a number", "run {t}/good --max-evals abc", "--max-evals: invalid int value"),
    ("--max-evals without a value", "run {t}/good --max-evals", "--max-evals: expected one argument"),
    ("--workers not a count", "run {t}/good --workers research=abc", "--workers: takes stage=count"),
    ("--workers unknown stage", "run {t}/good --workers analyse=2",
     "engine.workers (--workers): no stage 'analyse' (did you mean 'analyze'?); the run's stages: learn, "
     "research, engineer, debug, param_search, judge, analyze, verify, reflect"),
    ("--workers zero", "run {t}/good --workers engineer=0", "--workers: takes stage=count pairs"),
    ("--mode unknown", "run {t}/good --mode turbo", "--mode: invalid choice: 'turbo'"),
    ("--sampler unknown", "run {t}/good --sampler ucb", "search.sampler (--sampler): unknown sampler 'ucb'"),
    ("--staleness unknown", "run {t}/good --staleness none", "--staleness: invalid choice"),
    ("--executor unknown", "run {t}/good --executor gpu", "--executor: invalid choice"),
    ("--alpha-spec over 1", "run {t}/good --alpha-spec 2", "--alpha-spec: Input should be less"),
    ("--alpha-spec not a number", "run {t}/good --alpha-spec x", "--alpha-spec: invalid float value"),
    ("--max-wall-s zero", "run {t}/good --max-wall-s 0", "--max-wall-s: Input should be greater than 0"),
    ("--max-tokens zero", "run {t}/good --max-tokens 0", "--max-tokens: Input should be greater"),
    ("--max-wall-s not a number", "run {t}/good --max-wall-s soon", "--max-wall-s: invalid float value"),
    ("--max-tokens not a number", "run {t}/good --max-tokens lots", "--max-tokens: invalid int value"),
    ("--seed not a number", "run {t}/good --seed x", "--seed: invalid int value"),
    ("--dask-address without dask", "run {t}/good --dask-address tcp://x:1", "--executor dask"),
    ("misspelt flag", "run {t}/good --max-evlas 3", "(did you mean '--max-evals'?)"),
    ("--run-dir is a file", "run {t}/good --run-dir {c}/bad_value.yaml", "--run-dir"),
    ("--workspace is a file", "run {t}/good --workspace {c}/bad_value.yaml", "--workspace"),
    ("--llm-base-url not a URL", "run {t}/good --llm-base-url gpu-box:8000",
     "--llm-base-url: must be an http"),
    ("--llm-base-url unreachable", "run {t}/good --llm-base-url http://127.0.0.1:{port}/v1",
     "--llm-base-url: LLM server unreachable at http://127.0.0.1:"),
    ("misspelt command", "rn {t}/good", "(did you mean 'run'?)"),
    ("run without a task", "run", "the following arguments are required: task"),
    ("status of no run", "status {t}/nowhere", "no evoforge run"),
    ("status of a folder without a run", "status {t}/good", "no status.json"),
    ("leaderboard --top 0", "leaderboard {t}/good --top 0", "--top: expected a whole number"),
    ("leaderboard of a folder without a run", "leaderboard {t}/good", "no leaderboard.md"),
    ("best of no run", "best {t}/nowhere", "no evoforge run"),
    ("report of a folder without a run", "report {t}/good", "no nodes.duckdb"),
    ("best -o into a missing folder", "best {t}/finished -o {t}/nowhere/best.py", "-o "),
    ("leaderboard --top of a run without leaderboard.json", "leaderboard {t}/finished --top 3",
     "no leaderboard.json"),
    ("status --workspace is a file", "status x --workspace {c}/bad_value.yaml", "--workspace"),
    ("cognition --workspace is a file", "cognition list --workspace {c}/bad_value.yaml", "--workspace"),
    ("cognition add a missing file", "cognition add {c}/nope.md --workspace {c}/../ws", "nope.md"),
    ("llm-sim --port not a number", "llm-sim --port abc", "--port: invalid int value"),
    ("cognition search without a query", "cognition search", "required: query"),
    ("bench unknown benchmark", "bench nothing", "invalid choice: 'nothing'"),
    ("serve-llm without --model", "serve-llm", "one of the arguments --model --gguf is required"),
]
SEED_FAILURES = [
    ("seed: evaluator raises", "seed_raises", "evaluator raised RuntimeError: boom"),
    ("seed: evaluator returns garbage", "seed_garbage", "evaluate() returned str"),
    ("seed: evaluator fails to import", "seed_import_fails", "No module named 'no_such_module_xyz'"),
]


def _write(folder: Path, files: dict[str, str | bytes]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(text if isinstance(text, bytes) else text.encode())


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad-input")
    for name, files in TASKS.items():
        _write(root / "tasks" / name, files)
    _write(root / "configs", CONFIGS)
    _write(root / "configs", {"tracking.yaml": f"tracking:\n  tracking_uri: http://127.0.0.1:{free_port()}\n"})
    return {"t": root / "tasks", "c": root / "configs", "ws": root / "ws"}


def _argv(template: str, folders: dict[str, Path]) -> list[str]:
    argv = template.format(t=folders["t"], c=folders["c"], port=free_port()).split()
    if argv[0] == "run" and "--workspace" not in argv and len(argv) > 1:
        argv += ["--workspace", str(folders["ws"])]
    return argv


def exit_code(argv: list[str]) -> int:
    """What `evoforge ARGV` exits with (argparse ends a bad command line with SystemExit)."""
    try:
        return main(argv)
    except SystemExit as stop:
        return stop.code


def one_error_line(err: str) -> str:
    """The one line a user error prints (the `[evoforge]` progress lines before it aside)."""
    assert "Traceback" not in err and "| ERROR" not in err, err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[evoforge]")]
    assert len(lines) == 1, err
    assert lines[0].startswith("evoforge: error: "), err
    return lines[0]


@pytest.mark.parametrize(("what", "template", "named"), BAD_INPUTS, ids=[case[0] for case in BAD_INPUTS])
def test_bad_input_is_one_line_naming_it_and_exit_2(what, template, named, folders, capsys):
    code = exit_code(_argv(template, folders))
    err = capsys.readouterr().err
    assert code == 2, err
    assert named in one_error_line(err)


@pytest.mark.slow
@pytest.mark.parametrize(("what", "task", "reason"), SEED_FAILURES, ids=[case[0] for case in SEED_FAILURES])
def test_a_seed_that_fails_its_evaluation_is_one_line_and_the_traceback_is_in_run_log(
        what, task, reason, folders, tmp_path, capsys):
    run_dir = tmp_path / task
    code = main(["run", str(folders["t"] / task), "--run-dir", str(run_dir), "--max-evals", "2",
                 "--no-mlflow", "--quiet", "--config", str(folders["c"] / "quiet.yaml")])
    err = capsys.readouterr().err
    assert code == 2, err
    line = one_error_line(err)
    assert f"the initial program of '{task}' failed its evaluation" in line and reason in line
    log = (run_dir / "run.log").read_text()
    assert log.count("Traceback (most recent call last)") == 1  # once, though Prefect logged it too
    assert "SeedFailed" in log and "Finished in state Failed" in log  # Prefect's lines: here, not there


@pytest.mark.slow
def test_an_evaluator_failing_candidates_fails_those_nodes_with_the_reason_and_the_run_goes_on(
        folders, tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = main(["run", str(folders["t"] / "fails_candidates"), "--run-dir", str(run_dir),
                 "--max-evals", "5", "--no-mlflow", "--quiet", "--no-prefect-tasks",
                 "--config", str(folders["c"] / "quiet.yaml")])
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err, err
    nodes = read_nodes(run_dir)
    failed = [n for n in nodes if n.status == FAILED]
    assert "seed" in [n.origin for n in nodes if n.status == EVALUATED]
    assert len(failed) >= 3 and read_status(run_dir)["state"] == "finished"
    assert read_status(run_dir)["evaluations"] == 5
    reasons = {n.error.split(":")[0] for n in failed}
    assert reasons <= {"evaluator raised RuntimeError",
                       "evaluate() returned str, expected a dict of metrics or an EvaluationResult",
                       "metric 'combined_score' is not finite (nan)"}, reasons
    assert all(n.error for n in failed)


def _wait_for(check, proc: subprocess.Popen, what: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the run ended before {what}: {proc.communicate()[1]}"
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_a_run_folder_in_use_is_refused_and_status_and_leaderboard_read_it_meanwhile(
        folders, tmp_path, capsys):
    run_dir = tmp_path / "busy"
    task = str(folders["t"] / "slow")
    proc = subprocess.Popen(
        [sys.executable, "-m", "evoforge.flows.cli", "run", task, "--run-dir", str(run_dir),
         "--max-evals", "400", "--no-mlflow", "--quiet", "--config", str(folders["c"] / "quiet.yaml")],
        cwd=tmp_path, env=cli_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: (run_dir / "leaderboard.md").is_file() and (run_dir / "status.json").is_file()
                  and read_status(run_dir)["state"] == "running", proc, "the run to be going")
        assert main(["status", str(run_dir)]) == 0
        assert "running)" in capsys.readouterr().out
        assert main(["leaderboard", str(run_dir), "--json"]) == 0
        assert '"node"' in capsys.readouterr().out  # the seed's row, at least
        assert main(["best", str(run_dir)]) == 0
        assert "def f():" in capsys.readouterr().out
        assert main(["report", str(run_dir)]) == 2  # the run holds its database: one line says so
        assert "is going and holds its node database" in one_error_line(capsys.readouterr().err)
        code = main(["run", task, "--run-dir", str(run_dir), "--max-evals", "400", "--no-mlflow"])
        line = one_error_line(capsys.readouterr().err)
        assert code == 2
        assert f"run folder {run_dir} is in use by another evoforge run (pid {proc.pid})" in line
        assert proc.poll() is None  # the refused run left the going one alone
        proc.send_signal(signal.SIGINT)  # stop it cleanly
        assert proc.wait(timeout=120) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert read_status(run_dir)["state"] == "interrupted"


@pytest.mark.slow
def test_an_unlisted_llm_model_is_a_warning_and_the_run_uses_it(folders, tmp_path, capsys):
    with SimulatorProcess(SimConfig(median_s=0.01, sigma=0.0, seed=2)) as sim:
        code = main(["run", str(folders["t"] / "good"), "--run-dir", str(tmp_path / "run"),
                     "--max-evals", "2", "--llm-base-url", sim.base_url, "--llm-model", "team-alias",
                     "--no-mlflow", "--quiet", "--no-prefect-tasks",
                     "--config", str(folders["c"] / "quiet.yaml")])
    err = capsys.readouterr().err
    assert code == 0, err
    warning = f"model 'team-alias' is not listed at {sim.base_url} (it lists: evoforge-sim); using it anyway"
    assert f"[evoforge] warning: {warning}" in err
    assert "evoforge: error" not in err
    assert read_status(tmp_path / "run")["model"] == "team-alias"
