"""Stage-owned data on a node: each stage that keeps data of its own declares a dataclass for it,
and the node holds one instance per owner in `node.owned`. How the data is copied, stored and
read back is derived from the dataclass's field types, so a new stage's data needs no edit of
the node, the node database or the copy.

    >>> from dataclasses import dataclass, field
    >>> @dataclass
    ... class Notes(NodeData, owner="doctest_notes"):
    ...     seen: int = 0
    ...     tags: list[str] = field(default_factory=list)
    >>> owned = {}
    >>> Notes.of(owned).tags.append("first")
    >>> copied = copy_owned(owned)
    >>> copied["doctest_notes"].tags.append("second")
    >>> owned["doctest_notes"].tags, copied["doctest_notes"].tags
    (['first'], ['first', 'second'])
    >>> dump_owned(copied)
    '{"doctest_notes": {"seen": 0, "tags": ["first", "second"]}}'
    >>> load_owned(dump_owned(copied))["doctest_notes"]
    Notes(seen=0, tags=['first', 'second'])
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import MutableMapping
from typing import Any, ClassVar, TypeVar

_OWNERS: dict[str, type[NodeData]] = {}
T = TypeVar("T", bound="NodeData")


class NodeData:
    """Base of one owner's data on a node: subclass it as a dataclass whose fields all have
    defaults, naming the owner (the stage's name): ``class DebugData(NodeData, owner="debug")``."""

    owner: ClassVar[str]

    def __init_subclass__(cls, owner: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if owner is None:
            raise TypeError(f"{cls.__name__} must name its owner: class {cls.__name__}(NodeData, owner=...)")
        known = _OWNERS.get(owner)
        if known is not None and known.__qualname__ != cls.__qualname__:
            raise TypeError(f"node data owner '{owner}' is taken by {known.__qualname__}")
        cls.owner = owner
        _OWNERS[owner] = cls

    @classmethod
    def of(cls: type[T], node: Any) -> T:
        """This owner's data on `node` (or in an `owned` mapping), attached with its defaults when
        absent: the one to change."""
        owned: MutableMapping[str, Any] = getattr(node, "owned", node)
        data = owned.get(cls.owner)
        if isinstance(data, cls):
            return data
        data = cls(**_known_fields(cls, data)) if isinstance(data, dict) else cls()
        owned[cls.owner] = data
        return data

    @classmethod
    def peek(cls: type[T], node: Any) -> T:
        """This owner's data on `node` (or in an `owned` mapping) for reading: nothing is attached
        (its defaults when absent)."""
        owned: MutableMapping[str, Any] = getattr(node, "owned", node)
        data = owned.get(cls.owner)
        if isinstance(data, cls):
            return data
        return cls(**_known_fields(cls, data)) if isinstance(data, dict) else cls()


def owner_types() -> dict[str, type[NodeData]]:
    """Every registered owner and its data type."""
    return dict(_OWNERS)


def _known_fields(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def copy_value(value: Any) -> Any:
    """A copy no one else shares: a dataclass with its containers copied (by its field types), a
    container copied, anything else as it is (immutable)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fresh = dataclasses.replace(value)
        for name in container_fields(type(value)):
            setattr(fresh, name, copy.copy(getattr(value, name)))
        return fresh
    if isinstance(value, (list, dict, set)):
        return copy.copy(value)
    return value


def copy_owned(owned: dict[str, Any]) -> dict[str, Any]:
    """A private copy of a node's owned data."""
    return {owner: copy_value(data) for owner, data in owned.items()}


_CONTAINERS: dict[type, tuple[str, ...]] = {}


def container_fields(cls: type) -> tuple[str, ...]:
    """The fields of dataclass `cls` whose declared type is a list, dict or set (copied by copy)."""
    if cls not in _CONTAINERS:
        _CONTAINERS[cls] = tuple(f.name for f in dataclasses.fields(cls) if is_container_type(f.type))
    return _CONTAINERS[cls]


def is_container_type(annotation: Any) -> bool:
    """True for a list, dict or set annotation (a string under postponed evaluation, or a type)."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    return str(text).split("[", 1)[0].strip() in ("list", "dict", "set")


def dump_owned(owned: dict[str, Any]) -> str:
    """The owned data as JSON: each dataclass as its fields, anything else as it is."""
    return json.dumps({owner: dataclasses.asdict(data) if dataclasses.is_dataclass(data) else data
                       for owner, data in owned.items()}, default=str)


def load_owned(text: str | None) -> dict[str, Any]:
    """Owned data as `dump_owned` wrote it (see `owned_from`)."""
    return owned_from(json.loads(text) if text else {})


def owned_from(raw: dict[str, Any]) -> dict[str, Any]:
    """Owned data from its decoded JSON: a registered owner's as its dataclass, an unknown owner's
    (a stage this process did not load) as the plain dict, kept and written back as is."""
    out: dict[str, Any] = {}
    for owner, data in raw.items():
        cls = _OWNERS.get(owner)
        out[owner] = cls(**_known_fields(cls, data)) if cls is not None and isinstance(data, dict) else data
    return out
