"""One registry of named plug-in classes of one base (artifact kinds, samplers, algorithms, ...).

Classes arrive two ways, and the built-ins the same way as anyone's: from the modules that
installed packages advertise as Python entry points (group `evoforge.plugins`; this registry reads
the entry points whose name starts with its prefix, `kind.program` say, on first use), and from
plug-in files handed in by the run (`use_files`: the run's `--plugin` files, replacing the last
run's). Two classes under one name is a `RegistryError` naming both origins.

    >>> class Shape:
    ...     name = "shape"
    >>> class Square(Shape):
    ...     name = "square"
    >>> shapes = Registry("shape", Shape, prefix="shape", discover=False)
    >>> shapes.use_files([(Square, "square.py")])
    >>> list(shapes), shapes.origin("square")
    (['square'], 'square.py')
    >>> class Other(Shape):
    ...     name = "square"
    >>> try:
    ...     shapes.add(Other, "b.py")
    ... except RegistryError as exc:
    ...     print(exc)
    shape 'square' is defined twice: by square.py and by b.py
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator, MutableMapping
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType
from typing import Generic, TypeVar

GROUP = "evoforge.plugins"  # the entry-point group every plug-in package advertises its modules in
BUILT_IN = "built-in"  # the origin of evoforge's own classes
SELF = "evoforge"  # evoforge's own distribution

T = TypeVar("T")


class RegistryError(ValueError):
    """A plug-in class that cannot be registered: two under one name (the message names both
    origins), no name, or an entry point that does not load."""


def plugin_entry_points(prefix: str | None = None) -> list[EntryPoint]:
    """The entry points of group `evoforge.plugins` (those named `<prefix>.*` when given)."""
    found = entry_points(group=GROUP)
    return [ep for ep in found if prefix is None or ep.name.startswith(f"{prefix}.")]


def entry_point_origin(ep: EntryPoint) -> str:
    """Where an entry point comes from: `built-in` for evoforge's own, else its distribution."""
    dist = ep.dist.name if ep.dist is not None else "?"
    return BUILT_IN if dist == SELF else dist


def load_entry_point(ep: EntryPoint) -> ModuleType:
    """The module an entry point names; RegistryError (one line) when it does not import."""
    try:
        module = ep.load()
    except Exception as exc:  # the plug-in's own error, named in one line
        raise RegistryError(f"plug-in {ep.value} ({entry_point_origin(ep)}, entry point {ep.name}): "
                            f"cannot load it ({type(exc).__name__}: {exc})") from exc
    if not isinstance(module, ModuleType):
        raise RegistryError(f"plug-in entry point {ep.name} ({entry_point_origin(ep)}): {ep.value} is "
                            f"not a module")
    return module


def defined_classes(module: ModuleType, base: type) -> list[type]:
    """The concrete subclasses of `base` that `module` itself defines, in source order (the order
    of the module's namespace: no source is parsed, so no thread meets Python 3.11's AST race); a
    subclass that keeps the name of the class it extends is a variant its module uses, not one more
    plug-in."""
    return [cls for cls in vars(module).values()
            if inspect.isclass(cls) and issubclass(cls, base) and cls is not base
            and cls.__module__ == module.__name__ and not inspect.isabstract(cls)
            and ("name" in vars(cls) or not hasattr(cls, "name"))]


class Registry(MutableMapping[str, type[T]], Generic[T]):
    """Named classes of one base: a mapping name -> class, with each one's origin."""

    def __init__(self, what: str, base: type[T], prefix: str, discover: bool = True,
                 first: str | None = None) -> None:
        self.what, self.base, self.prefix, self.first = what, base, prefix, first  # first: listed first
        self._classes: dict[str, type[T]] = {}
        self._origins: dict[str, str] = {}
        self._from_files: set[str] = set()
        self._discovered = not discover

    def add(self, cls: type[T], origin: str) -> None:
        """Register `cls` under its `name`; the same class again is no change."""
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name:
            raise RegistryError(f"{self.what} {cls.__name__} ({origin}) sets no name")
        known = self._classes.get(name)
        if known is cls:
            return
        if known is not None:
            raise RegistryError(f"{self.what} '{name}' is defined twice: by {self._origins[name]} "
                              f"and by {origin}")
        self._classes[name], self._origins[name] = cls, origin

    def use_files(self, found: Iterable[tuple[type[T], str]]) -> None:
        """The classes of the run's plug-in files, in place of the last run's."""
        self._discover()
        for name in self._from_files:
            del self._classes[name], self._origins[name]
        self._from_files = set()
        for cls, origin in found:
            before = set(self._classes)
            self.add(cls, origin)
            self._from_files |= set(self._classes) - before

    def origin(self, name: str) -> str:
        """Where the class registered as `name` comes from (built-in, a distribution, a file)."""
        self._discover()
        return self._origins[name]

    def unknown(self, name: str) -> str:
        """The one-line message for a name nothing registered, listing the known ones."""
        known = ", ".join(self) or f"none: no {GROUP} entry points, reinstall evoforge"
        return f"unknown {self.what} '{name}' ({self.what}s: {known})"

    def __getitem__(self, name: str) -> type[T]:
        self._discover()
        return self._classes[name]

    def __iter__(self) -> Iterator[str]:
        self._discover()
        names = list(self._classes)
        if self.first in names:
            names.remove(self.first)
            names.insert(0, self.first)
        return iter(names)

    def __len__(self) -> int:
        self._discover()
        return len(self._classes)

    def __setitem__(self, name: str, cls: type[T]) -> None:
        """Register a class made in code (a test's) under `name`."""
        self._discover()
        if getattr(cls, "name", name) != name:
            raise RegistryError(f"{self.what} {cls.__name__} is named '{cls.name}', not '{name}'")
        self._classes[name], self._origins[name] = cls, f"{cls.__module__}.{cls.__qualname__}"

    def __delitem__(self, name: str) -> None:
        self._discover()
        del self._classes[name], self._origins[name]
        self._from_files.discard(name)

    def _discover(self) -> None:
        if self._discovered:
            return
        self._discovered = True  # first: a module loaded here may read this registry
        try:
            for ep in plugin_entry_points(self.prefix):
                for cls in defined_classes(load_entry_point(ep), self.base):
                    self.add(cls, entry_point_origin(ep))
        except BaseException:
            self._discovered = False
            raise

    def __repr__(self) -> str:
        return f"<registry of {self.what}s: {', '.join(self)}>"

