"""Load a task folder (evoforge ``task.yaml`` and/or an OpenEvolve example) into a ``Task``.

A task folder holds the program (with one EVOLVE-BLOCK-START/END pair), ``evaluator.py``
defining ``evaluate(program_path)``, and optionally:

- ``task.yaml`` (ours, strict; validated by ``task_yaml.py``): ``name``, ``program``,
  ``description``, ``timeout_s``, ``objective: {metric, direction}``, ``cascade``,
  ``cascade_thresholds``, ``cases`` (``false`` evaluates a case-based evaluator as a plain one),
  ``constraints: {required_names, forbidden_imports}`` (checked statically on every candidate),
  ``quick_test: {function, timeout_s}`` (a cheap evaluator function run before the full
  evaluation), ``levels`` (below), ``kind`` (``program``, the default, or ``files``) and
  ``files`` (a ``files`` task's evolvable files: the artifact is those files, packed by
  ``infra/artifacts/bundle.py``; ``evaluate`` then receives the folder, and ``program_name`` is
  empty) and ``task_model`` (``true``: the sandboxed evaluator or candidate may call the run's
  task model, ``from evoforge_channel import llm``; evaluators/task_model_link.py). Any other key
  is an error that names it.
- ``config.yaml`` (OpenEvolve's, lenient): only ``evaluator.timeout`` -> ``timeout_s``,
  ``evaluator.cascade_evaluation`` -> ``cascade``, ``evaluator.cascade_thresholds`` ->
  ``cascade_thresholds``, ``prompt.system_message`` -> ``description``,
  ``database.feature_dimensions`` -> ``feature_dimensions`` (left out of the fitness mean,
  OpenEvolve's default ``complexity, diversity``) and ``language`` are read; every other key
  (``llm``, ``max_iterations``, ...) belongs to OpenEvolve and is ignored.

The program is ``initial_program.py``, else the one ``initial_program.<ext>`` (any language:
``.rs``, ``.r``, ``.c``, ...; its EVOLVE markers sit in comments, ``// EVOLVE-BLOCK-START``),
else the one ``.py`` file with EVOLVE markers. Its language (``Task.language``) comes from
``config.yaml``'s ``language`` or the file's extension; only a Python program is parsed and
checked as Python -- any other is compiled and run by the task's evaluator. The command-line tools
the evaluator names (``cargo``, ``Rscript``) are looked up when the task is loaded
(``Task.toolchain``, compat/toolchains.py): one behind a folder the sandbox's uid cannot enter
(rustup's under ``/root``) is exposed to the sandboxed evaluation, its folder first on ``PATH``.
When ``task.yaml`` names no ``objective.metric`` the score follows OpenEvolve (``evaluators/fitness.py``):
``combined_score``, else the mean of the numeric metrics.

``levels`` names the evaluation levels of a level-aware evaluator (``evaluate(program_path,
level=...)``), in the order ``pilot``, ``full``, ``final``; ``full`` is required::

    levels:
      pilot: {data_fraction: 0.1}   # the search level: a fraction of the training data
      full: {}                      # all training data
      final: {}                     # held-out data; only the final report runs it

Without ``levels`` a task has the one level ``full``. A gated task (one with ``pilot``) searches
on ``pilot`` and evaluates promising candidates on ``full``; the harness hands the level (and its
``data_fraction``) to the evaluator. Levels need a plain ``evaluate`` (no cascade, no cases).

``task.yaml`` wins over ``config.yaml``. Cascade is on when ``evaluate_stage1`` exists and no
config turns it off (OpenEvolve's default), with OpenEvolve's default thresholds (0.5, 0.75, 0.9)
when none are given; without ``evaluate_stage1`` OpenEvolve evaluates directly, and so do we.
A task is case-based (``evaluators/cases.py``) when ``evaluator.py`` also defines ``cases()`` and
``evaluate_case(program_path, case)`` and ``task.yaml`` does not say ``cases: false``.
The evaluator is inspected by parsing it, never by importing it; ``evaluate`` may also take a
``params`` keyword (``Task.params_aware``), the knob values of the candidate. Example::

    task = load_task("circle_packing")
    task.better(2.1, 1.9)  # True: the objective is maximised
    task.search_level  # "full": circle_packing declares no pilot level
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from evoforge.evaluators.compat.toolchains import ToolchainAccess, ToolchainError, toolchain_access
from evoforge.evaluators.evaluator_source import evaluator_functions, parse_source, top_level_statements
from evoforge.evaluators.task_yaml import (
    DEFAULT_LEVELS,
    DIRECTIONS,
    EVALUATOR,
    OPENEVOLVE_CONFIG,
    QUICK_TEST_TIMEOUT_S,
    TASK_YAML,
    Constraints,
    EvalLevel,
    QuickTest,
    TaskError,
    one_line,
    read_openevolve_config,
    read_task_yaml,
)
from evoforge.evaluators.text_seed import read_text_seed
from evoforge.infra.artifacts import ArtifactKind, kind_class, make_kind
from evoforge.infra.evolve_block import END_MARKER, START_MARKER

__all__ = [
    "DIRECTIONS", "EVALUATOR", "OPENEVOLVE_CONFIG", "QUICK_TEST_TIMEOUT_S", "TASK_YAML",
    "Constraints", "EvalLevel", "QuickTest", "Task", "TaskError", "builtin_task_names",
    "builtin_tasks_dir", "language_of", "load_task", "top_level_statements",
]
PROGRAM_STEM = "initial_program"
DEFAULT_PROGRAM = f"{PROGRAM_STEM}.py"
OPENEVOLVE_FEATURES = ("complexity", "diversity")  # OpenEvolve's default database.feature_dimensions
LANGUAGES = {
    ".py": "python", ".rs": "rust", ".r": "r", ".c": "c", ".h": "c", ".cpp": "cpp", ".cc": "cpp",
    ".cu": "cuda", ".js": "javascript", ".ts": "typescript", ".go": "go", ".java": "java",
    ".jl": "julia", ".sh": "bash", ".metal": "metal", ".txt": "text", ".md": "text",
}
OPENEVOLVE_THRESHOLDS = (0.5, 0.75, 0.9)
TASK_MODEL_FUNCTIONS = ("cases", "run", "metric")  # a text task's evaluator (feedback optional)
TASK_MODEL_KINDS = ("text", "playbook")  # the built-in kinds run by a task model (the report's; a
# kind says so itself: ArtifactKind.runs_on_task_model)


@dataclass(frozen=True)
class Task:
    """An evolvable program, how to evaluate it, and what to optimise."""

    name: str
    root: Path
    program_name: str
    initial_code: str
    evaluator_path: Path
    objective: str = "combined_score"
    direction: str = "maximize"
    description: str = ""
    timeout_s: float = 60.0
    cascade: bool = False
    cascade_thresholds: tuple[float, ...] = ()
    level_aware: bool = False
    params_aware: bool = False
    case_based: bool = False
    sources: tuple[str, ...] = ()
    constraints: Constraints = field(default_factory=Constraints)
    quick_test: QuickTest | None = None
    levels: tuple[EvalLevel, ...] = DEFAULT_LEVELS
    objective_declared: bool = False  # task.yaml names objective.metric: no OpenEvolve fallback
    feature_dimensions: tuple[str, ...] = OPENEVOLVE_FEATURES
    language: str = "python"
    kind: str = "program"  # the artifact kind (infra/artifacts/): program, files
    files: tuple[str, ...] = ()  # a files task's evolvable files
    calls_task_model: bool = False  # task.yaml task_model: its sandboxed evaluations may call it
    toolchain: ToolchainAccess = ToolchainAccess()  # tools behind closed folders (compat/toolchains.py)

    @property
    def is_python(self) -> bool:
        """True when the artifact is one Python program (parsed and checked statically as one)."""
        return self.kind == "program" and self.language == "python"

    @property
    def uses_task_model(self) -> bool:
        """True when candidates are scored by running them with a task model (a `text` task):
        in the run's process, on the cases of the evaluator's splits, not in the sandbox."""
        return kind_class(self.kind).runs_on_task_model

    @property
    def needs_task_model(self) -> bool:
        """True when the run must reach a task model: a text task's, or the one a program or files
        task's sandboxed evaluations call (``task_model: true``, evaluators/task_model_link.py)."""
        return self.uses_task_model or self.calls_task_model

    @cached_property
    def artifact(self) -> ArtifactKind:
        """The task's artifact kind: how its candidates are shown, edited, diffed and written."""
        return make_kind(self.kind, language=self.language, program_name=self.program_name,
                         files=self.files)

    def better(self, a: float, b: float) -> bool:
        """True when score ``a`` beats score ``b`` under the task's direction."""
        return a < b if self.direction == "minimize" else a > b

    @property
    def gated(self) -> bool:
        """True when the task declares a ``pilot`` level to search on."""
        return any(s.name == "pilot" for s in self.levels)

    @property
    def search_level(self) -> str:
        """The level candidates are scored on during the search: ``pilot`` if declared, else ``full``."""
        return "pilot" if self.gated else "full"

    @property
    def has_final(self) -> bool:
        """True when the task declares a held-out ``final`` level."""
        return any(s.name == "final" for s in self.levels)

    def level(self, name: str) -> EvalLevel:
        """The declared level called ``name``; KeyError naming the declared ones otherwise."""
        for declared in self.levels:
            if declared.name == name:
                return declared
        known = ", ".join(s.name for s in self.levels)
        raise KeyError(f"task '{self.name}' declares no level '{name}' (levels: {known})")


