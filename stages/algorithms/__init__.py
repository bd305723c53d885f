"""Algorithms: which stages make up a run and which artifact kinds it evolves, one module each
(`engine.algorithm`, `--algorithm`; `evoforge algorithms` lists them). An algorithm is a module
with one `Algorithm` subclass, registered as plug-ins are: an entry point named `algorithm.*` in
group `evoforge.plugins` (evoforge's own included), a `--plugin` file, or a `.py` file named as
the algorithm itself.

    >>> algorithm = algorithm_named("asi-evolve")
    >>> algorithm.pipeline().names()[:3], algorithm.evolves("playbook")
    (['learn', 'research', 'engineer'], True)
    >>> algorithm_named("asi_evolve")
    Traceback (most recent call last):
    ...
    evoforge.stages.algorithms.base.AlgorithmError: unknown algorithm 'asi_evolve' (algorithms: asi-evolve...)
"""

from __future__ import annotations

import inspect

from evoforge.infra.plugin_registry import Registry
from evoforge.stages.algorithms.base import Algorithm, AlgorithmError
from evoforge.stages.pipeline.plugins import (
    PluginError,
    import_plugin,  # --plugin's loader, shared
)

__all__ = ["ALGORITHMS", "Algorithm", "AlgorithmError", "algorithm_named"]

ALGORITHMS: Registry[Algorithm] = Registry("algorithm", Algorithm, prefix="algorithm",
                                           first="asi-evolve")  # the default, listed first


def algorithm_named(name: str) -> Algorithm:
    """The algorithm registered as `name`, or the one `Algorithm` subclass a `.py` file defines."""
    if name.endswith(".py"):
        return _from_file(name)
    if name not in ALGORITHMS:
        raise AlgorithmError(ALGORITHMS.unknown(name))
    return ALGORITHMS[name]()


def _from_file(path: str) -> Algorithm:
    """The algorithm a `.py` file defines (loaded as `--plugin` loads a file: once per process)."""
    where = f"algorithm file {path}"
    try:
        module = import_plugin(path)
    except PluginError as exc:
        raise AlgorithmError(f"{where}: {str(exc).removeprefix(f'plug-in {path}: ')}") from None
    found = [cls for _, cls in inspect.getmembers(module, inspect.isclass)
             if issubclass(cls, Algorithm) and cls.__module__ == module.__name__
             and not inspect.isabstract(cls)]
    if len(found) != 1:
        names = f" ({', '.join(cls.__name__ for cls in found)})" if found else ""
        raise AlgorithmError(f"{where}: defines {len(found)} Algorithm subclasses{names}, not one")
    found[0].check(where)
    try:
        return found[0]()
    except TypeError as exc:
        raise AlgorithmError(f"{where}: {found[0].__name__}() cannot be made without arguments "
                             f"({exc})") from None
