"""How the next word is chosen from the logits: greedy, or sampled with temperature, top-k, top-p.

Shapes: V = vocabulary size. Every choice draws from the caller's own `torch.Generator`, so a seed
gives the same words in every process (the global generator is never touched).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from studygroup.errors import InputError
from studygroup.model.arguments import whole_number

#: The temperatures a word is drawn at (0 draws nothing: the most likely word). Far below the least,
#: logits / temperature overflows float64 (5e-324 makes every logit inf); far above the most,
#: every word is drawn as often as any other.
TEMPERATURES = (1e-6, 1e6)
#: The seeds a generator takes: a 64-bit unsigned integer.
SEEDS = (0, 2**64 - 1)


@dataclass(frozen=True)
class Sampling:
    """temperature 0: greedy (the most likely word). Otherwise softmax(logits / temperature), cut to
    the top_k most likely (None: all) and to the fewest most likely whose probabilities sum to at
    least top_p (1: all), renormalised, then drawn from."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self):
        """The one check of these settings, wherever they come from (library, CLI, web).

        >>> Sampling(temperature=5e-324)
        Traceback (most recent call last):
        studygroup.errors.InputError: the temperature must be 0 (greedy) or from 1e-06 to 1e+06, not 5e-324
        """
        least, most = TEMPERATURES
        if not (self.temperature == 0 or least <= self.temperature <= most):
            raise InputError(f"the temperature must be 0 (greedy) or from {least:g} to {most:g}, not {self.temperature}")
        if self.seed is not None:
            _check_seed(self.seed)
        if self.top_k is not None and (isinstance(self.top_k, bool) or int(self.top_k) != self.top_k or self.top_k < 1):
            raise InputError(f"top-k must be a whole number of at least 1, not {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise InputError(f"top-p must be in (0, 1], not {self.top_p}")

    def generator(self) -> torch.Generator:
        """A private generator, seeded with `seed` (None: from the operating system's entropy)."""
        g = torch.Generator()
        g.manual_seed(self.seed) if self.seed is not None else g.seed()
        return g

    def choose(self, logits: torch.Tensor, generator: torch.Generator) -> int:
        """The next word's id. logits (V,) float32."""
        if self.temperature == 0:
            return int(logits.argmax())
        return int(torch.multinomial(self.distribution(logits), 1, generator=generator))

    def distribution(self, logits: torch.Tensor) -> torch.Tensor:
        """(V,) the probabilities a word is drawn with (temperature > 0).

        >>> p = Sampling(temperature=1.0, top_k=2).distribution(torch.tensor([0.0, 1.0, 2.0]))
        >>> [round(x, 4) for x in p.tolist()]
        [0.0, 0.2689, 0.7311]
        >>> Sampling(temperature=1.0, top_p=0.5).distribution(torch.tensor([0.0, 1.0, 2.0])).tolist()
        [0.0, 0.0, 1.0]
        """
        z = logits.double() / self.temperature  # (V,)
        if self.top_k is not None and self.top_k < z.numel():
            kth = z.topk(int(self.top_k)).values[-1]
            z = z.masked_fill(z < kth, float("-inf"))
        p = torch.softmax(z, -1)  # (V,)
        if self.top_p < 1:
            sorted_p, order = p.sort(descending=True)
            before = sorted_p.cumsum(0) - sorted_p  # (V,) the mass of the more likely words
            drop = torch.zeros_like(p, dtype=torch.bool)
            drop[order] = before >= self.top_p  # kept: the fewest words reaching top_p
            p = p.masked_fill(drop, 0.0)
            p = p / p.sum()
        return p.float()


def _check_seed(seed) -> None:
    """InputError unless seed is a whole number in SEEDS."""
    least, most = SEEDS
    if not least <= whole_number(seed, "a seed") <= most:
        raise InputError(f"the seed must be a whole number from {least} to {most}, not {seed}")