def builtin_tasks_dir() -> Path:
    """The folder holding the built-in tasks."""
    return Path(__file__).resolve().parent / "tasks"


def builtin_task_names() -> list[str]:
    """Names of the built-in tasks, sorted."""
    root = builtin_tasks_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / EVALUATOR).is_file())


def load_task(spec: str | os.PathLike[str], registry_uri: str | None = None) -> Task:
    """Load a task from a folder path or a built-in name such as ``"circle_packing"``; a seed
    prompt or playbook named ``prompts:/NAME@ALIAS`` (or ``prompts:/NAME/VERSION``) is read from
    the MLflow registry at `registry_uri` (the workspace's store)."""
    root = _resolve(spec)
    ours = read_task_yaml(root)
    theirs = read_openevolve_config(root)
    settings = {**(theirs or {}), **(ours or {})}
    evaluator_path = root / EVALUATOR
    kind = settings.get("kind", "program")
    artifact, files = kind_class(kind), ()  # the kind owns its keys and reads its seed
    on_model = artifact.runs_on_task_model
    if on_model and "task_model" in settings:
        raise TaskError(f"{TASK_YAML}: 'task_model' is for kinds program and files (a {kind} task is "
                        f"always run by its task model)")
    required = TASK_MODEL_FUNCTIONS if on_model else ("evaluate",)
    functions = evaluator_functions(evaluator_path, required)
    names = artifact.seed_files(settings) or (_find_program(root),)
    if on_model:
        program_name, language = names[0], "text"
        program_name, initial_code = read_text_seed(root, program_name, kind, registry_uri)
        functions.setdefault("evaluate", ())
    else:
        language = settings.get("language") or language_of(names[0])
        program_name, files = (names[0], ()) if artifact.seed_key is not None else ("", names)
        initial_code = _read_seed(artifact, root, names, language)

    has_stage1 = "evaluate_stage1" in functions
    if ours and ours.get("cascade") and not has_stage1:
        raise TaskError(f"{TASK_YAML}: cascade is true but {EVALUATOR} defines no evaluate_stage1")
    cascade = has_stage1 and settings.get("cascade", True)  # OpenEvolve: no stage1, no cascade
    has_cases = {"cases", "evaluate_case"} <= functions.keys() or on_model
    if ours and ours.get("cases") and not has_cases:
        raise TaskError(f"{TASK_YAML}: cases is true but {EVALUATOR} lacks cases() or evaluate_case()")
    case_based = has_cases and settings.get("cases", True)
    quick_test = settings.get("quick_test")
    if quick_test is not None and quick_test.function not in functions:
        raise TaskError(f"{TASK_YAML}: quick_test.function '{quick_test.function}' is not defined "
                        f"at the top level of {EVALUATOR}")
    level_aware = "level" in functions["evaluate"]
    if "stage" in functions["evaluate"] and not level_aware:
        raise TaskError(f"{EVALUATOR}: evaluate(program_path, stage=...) is now evaluate(program_path, "
                        f"level=...) (pilot, full and final are evaluation levels)")
    levels = settings.get("levels", DEFAULT_LEVELS)
    _check_levels(levels, level_aware, cascade, case_based)
    thresholds = tuple(settings.get("cascade_thresholds") or OPENEVOLVE_THRESHOLDS)
    objective = settings.get("objective", {})
    try:
        toolchain = (ToolchainAccess() if on_model
                     else toolchain_access(evaluator_path, language))
    except ToolchainError as exc:
        raise TaskError(f"{EVALUATOR}: {exc}") from None
    sources = []
    if ours is not None:
        sources.append(TASK_YAML)
    if theirs is not None:
        sources.append(f"{OPENEVOLVE_CONFIG} (OpenEvolve, mapped)")
    return Task(
        name=settings.get("name", root.name),
        root=root,
        program_name=program_name,
        initial_code=initial_code,
        evaluator_path=evaluator_path,
        objective=objective.get("metric", "combined_score"),
        direction=objective.get("direction", "maximize"),
        description=settings.get("description", ""),
        timeout_s=float(settings.get("timeout_s", 60.0)),
        cascade=cascade,
        cascade_thresholds=thresholds if cascade else (),
        level_aware=level_aware,
        params_aware="params" in functions["evaluate"],
        case_based=case_based,
        sources=tuple(sources),
        constraints=settings.get("constraints", Constraints()),
        quick_test=quick_test,
        levels=levels,
        objective_declared="metric" in objective,
        feature_dimensions=tuple(settings.get("feature_dimensions", OPENEVOLVE_FEATURES)),
        language=language,
        kind=kind,
        files=tuple(files),
        calls_task_model=settings.get("task_model", False),
        toolchain=toolchain,
    )


