"""An LM-free control: a backend that answers by chance among the replies a request allows.

"The model helps" is a claim about the model's choices; this backend makes the same search
choose at random instead, at the same token cost. It answers a request that lists its valid
replies (GenerateRequest.choices) with a uniformly random choice per sample, and a
score_choices request with a uniformly random distribution over the choices (so a ranking of
legal steps is a random order, and a verdict's expected value a random number). Requests that
list no choices have nothing valid to choose among: it refuses them.

Tokens are counted as the model it stands in for would count them (`counter`, usually the
embedded model), so a budget buys the control exactly the calls it would buy that model.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

from .budget import estimate_tokens
from .errors import ModelError
from .types import Capabilities, Completion, GenerateRequest, Prompt, Usage, capabilities_of, choice_text


def _estimate(text: str) -> int:
    # Without a tokenizer: never fewer than one token per text.
    return max(1, estimate_tokens(text))


class ChanceBackend:
    """A Backend that picks uniformly at random among each request's choices (the `random` control lane)."""

    max_concurrency: int = 1_000_000

    def __init__(self, counter: Any = None, *, name: str = "random", seed: int = 0) -> None:
        self.counter = counter
        self.name = name
        # It scores and keeps to choices by construction; it reads the prompt as its counter does.
        self.capabilities = Capabilities(prompt_form=None if counter is None else capabilities_of(counter).prompt_form,
                                         scores_choices=True, follows_choices=True)
        self._rng = random.Random(seed)

    def count_tokens(self, prompt: Prompt) -> int | None:
        """The counter model's count (an estimate without one)."""
        if self.counter is None:
            return _estimate(prompt.as_text())
        return self.counter.count_tokens(prompt)

    def _choice_lengths(self, prompt: Prompt, choices: Sequence[str]) -> list[int]:
        tokens = getattr(self.counter, "choice_tokens", None)
        if tokens is None:
            return [_estimate(c) for c in choices]
        return [len(t) for t in tokens(prompt, choices)]

    def _rng_for(self, request: GenerateRequest) -> random.Random:
        # A seeded request gets the same answer in every run, as a seeded model call would.
        return self._rng if request.seed is None else random.Random(request.seed)

    async def generate(self, request: GenerateRequest) -> Completion:
        """A random choice per sample, or a random distribution over the choices."""
        if not request.choices:
            raise ModelError(
                f"the {self.name} control answers only requests that list their valid replies; this "
                f"{request.purpose or 'request'} lists none (the task states no choices for it)"
            )
        rng = self._rng_for(request)
        prompt_tokens = self.count_tokens(request.prompt) or 0
        lengths = self._choice_lengths(request.prompt, request.choices)
        if request.score_choices:
            # Uniform over distributions: normalized exponentials are a flat Dirichlet draw.
            logps = {c: math.log(rng.expovariate(1.0) or 1e-300) for c in request.choices}
            return Completion((choice_text(logps),), Usage(prompt_tokens + sum(lengths), 0), self.name,
                              None, ("stop",))
        picks = [rng.randrange(len(request.choices)) for _ in range(request.n)]
        texts = tuple(request.choices[i] for i in picks)
        generated = sum(min(lengths[i], request.max_tokens) for i in picks)
        return Completion(texts, Usage(prompt_tokens, generated), self.name, None, ("stop",) * request.n)

    async def aclose(self) -> None:
        """Nothing to release (the counter belongs to whoever passed it)."""
