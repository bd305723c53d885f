"""Tunable values of a candidate program: ``knob(name, default, ...)`` reads the value evoforge chose.

A knob declares one tunable number or choice inside an EVOLVE block; evoforge reads the
declarations from the source (``stages/tuning/param_space.py``), picks values, and the sandbox harness
hands them to the program as the JSON object in ``EVOFORGE_PARAMS``. Without a value for the
knob (or outside evoforge) the default is used. Stdlib only: the sandbox child imports it. ::

    C = knob("C", 1.0, low=1e-3, high=1e3, log=True)
    kernel = knob("kernel", "rbf", choices=["rbf", "poly"])
    depth = knob("depth", 3, low=1, high=12)  # an int default makes an int knob

Programs import it with a fallback so that they also run standalone::

    try:
        from evoforge_knobs import knob
    except ImportError:  # run outside evoforge: every knob takes its default
        def knob(name, default, **_):
            return default
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from typing import Any

PARAMS_ENV = "EVOFORGE_PARAMS"


class KnobError(ValueError):
    """A knob declared inconsistently, or given a value its declaration does not allow."""


def knob(
    name: str,
    default: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    log: bool = False,
    choices: Sequence[Any] | None = None,
) -> Any:
    """The value evoforge chose for knob ``name``, else ``default``; int knobs return an int."""
    _check_declaration(name, default, low, high, log, choices)
    params = current_params()
    if name not in params:
        return default
    value = params[name]
    if choices is not None or isinstance(default, bool | str):
        allowed = list(choices) if choices is not None else [False, True]
        if value not in allowed or isinstance(value, bool) != isinstance(default, bool):
            raise KnobError(f"knob {name!r}: value {value!r} is not one of {allowed!r}")
        return value
    if not _is_number(value) or not math.isfinite(value):
        raise KnobError(f"knob {name!r}: value {value!r} is not a finite number")
    if (low is not None and value < low) or (high is not None and value > high):
        raise KnobError(f"knob {name!r}: value {value!r} is outside [{low}, {high}]")
    return round(value) if isinstance(default, int) else float(value)


def current_params() -> dict[str, Any]:
    """The parameter values of this evaluation (``EVOFORGE_PARAMS``), empty when none were given."""
    text = os.environ.get(PARAMS_ENV, "")
    if not text:
        return {}
    params = json.loads(text)
    if not isinstance(params, dict):
        raise KnobError(f"{PARAMS_ENV} must hold a JSON object, got {type(params).__name__}")
    return params


def _check_declaration(
    name: str, default: Any, low: float | None, high: float | None, log: bool,
    choices: Sequence[Any] | None,
) -> None:
    if not isinstance(name, str) or not name:
        raise KnobError(f"knob name must be a non-empty string, got {name!r}")
    if choices is not None:
        if isinstance(choices, str) or not list(choices):
            raise KnobError(f"knob {name!r}: choices must be a non-empty list, got {choices!r}")
        if default not in list(choices):
            raise KnobError(f"knob {name!r}: default {default!r} is not one of {list(choices)!r}")
        return
    if isinstance(default, bool | str):
        if isinstance(default, str):
            raise KnobError(f"knob {name!r}: a text default needs choices=[...]")
        return
    if not _is_number(default):
        raise KnobError(f"knob {name!r}: default {default!r} is not a number (give choices=[...])")
    for label, bound in (("low", low), ("high", high)):
        if bound is not None and not _is_number(bound):
            raise KnobError(f"knob {name!r}: {label} {bound!r} is not a number")
    if low is not None and high is not None and low > high:
        raise KnobError(f"knob {name!r}: low {low!r} is above high {high!r}")
    if not (low is None or low <= default) or not (high is None or default <= high):
        raise KnobError(f"knob {name!r}: default {default!r} is outside [{low}, {high}]")
    if log and (low is None or low <= 0):
        raise KnobError(f"knob {name!r}: log=True needs a positive low bound, got {low!r}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