def language_of(program_name: str) -> str:
    """The language of a program file, from its extension (the extension itself when unknown)."""
    suffix = Path(program_name).suffix.lower()
    return LANGUAGES.get(suffix, suffix.lstrip(".") or "text")


def _check_levels(levels: tuple[EvalLevel, ...], level_aware: bool, cascade: bool, cases: bool) -> None:
    """Levels beyond ``full`` need a plain evaluator that takes the level."""
    if levels == DEFAULT_LEVELS:
        return
    names = ", ".join(s.name for s in levels)
    if not level_aware:
        raise TaskError(f"{TASK_YAML}: levels ({names}) need a level-aware evaluator: "
                        f"{EVALUATOR} must define evaluate(program_path, level=...)")
    if cascade or cases:
        kind = "a cascade (evaluate_stage1)" if cascade else "cases (cases/evaluate_case)"
        raise TaskError(f"{TASK_YAML}: levels ({names}) cannot be combined with {kind}; "
                        f"levels are evaluated by evaluate(program_path, level=...)")


def _resolve(spec: str | os.PathLike[str]) -> Path:
    path = Path(spec).expanduser()
    if path.is_dir():
        return path.resolve()
    if path.exists():
        raise TaskError(f"task path '{spec}' is a file, expected a task folder")
    if isinstance(spec, str) and spec in builtin_task_names():
        return builtin_tasks_dir() / spec
    known = ", ".join(builtin_task_names()) or "none"
    raise TaskError(
        f"task '{spec}' not found: no such folder and no built-in task of that name "
        f"(built-ins: {known})"
    )


