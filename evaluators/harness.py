"""Child-side evaluation harness: load a task's evaluator.py, run it, report JSON on a pipe.

Run by the sandbox as ``python harness.py --evaluator E --program P [...]``; stdlib only, and it
never imports evoforge. The result is one JSON object written to the file descriptor named by
``EVOFORGE_RESULT_FD``: ``{"ok": true, "metrics": {...}, "artifacts": {...}, "flags": [...],
"cascade_step": n}`` or ``{"ok": false, "error": "...", "artifacts": {"traceback": ...}}``; ``flags``
names the metrics that were booleans (reported as 0/1). An ``async def`` evaluator function (also
``evaluate_stage1..3``, ``cases``, ``evaluate_case``) is awaited. Cascade evaluation follows
OpenEvolve: run ``evaluate_stage1``; continue only while the merged metrics pass the stage's
threshold (``combined_score`` if present, else the mean of the numeric metrics but ``error``).

Two more modes serve case-based evaluators (``cases()`` and ``evaluate_case(program, case)``):
``--list-cases`` reports ``{"ok": true, "cases": ["0", "1", ...]}``; ``--cases-file F`` reads a
JSON list of case ids (as strings; the file is deleted once read), imports evaluator.py once and
streams one JSON line per case as soon as it is done -- ``{"case": "17", "metrics": {...},
"artifacts": {...}}`` or ``{"case": "17", "error": "...", "artifacts": {...}}``, stopping after
the first failure -- then ``{"done": true}``, or ``{"done": true, "error": "..."}`` when no case
could run (evaluator.py fails to load, unknown case id).

``--function NAME`` runs a task's quick test instead: ``NAME(program_path)`` must return a dict;
it passes unless it raises, its ``ok`` entry is false or its ``error`` entry is non-empty, and
the report is the one ``evaluate`` gives (``{"ok": true, "metrics": ...}`` on a pass).

Before evaluator.py is imported, the harness exports the evaluation's settings for the evaluator
and the program (``evoforge_knobs.knob`` reads them): ``EVOFORGE_LEVEL`` (``--level``),
``EVOFORGE_DATA_FRACTION`` (``--data-fraction``, when the level declares one) and
``EVOFORGE_PARAMS``, the JSON object of parameter values read from ``--params-file`` (deleted
once read). ``--level-aware`` and ``--params-aware`` pass ``level=`` and ``params=`` to
``evaluate``. Every report (and the stream's last line) carries ``cpu_s``, the CPU seconds
(user + system) of this process and its waited-for children.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import inspect
import json
import numbers
import os
import resource
import sys
import traceback
from typing import Any

_ARTIFACT_CHARS = 20000
_TRACEBACK_LINES = 24


class ResultError(TypeError):
    """The evaluator returned something that is neither a metrics dict nor an EvaluationResult."""


class StageFailure(Exception):
    """An exception raised inside one cascade stage, tagged with the stage's function name."""

    def __init__(self, where: str, exc: BaseException) -> None:
        super().__init__(where)
        self.where = where
        self.exc = exc


def _split_result(result: Any) -> tuple[dict[str, float], dict[str, str]]:
    """Turn a dict or an object with ``.metrics``/``.artifacts`` into numeric metrics and text."""
    if isinstance(result, dict):
        raw_metrics, raw_artifacts = result, {}
    elif hasattr(result, "metrics"):
        raw_metrics = dict(result.metrics or {})
        raw_artifacts = dict(getattr(result, "artifacts", None) or {})
    else:
        kind = type(result).__name__
        raise ResultError(f"returned {kind}, expected a dict of metrics or an EvaluationResult")
    metrics: dict[str, float] = {}
    artifacts: dict[str, str] = {}
    for key, value in raw_metrics.items():
        number = _as_number(value)
        if number is None:
            artifacts[str(key)] = _as_text(value)
        else:
            metrics[str(key)] = number
    for key, value in raw_artifacts.items():
        artifacts[str(key)] = _as_text(value)
    return metrics, artifacts


