"""Ranking by size: heads and members in the order of |value|, largest first, ties in reading order."""
from __future__ import annotations

import torch


def largest_first(values: torch.Tensor) -> list[int]:
    """Flat indices of `values` by |value|, largest first; equal sizes keep reading order.

    >>> largest_first(torch.tensor([[0.5, -2.0], [1.0, 0.5]]))
    [1, 2, 0, 3]
    """
    return values.flatten().abs().argsort(descending=True, stable=True).tolist()


def as_heads(flat: list[int], n_heads: int) -> list[tuple[int, int]]:
    """Flat indices of a (n_layers, n_heads) grid -> (layer, head) pairs.

    >>> as_heads([1, 2], n_heads=2)
    [(0, 1), (1, 0)]
    """
    return [(i // n_heads, i % n_heads) for i in flat]


def heads_largest_first(values: torch.Tensor) -> list[tuple[int, int]]:
    """(layer, head) pairs of a (n_layers, n_heads) grid by |value|, largest first.

    >>> heads_largest_first(torch.tensor([[0.5, -2.0], [1.0, 0.5]]))
    [(0, 1), (1, 0), (0, 0), (1, 1)]
    """
    return as_heads(largest_first(values), values.shape[1])
