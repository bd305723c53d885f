"""Several LLM endpoints behind one backend: each call goes to one, chosen by weight or by a bandit.

`weighted` routing sends each call to an endpoint with probability proportional to its weight.
`bandit` routing is Thompson sampling over the models: each model's chance of designing a
candidate that improves on its parent (a Beta posterior over the commit's feedback, calls that
failed outright counting as misses) divided by its mean cost per answered call (USD from the
price table when it names every model, else tokens), with a share `explore` of the calls routed
uniformly at random so that no model is starved of evidence. Endpoints serving the same model
are one arm; within an arm the call goes to an endpoint by weight. A router's `context_window` is
the smallest of its endpoints' (a prompt that fits it fits any of them); each call is fitted to
the window of the endpoint it goes to.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from evoforge.infra.config import ModelPrice
from evoforge.infra.llm.circuit import CLOSED, Circuit, EndpointDown
from evoforge.infra.llm.openai_backend import OpenAIBackend
from evoforge.infra.llm.pricing import call_cost
from evoforge.infra.llm.types import Completion, LLMError

log = logging.getLogger("evoforge.llm.router")

WEIGHTED, BANDIT = "weighted", "bandit"
USD, TOKENS = "usd", "tokens"


@dataclass
class Arm:
    """One model, the endpoints that serve it, and what the router has seen of it."""

    model: str
    endpoints: list[OpenAIBackend] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    answered: int = 0  # calls that returned an answer
    cost: float = 0.0  # over the answered calls, in the router's cost unit
    designs: int = 0  # candidates the commit reported on (a failed research call's too: a miss)
    improvements: int = 0  # of those, the ones that beat their parent

    def mean_cost(self) -> float | None:
        """Cost per answered call, or None before the first answer."""
        return self.cost / self.answered if self.answered else None


class Router:
    """An LLM backend that routes every call to one of several OpenAI-compatible endpoints.

    >>> a = OpenAIBackend("http://a/v1", "m-a")
    >>> b = OpenAIBackend("http://b/v1", "m-b")
    >>> router = Router([(a, 3.0), (b, 1.0)], routing="weighted", seed=0)
    >>> picks = [router.pick()[0].model for _ in range(4000)]
    >>> round(picks.count("m-a") / len(picks), 1)
    0.8
    """

    name = "router"

    def __init__(self, endpoints: Sequence[tuple[OpenAIBackend, float]], routing: str = WEIGHTED,
                 prices: Mapping[str, ModelPrice] | None = None, explore: float = 0.1,
                 seed: int = 0) -> None:
        if not endpoints:
            raise ValueError("a router needs at least one endpoint")
        if routing not in (WEIGHTED, BANDIT):
            raise ValueError(f"unknown routing '{routing}' (weighted or bandit)")
        self.routing, self.explore = routing, explore
        self.prices = dict(prices or {})
        self._endpoints = list(endpoints)
        self._rng = random.Random(f"router-{seed}")
        self.arms: dict[str, Arm] = {}
        self.unit = TOKENS
        self.model = ""
        if all(backend.model for backend, _ in self._endpoints):  # known before any check
            self._build_arms()

    def _build_arms(self) -> None:
        """Group the endpoints by the model they serve (known once every model is named)."""
        self.arms = {}
        for backend, weight in self._endpoints:
            arm = self.arms.setdefault(backend.model, Arm(backend.model))
            arm.endpoints.append(backend)
            arm.weights.append(weight)
        self.unit = USD if all(m in self.prices for m in self.arms) else TOKENS
        self.model = ", ".join(self.arms)

    async def check(self) -> str:
        """Check every endpoint (each names or finds its model); returns a one-line description."""
        for backend, _ in self._endpoints:
            await backend.check()
        self._build_arms()
        if self.routing == BANDIT and self.unit == TOKENS and self.prices:
            unpriced = ", ".join(m for m in self.arms if m not in self.prices)
            log.warning("bandit routing counts cost in tokens: llm.prices has no price for %s", unpriced)
        where = ", ".join(f"{b.model} at {b.base_url} (weight {w:g})" for b, w in self._endpoints)
        cost = f", cost in {self.unit}" if self.routing == BANDIT else ""
        return f"{where}; {self.routing} routing{cost}"

    def pick(self) -> tuple[Arm, OpenAIBackend]:
        """The arm and endpoint the next call goes to: among the endpoints whose circuit is
        closed, while any is (the call waits for its endpoint's circuit when none is)."""
        up = {id(b) for arm in self.arms.values() for b in arm.endpoints if b.circuit.state == CLOSED}
        arms = [arm for arm in self.arms.values() if any(id(b) in up for b in arm.endpoints)] \
            or list(self.arms.values())

        def usable(arm: Arm) -> list[tuple[OpenAIBackend, float]]:
            pairs = list(zip(arm.endpoints, arm.weights, strict=True))
            return [(b, w) for b, w in pairs if id(b) in up] or pairs

        if self.routing == WEIGHTED:
            pairs = [(arm, backend, w) for arm in arms for backend, w in usable(arm)]
            arm, backend, _ = self._rng.choices(pairs, [w for _, _, w in pairs])[0]
            return arm, backend
        arm = self._rng.choice(arms) if self._rng.random() < self.explore else self._thompson(arms)
        endpoints = usable(arm)
        return arm, self._rng.choices([b for b, _ in endpoints], [w for _, w in endpoints])[0]

    @property
    def context_window(self) -> int | None:
        """The smallest context window of the endpoints that know theirs (None: none does)."""
        windows = [b.context_window for b, _ in self._endpoints if b.context_window is not None]
        return min(windows) if windows else None

    def count_tokens(self, messages: list[dict[str, str]]) -> int:
        """The prompt's tokens as the endpoints count them: the largest of their counts."""
        return max(backend.count_tokens(messages) for backend, _ in self._endpoints)

    def circuits(self) -> list[Circuit]:
        """Every endpoint's circuit breaker (one per endpoint: one down endpoint pauses nothing)."""
        return [backend.circuit for backend, _ in self._endpoints]

    def _thompson(self, arms: list[Arm]) -> Arm:
        """The arm with the highest sampled improvement rate per unit of cost."""
        known = [c for c in (arm.mean_cost() for arm in arms) if c is not None]
        prior = sum(known) / len(known) if known else 1.0  # an untried model costs the average
        best, best_value = arms[0], -1.0
        for arm in arms:
            rate = self._rng.betavariate(1 + arm.improvements, 1 + arm.designs - arm.improvements)
            cost = arm.mean_cost()
            value = rate / max(prior if cost is None else cost, 1e-12)
            if value > best_value:
                best, best_value = arm, value
        return best

    async def complete(
        self, messages: list[dict[str, str]], *, temperature: float, max_tokens: int
    ) -> Completion:
        """The answer of the endpoint this call is routed to, named after the arm's model."""
        if not self.arms:
            await self.check()
        while True:
            arm, backend = self.pick()
            others_up = any(c.state == CLOSED for c in self.circuits() if c is not backend.circuit)
            try:  # while another endpoint answers, a call never waits for a down one
                completion = await backend.complete(messages, temperature=temperature,
                                                    max_tokens=max_tokens, hold=not others_up)
                break
            except EndpointDown:
                continue  # its circuit opened under the call: pick again among those that answer
            except LLMError as exc:  # its node names the model, so the commit reports it as a miss
                raise LLMError(f"{arm.model} at {backend.base_url}: {exc}", model=arm.model,
                               tokens_in=exc.tokens_in, tokens_out=exc.tokens_out,
                               reason=exc.reason) from None
        arm.answered += 1
        arm.cost += self._cost(arm.model, completion)
        # the configured name, not the server's (a hosted API answers with a dated variant)
        return dataclasses.replace(completion, model=arm.model)

    def _cost(self, model: str, completion: Completion) -> float:
        if self.unit == USD:
            usd = call_cost(self.prices, model, completion.tokens_in, completion.tokens_out)
            return usd or 0.0
        return float(completion.tokens_in + completion.tokens_out)

    def observe(self, model: str, gain: float | None) -> None:
        """Count a candidate of `model` and whether it improved on its parent (others: ignored)."""
        arm = self.arms.get(model)
        if arm is None:
            return
        arm.designs += 1
        arm.improvements += gain is not None and gain > 0

    async def close(self) -> None:
        for backend, _ in self._endpoints:
            await backend.close()
