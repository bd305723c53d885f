"""Structural moves of the scikit-learn pipeline an EVOLVE block builds with ``make_pipeline(...)``.

A move swaps the final estimator, adds, removes or replaces a preprocessing step, or wraps the
estimator in (or unwraps it from) a bagging ensemble. The numbers of a new step are declared as
``knob(...)`` calls so that Optuna tunes them; the steps that stay keep their source text and
their knob declarations, and declarations and block imports that nothing uses any more are
dropped. Only the ``make_pipeline`` call, the summary line of its function's docstring and the
block's top-level imports and knob declarations change; the text outside the block is untouched.

>>> program = (
...     "# EVOLVE-BLOCK-START\\n"
...     "from sklearn.pipeline import make_pipeline\\n"
...     "from sklearn.preprocessing import StandardScaler\\n"
...     "from sklearn.svm import SVC\\n\\n"
...     "def knob(name, default, **_):\\n"
...     "    return default\\n\\n"
...     "def build_model():\\n"
...     "    return make_pipeline(StandardScaler(), SVC())\\n"
...     "# EVOLVE-BLOCK-END\\n"
... )
>>> import random
>>> move = ml_move(program, random.Random(0))
>>> "make_pipeline(" in move.code and move.description != ""
True
>>> ml_move("# EVOLVE-BLOCK-START\\nx = 1\\n# EVOLVE-BLOCK-END\\n", random.Random(0)) is None
True
"""

from __future__ import annotations

import random
from dataclasses import replace

from evoforge.infra import pyast
from evoforge.infra.evolve_block import EditError, split_program
from evoforge.infra.offline.ml_catalogue import BAGGING, ESTIMATORS, TRANSFORMS, Kind
from evoforge.infra.offline.ml_pipeline import (
    SLOT,
    Pipeline,
    Step,
    bound_names,
    find_site,
    prune,
    read_pipeline,
    render,
)
from evoforge.infra.offline.mutation import Mutation

_MAX_PREPROCESSING = 3


_POLY, _PCA = "PolynomialFeatures", "PCA"


class _Names:
    """Knob names and variables not yet used by the program."""

    def __init__(self, taken: set[str]) -> None:
        self._taken = set(taken)

    def fresh(self, base: str) -> str:
        name, n = base, 2
        while name in self._taken or name.upper() in self._taken:
            name, n = f"{base}_{n}", n + 1
        self._taken |= {name, name.upper()}
        return name


def builds_pipeline(program: str) -> bool:
    """True when ``ml_move`` applies: the block calls ``make_pipeline(...)`` and the program uses ``knob``."""
    return find_site(program) is not None


def ml_move(program: str, rng: random.Random) -> Mutation | None:
    """A structural rewrite of the block's sklearn pipeline, or None (drawing nothing) when it has none."""
    site = find_site(program)
    if site is None:
        return None
    split = split_program(program)
    names = _Names(bound_names(pyast.parse(program)))
    pipe = read_pipeline(site)
    moves = list(_MOVES)
    first = rng.choices(moves, weights=[w for _, w in moves])[0]
    for move, _ in (first, *(m for m in moves if m != first)):
        result = move(pipe, rng, names)
        if result is not None:
            new, dropped = _legal(result[0])
            note = result[1] + dropped
            try:
                code = split.join(prune(split.head, render(site, new, program), split.tail, site.block))
                compile(code, "<ml move>", "exec")
            except SyntaxError as exc:
                raise EditError(f"ml move '{note}' produced code that does not compile: {exc}") from exc
            return Mutation(code=code, description=note)
    raise EditError("no structural move applies to the pipeline")


def _new_step(kind: Kind, names: _Names) -> Step:
    args, declarations, knob_names = [], [], []
    for knob in kind.knobs:
        name = names.fresh(f"{kind.prefix}_{knob.suffix}")
        declarations.append(f'{name.upper()} = knob("{name}", {knob.spec})')
        args.append(f"{knob.param}={knob.template.format(name.upper())}")
        knob_names.append(name)
    args += [kind.fixed] if kind.fixed else []
    inner = [f"estimator={SLOT}"] if kind is BAGGING else []
    return Step(kind.cls, f"{kind.cls}({', '.join(inner + args)})", tuple(declarations), tuple(knob_names))


def _knob_note(step: Step) -> str:
    return f" (knobs {', '.join(step.knob_names)})" if step.knob_names else ""


def _is_linear(pipe: Pipeline) -> bool:
    kind = pipe.final.kind
    return kind is not None and kind.linear