def _flags(result: Any) -> list[str]:
    """Names of the boolean entries of a result's metrics (flags, left out of a fitness mean)."""
    raw = result if isinstance(result, dict) else getattr(result, "metrics", None) or {}
    return [str(k) for k, v in raw.items() if isinstance(v, bool) or type(v).__name__ == "bool_"]


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return float(bool(value))
    if isinstance(value, numbers.Real):
        return float(value)
    return None


def _as_text(value: Any) -> str:
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= _ARTIFACT_CHARS else text[:_ARTIFACT_CHARS] + " ...[truncated]"


def _passes(metrics: dict[str, float], threshold: float) -> bool:
    """OpenEvolve's gate: combined_score if present, else the mean of numeric metrics."""
    if "combined_score" in metrics:
        return metrics["combined_score"] >= threshold
    values = [v for k, v in metrics.items() if k != "error"]
    return bool(values) and sum(values) / len(values) >= threshold


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn``; an ``async def`` evaluator's awaitable is run to its result."""
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):
        result = asyncio.run(_awaited(result))
    return result


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _run_cascade_step(module: Any, name: str, program: str) -> tuple[dict, dict, list[str]]:
    try:
        result = _call(getattr(module, name), program)
        return (*_split_result(result), _flags(result))
    except BaseException as exc:  # every failure becomes a report
        raise StageFailure(name, exc) from exc


def _cascade(module: Any, program: str, thresholds: list[float]) -> tuple[dict, dict, list[str], int]:
    metrics: dict[str, float] = {}
    artifacts: dict[str, str] = {}
    flags: list[str] = []
    step = 0
    while step < 3 and hasattr(module, f"evaluate_stage{step + 1}"):
        if step > 0 and (len(thresholds) < step or not _passes(metrics, thresholds[step - 1])):
            break
        step += 1
        new_metrics, new_artifacts, new_flags = _run_cascade_step(module, f"evaluate_stage{step}", program)
        metrics.update(new_metrics)
        artifacts.update(new_artifacts)
        flags = [f for f in flags if f not in new_metrics] + new_flags
    return metrics, artifacts, flags, step


_PRECOMPILED: dict[bytes, Any] = {}  # a fork server's evaluator.py, compiled once: source -> code


def precompile(path: str) -> None:
    """Compile ``path`` once, so that a child loading the same source skips the compile."""
    with open(path, "rb") as handle:
        source = handle.read()
    _PRECOMPILED[source] = compile(source, path, "exec", dont_inherit=True)


