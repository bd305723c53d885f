"""One line for a config that does not validate: where the bad key came from, and a "did you mean".

Example::

    describe(err, RunConfig, "c.yaml", {})   # "c.yaml: unknown key 'budget.max_evls' (did you mean
                                             #  'budget.max_evals'?)"
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError


def _unwrap(annotation: Any) -> Any:
    """`X` of `X | None`; anything else unchanged."""
    if get_origin(annotation) in (Union, UnionType):
        kept = [a for a in get_args(annotation) if a is not type(None)]
        return kept[0] if len(kept) == 1 else annotation
    return annotation


def _section(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The config section at `loc` (list items and dict values stepped into), if there is one."""
    model: Any = root
    for part in loc:
        if isinstance(model, type) and issubclass(model, BaseModel):
            field = model.model_fields.get(str(part))
            model = _unwrap(field.annotation) if field is not None else None
        else:
            args = get_args(model)
            model = _unwrap(args[-1]) if args else None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _dotted_keys(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every key of the config, dotted (`budget.max_evals`), sections included."""
    for name, field in model.model_fields.items():
        yield prefix + name
        inner = _unwrap(field.annotation)
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            yield from _dotted_keys(inner, f"{prefix}{name}.")


def did_you_mean(root: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """A "did you mean" for an unknown key: a close key of its section, else the key of that
    name in another section (`max_evals` at the top level: `budget.max_evals`)."""
    parent, name = loc[:-1], str(loc[-1])
    section = _section(root, parent)
    prefix = "".join(f"{p}." for p in parent)
    close = difflib.get_close_matches(name, list(section.model_fields) if section else [], n=1)
    if close:
        return f" (did you mean '{prefix}{close[0]}'?)"
    elsewhere = [k for k in _dotted_keys(root) if k.rsplit(".", 1)[-1] == name]
    return f" (did you mean '{elsewhere[0]}'?)" if len(elsewhere) == 1 and not parent else ""


def describe(err: ValidationError, root: type[BaseModel], source: str | None,
             origins: Mapping[str, str]) -> str:
    """One line for the first error of validating `root` (unknown keys first: they explain a
    missing one), naming the flag or variable in `origins` that set the key, else the file
    `source` (if any) and the key."""
    first = sorted(err.errors(), key=lambda e: e["type"] != "extra_forbidden")[0]
    loc = tuple(first["loc"])
    where = ".".join(str(p) for p in loc)
    in_file = f"{source}: " if source else ""
    if first["type"] == "extra_forbidden":
        return f"{origins.get(where, source or 'config')}: unknown key '{where}'{did_you_mean(root, loc)}"
    msg = first["msg"].removeprefix("Value error, ")
    if where in origins:  # (a secret's value is never echoed)
        got = "" if "api_key" in where else f" (got {first.get('input')!r})"
        return f"{origins[where]}: {msg}{got}"
    return f"{in_file}{where or '(top level)'}: {msg}"