def _find_program(root: Path) -> str:
    if (root / DEFAULT_PROGRAM).is_file():
        return DEFAULT_PROGRAM
    named = sorted(p.name for p in root.glob(f"{PROGRAM_STEM}.*") if p.is_file())
    if len(named) == 1:
        return named[0]
    if len(named) > 1:
        raise TaskError(f"several {PROGRAM_STEM}.* files in {root} ({', '.join(named)}); "
                        f"name one with 'program' in {TASK_YAML}")
    candidates = sorted(
        p.name for p in root.glob("*.py") if p.name != EVALUATOR and _has_marker(p)
    )
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise TaskError(
            f"no program in {root}: expected {DEFAULT_PROGRAM} or one .py file with "
            f"{START_MARKER}/{END_MARKER} markers"
        )
    raise TaskError(
        f"several programs with EVOLVE markers in {root} ({', '.join(candidates)}); "
        f"name one with 'program' in {TASK_YAML}"
    )


def _has_marker(path: Path) -> bool:
    try:
        return START_MARKER in path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False


def _read_seed(artifact: type[ArtifactKind], root: Path, names: tuple[str, ...], language: str) -> str:
    """The initial artifact, read by its kind; a one-file Python seed is parsed as Python too."""
    try:
        code = artifact.read_seed(root, names)
    except ValueError as exc:
        raise TaskError(one_line(exc)) from None
    if language == "python" and artifact.seed_key is not None:
        parse_source(code, names[0])
    return code