def _load_evaluator(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("evaluator", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["evaluator"] = module
    code = None
    if _PRECOMPILED:
        with open(path, "rb") as handle:
            code = _PRECOMPILED.get(handle.read())
    if code is None:
        spec.loader.exec_module(module)
    else:  # the same source the fork server compiled (its tracebacks name the task's copy)
        exec(code, module.__dict__)  # noqa: S102 - what exec_module would run, compiled already
    return module


def _describe(exc: BaseException, where: str) -> str:
    if isinstance(exc, SystemExit):
        return f"program called sys.exit({exc.code!r}) during {where}"
    if isinstance(exc, MemoryError):
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        cap = f" under the {limit // 2**20} MB address-space limit" if limit > 0 else ""
        return f"ran out of memory (MemoryError){cap} during {where}"
    if isinstance(exc, KeyboardInterrupt):
        return f"interrupted (KeyboardInterrupt) during {where}"
    if isinstance(exc, ResultError):
        return f"{where} {exc}"
    message = " ".join(str(exc).split())[:500]
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    at = f", {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    text = f"evaluator raised {type(exc).__name__}" + (f": {message}" if message else "")
    return f"{text} (in {where}{at})"


def _traceback_tail(exc: BaseException) -> str:
    lines = "".join(traceback.format_exception(exc)).splitlines()
    return "\n".join(lines[-_TRACEBACK_LINES:])


def _evaluate(args: argparse.Namespace) -> dict[str, Any]:
    where = "loading evaluator.py"
    try:
        module = _load_evaluator(args.evaluator)
        if args.cascade:
            thresholds = [float(t) for t in args.thresholds.split(",") if t]
            metrics, artifacts, flags, step = _cascade(module, args.program, thresholds)
            return {"ok": True, "metrics": metrics, "artifacts": artifacts, "flags": flags,
                    "cascade_step": step}
        where = "evaluate()"
        kwargs: dict[str, Any] = {"level": args.level} if args.level_aware else {}
        if args.params_aware:
            kwargs["params"] = args.params
        result = _call(module.evaluate, args.program, **kwargs)
        metrics, artifacts = _split_result(result)
        return {"ok": True, "metrics": metrics, "artifacts": artifacts, "flags": _flags(result),
                "cascade_step": None}
    except BaseException as exc:  # noqa: BLE001 - SystemExit etc. are candidate failures
        step = None
        if isinstance(exc, StageFailure):
            step, where, exc = int(exc.where[-1]), f"{exc.where}()", exc.exc
        return {
            "ok": False,
            "error": _describe(exc, where),
            "artifacts": {"traceback": _traceback_tail(exc), "failure_stage": where},
            "cascade_step": step,
        }


def _quick_test(args: argparse.Namespace) -> dict[str, Any]:
    """Call the quick-test function on the program and judge its dict (see the module doc)."""
    where = "loading evaluator.py"
    try:
        module = _load_evaluator(args.evaluator)
        where = f"{args.function}()"
        result = _call(getattr(module, args.function), args.program)
        if not isinstance(result, dict):
            raise ResultError(f"returned {type(result).__name__}, expected a dict")
        metrics, artifacts = _split_result(result)
        error = " ".join(_as_text(result["error"]).split())[:1000] if result.get("error") else ""
        passed = bool(result.get("ok", True))
    except BaseException as exc:  # noqa: BLE001 - SystemExit etc. are candidate failures
        return {"ok": False, **_failure(exc, where)}
    if error:
        return {"ok": False, "error": f"{where} reported error: {error}", "artifacts": artifacts}
    if not passed:
        return {"ok": False, "error": f"{where} reported ok={result['ok']!r}", "artifacts": artifacts}
    return {"ok": True, "metrics": metrics, "artifacts": artifacts, "cascade_step": None}


def _failure(exc: BaseException, where: str) -> dict[str, Any]:
    return {"error": _describe(exc, where), "artifacts": {"traceback": _traceback_tail(exc)}}


def _case_ids(module: Any) -> dict[str, Any]:
    """``cases()`` keyed by ``str(id)``; ids must be JSON-able ints or strings, unique as strings."""
    ids = list(_call(module.cases))
    for case in ids:
        if isinstance(case, bool) or not isinstance(case, numbers.Integral | str):
            kind = type(case).__name__
            raise ResultError(f"returned a case id {case!r} of type {kind}, expected int or str")
    keyed = {str(case): case for case in ids}
    if len(keyed) != len(ids):
        raise ResultError("returned case ids that are equal as strings")
    return keyed


def _list_cases(args: argparse.Namespace) -> dict[str, Any]:
    where = "loading evaluator.py"
    try:
        module = _load_evaluator(args.evaluator)
        where = "cases()"
        return {"ok": True, "cases": list(_case_ids(module))}
    except BaseException as exc:  # noqa: BLE001 - reported, not raised
        return {"ok": False, **_failure(exc, where)}


def _stream_cases(args: argparse.Namespace, pipe: Any) -> None:
    """Evaluate each case of the cases file in order, writing one flushed JSON line per case."""

    def emit(record: dict[str, Any]) -> None:
        pipe.write(json.dumps(record, default=str).encode("utf-8") + b"\n")
        pipe.flush()

    where = "reading the cases file"
    try:
        with open(args.cases_file, encoding="utf-8") as handle:
            order = [str(case) for case in json.load(handle)]
        os.remove(args.cases_file)
        where = "loading evaluator.py"
        module = _load_evaluator(args.evaluator)
        where = "cases()"
        known = _case_ids(module)
        unknown = [case for case in order if case not in known]
        if unknown:
            raise ResultError(f"does not list the requested case ids {unknown[:5]}")
    except BaseException as exc:  # noqa: BLE001 - reported, not raised
        emit({"done": True, **_failure(exc, where), "cpu_s": _cpu_seconds()})
        return
    for case in order:
        try:
            metrics, artifacts = _split_result(_call(module.evaluate_case, args.program, known[case]))
        except BaseException as exc:  # noqa: BLE001 - SystemExit etc. are candidate failures
            emit({"case": case, **_failure(exc, f"evaluate_case({case!r})")})
            break
        emit({"case": case, "metrics": metrics, "artifacts": artifacts})
    emit({"done": True, "cpu_s": _cpu_seconds()})


def _export_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Put the level, its data fraction and the parameter values where the evaluator reads them."""
    os.environ["EVOFORGE_LEVEL"] = args.level
    if args.data_fraction is not None:
        os.environ["EVOFORGE_DATA_FRACTION"] = repr(args.data_fraction)
    if args.params_file:
        with open(args.params_file, encoding="utf-8") as handle:
            text = handle.read()
        os.remove(args.params_file)
        params = json.loads(text)
        if not isinstance(params, dict):
            raise ValueError(f"{args.params_file} must hold a JSON object of parameter values")
        os.environ["EVOFORGE_PARAMS"] = text
        return params
    return {}


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its children that were waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--evaluator", required=True)
    parser.add_argument("--program", required=True)
    parser.add_argument("--level", default="full")
    parser.add_argument("--level-aware", action="store_true")
    parser.add_argument("--data-fraction", type=float)
    parser.add_argument("--params-file", help="a JSON object of parameter values (deleted once read)")
    parser.add_argument("--params-aware", action="store_true")
    parser.add_argument("--cascade", action="store_true")
    parser.add_argument("--thresholds", default="")
    parser.add_argument("--list-cases", action="store_true")
    parser.add_argument("--cases-file")
    parser.add_argument("--function", help="run this quick-test function instead of evaluate()")
    return parser


def warm_up() -> None:
    """Do once what every run does first (argument parsing, JSON), so a fork server's children
    inherit it done: the regular expressions and encoders these build on first use."""
    _parser().parse_args(["--evaluator", "e.py", "--program", "p.py", "--level", "full",
                          "--thresholds", "0.5", "--data-fraction", "0.5"])
    _split_result({"score": 1.0, "note": "text"})
    json.dumps({"ok": True, "metrics": {"score": 1.0}, "artifacts": {}, "cpu_s": _cpu_seconds()}, default=str)
    json.loads('{"a": [1, 2.5, "x"]}')
    traceback.format_exception(ValueError("warm-up"))


def main(argv: list[str] | None = None) -> None:
    """Evaluate one program (or list or stream its cases) into the result pipe, then exit at once."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    args = _parser().parse_args(argv)
    args.params = _export_settings(args)  # the host wrote them: a failure is evoforge's bug
    fd = int(os.environ.pop("EVOFORGE_RESULT_FD"))
    os.set_inheritable(fd, False)
    with os.fdopen(fd, "wb") as pipe:
        if args.cases_file:
            _stream_cases(args, pipe)
        else:
            if args.list_cases:
                report = _list_cases(args)
            else:
                report = _quick_test(args) if args.function else _evaluate(args)
            report["cpu_s"] = _cpu_seconds()
            pipe.write(json.dumps(report, default=str).encode("utf-8"))
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    os._exit(0)  # don't wait for threads or atexit hooks the candidate left behind


if __name__ == "__main__":
    main()