def _fits(kind: Kind, pre: tuple[Step, ...], pipe: Pipeline) -> bool:
    """A preprocessing kind may join ``pre``: its rank is free, and feature expansion is affordable."""
    taken = {s.kind.rank for s in pre if s.kind is not None}
    return kind.rank not in taken and (kind.cls != _POLY or _expansion_fits(pre, pipe))


def _expansion_fits(pre: tuple[Step, ...], pipe: Pipeline) -> bool:
    """Pairwise features (~n²/2 columns) stay cheap only after PCA, into one linear model."""
    return _is_linear(pipe) and pipe.ensemble is None and any(s.name == _PCA for s in pre)


def _legal(pipe: Pipeline) -> tuple[Pipeline, str]:
    """``pipe`` without a PolynomialFeatures step that it can no longer afford, and a note saying so."""
    rest = tuple(s for s in pipe.pre if s.name != _POLY)
    if len(rest) == len(pipe.pre) or _expansion_fits(rest, pipe):
        return pipe, ""
    return replace(pipe, pre=rest), f"; drop {_POLY}, which needs PCA before it and one linear model after it"


def _insert(pre: tuple[Step, ...], step: Step, rank: int) -> tuple[tuple[Step, ...], int]:
    index = next((i for i, s in enumerate(pre) if s.kind is not None and s.kind.rank > rank), len(pre))
    return (*pre[:index], step, *pre[index:]), index


def _swap(pipe: Pipeline, rng: random.Random, names: _Names) -> tuple[Pipeline, str] | None:
    options = [k for k in ESTIMATORS if k.cls != pipe.final.name and (pipe.ensemble is None or k.baggable)]
    kind = rng.choice(options)
    final = _new_step(kind, names)
    return replace(pipe, final=final), f"replace {pipe.final.name} with {kind.cls}{_knob_note(final)}"


def _add(pipe: Pipeline, rng: random.Random, names: _Names) -> tuple[Pipeline, str] | None:
    options = [k for k in TRANSFORMS if _fits(k, pipe.pre, pipe)]
    if len(pipe.pre) >= _MAX_PREPROCESSING or not options:
        return None
    step = _new_step(rng.choice(options), names)
    pre, index = _insert(pipe.pre, step, step.kind.rank)
    before = pre[index + 1].name if index + 1 < len(pre) else pipe.final.name
    return replace(pipe, pre=pre), f"add {step.name} before {before}{_knob_note(step)}"


def _remove(pipe: Pipeline, rng: random.Random, names: _Names) -> tuple[Pipeline, str] | None:
    if not pipe.pre:
        return None
    index = rng.randrange(len(pipe.pre))
    pre = (*pipe.pre[:index], *pipe.pre[index + 1 :])
    return replace(pipe, pre=pre), f"remove {pipe.pre[index].name} from the pipeline"


def _replace_step(pipe: Pipeline, rng: random.Random, names: _Names) -> tuple[Pipeline, str] | None:
    if not pipe.pre:
        return None
    index = rng.randrange(len(pipe.pre))
    old, rest = pipe.pre[index], (*pipe.pre[:index], *pipe.pre[index + 1 :])
    options = [k for k in TRANSFORMS if k.cls != old.name and _fits(k, rest, pipe)]
    if not options:
        return None
    step = _new_step(rng.choice(options), names)
    pre, _ = _insert(rest, step, step.kind.rank)
    return replace(pipe, pre=pre), f"replace {old.name} with {step.name}{_knob_note(step)}"


def _wrap(pipe: Pipeline, rng: random.Random, names: _Names) -> tuple[Pipeline, str] | None:
    baggable = pipe.final.kind is not None and pipe.final.kind.baggable
    if pipe.ensemble is not None or not baggable or any(s.name == _POLY for s in pipe.pre):
        return None
    ensemble = _new_step(BAGGING, names)
    note = f"wrap {pipe.final.name} in BaggingClassifier{_knob_note(ensemble)}"
    return replace(pipe, ensemble=ensemble), note


def _unwrap(pipe: Pipeline, rng: random.Random, names: _Names) -> tuple[Pipeline, str] | None:
    if pipe.ensemble is None:
        return None
    return replace(pipe, ensemble=None), f"unwrap {pipe.final.name} from its BaggingClassifier"


_MOVES = ((_swap, 0.40), (_add, 0.20), (_remove, 0.13), (_replace_step, 0.17), (_wrap, 0.05), (_unwrap, 0.05))


