"""Objects that live in the flow's process only: the run's live parts (the prepared request, the
run's view, the engine's door) that Prefect's subflows close over.

Prefect ships a task run's context to a Dask worker by pickling, the flow object with it; a flow
built around live objects (flows/evolve.py, flows/promotion_flow.py, flows/final_report.py) would
drag them along by value (locks, connections, the LLM client). A `ProcessLocal` object pickles to
a `Detached` stub instead: the worker never calls the flow, and a stub that is used says why.

    >>> import pickle
    >>> class Live(ProcessLocal):
    ...     pass
    >>> stub = pickle.loads(pickle.dumps(Live()))
    >>> stub
    <Live: lives in the flow's process>
    >>> stub.pool
    Traceback (most recent call last):
    ...
    RuntimeError: Live lives in the flow's process: it is not shipped to other processes
"""

from __future__ import annotations

from typing import Any


class Detached:
    """What a `ProcessLocal` object becomes in another process: a name, and an error when used."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise RuntimeError(f"{self._name} lives in the flow's process: it is not shipped to other processes")

    def __repr__(self) -> str:
        return f"<{self._name}: lives in the flow's process>"


class ProcessLocal:
    """Mix-in: pickling gives a `Detached` stub (deep copies too), never the object's state."""

    def __reduce__(self) -> tuple[type[Detached], tuple[str]]:
        return Detached, (type(self).__name__,)
