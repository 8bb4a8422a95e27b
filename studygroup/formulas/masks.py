"""Interventions as masks: silence a member in chosen heads, or silence a head.

Silencing member j removes j from the keys of the chosen heads: no question there can hear its
answer. The text is not edited: positions, and every other member's embedding, stay as they were.
A question left with no key at all (member 0's, when member 0 is silenced) would have no answer,
so such a member still hears itself, and only itself.

Silencing a head zeroes its write to the residual stream (in the forward pass).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from studygroup.formulas.attention import causal_mask

Heads = frozenset[tuple[int, int]]


def _remove_keys(silenced: torch.Tensor, rows: range | None = None) -> torch.Tensor:
    """Causal mask minus the silenced keys, a member hearing itself where nothing else is left.

    silenced: (…, T) bool, True for a removed key. rows: the questions whose rows are built (None:
    every member). Returns (…, R, T) bool, R = len(rows).
    """
    T = silenced.shape[-1]
    rows = range(T) if rows is None else rows
    i = torch.arange(rows.start, rows.stop, device=silenced.device)[:, None]  # (R, 1) questions
    j = torch.arange(T, device=silenced.device)[None, :]  # (1, T) answers
    mask = (j <= i) & ~silenced.unsqueeze(-2)  # (…, R, T)
    nothing_left = ~mask.any(-1, keepdim=True)  # (…, R, 1)
    return mask | (nothing_left & (j == i))


def member_mask(T: int, members: Iterable[int], device=None, rows: range | None = None) -> torch.Tensor:
    """Causal mask with the keys of `members` removed.

    Returns (T, T) bool, True where query i may see key j; with rows (a range of members), only
    those questions' rows (len(rows), T), built without the rest (a long text's window).

    >>> member_mask(3, [0]).int().tolist()
    [[1, 0, 0], [0, 1, 0], [0, 1, 1]]
    >>> member_mask(3, [1, 2]).int().tolist()
    [[1, 0, 0], [1, 0, 0], [1, 0, 0]]
    >>> member_mask(3, [0], rows=range(2, 3)).int().tolist()
    [[0, 1, 1]]
    """
    silenced = torch.zeros(T, dtype=torch.bool, device=device)  # (T,)
    silenced[list(members)] = True
    return _remove_keys(silenced, rows)


def each_member_masks(T: int, members: Iterable[int], device=None, rows: range | None = None) -> torch.Tensor:
    """One mask per member, each silencing that member alone, for a batched pass.

    Returns (B, T, T) bool with B = len(members); with rows (a range of members), only those
    questions' rows (B, len(rows), T).

    >>> each_member_masks(3, [1, 2]).shape
    torch.Size([2, 3, 3])
    >>> torch.equal(each_member_masks(4, [1, 2], rows=range(2, 4)), each_member_masks(4, [1, 2])[:, 2:])
    True
    """
    index = torch.arange(T, device=device)  # (T,)
    silenced = index[None, :] == torch.tensor(list(members), device=device)[:, None]  # (B, T)
    return _remove_keys(silenced, rows)


def packed_member_masks(T: int, members: Sequence[int], device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Masks for one copy of the text per member, packed one after another in a single sequence.

    Copy b holds the rows members[b] .. T-1 (the rows before its member are the clean run's, never
    recomputed). The keys are the P = max(members) first members' keys, reused from a clean run,
    then the N = Σ (T - members[b]) packed rows. A row hears the reused keys before its copy's
    first row and its own copy's rows up to itself; never another copy's.
    Returns (silenced, base), each (N, P + N) bool: base as described, silenced without the
    copy's member (which still hears itself where nothing else is left).

    >>> silenced, base = packed_member_masks(3, [2, 1])
    >>> silenced.int().tolist()   # keys: members 0, 1 (reused), then rows 2 | 1, 2
    [[1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [1, 0, 0, 0, 1]]
    >>> base.int().tolist()
    [[1, 1, 1, 0, 0], [1, 0, 0, 1, 0], [1, 0, 0, 1, 1]]
    """
    P, N = max(members), sum(T - j for j in members)
    silenced = torch.zeros(N, P + N, dtype=torch.bool, device=device)
    base = torch.zeros_like(silenced)
    causal, o = causal_mask(T, T, device=device), 0  # (T, T); o: the copy's first packed row
    for j in members:
        n = T - j
        for packed, full in ((silenced, member_mask(T, [j], device=device)), (base, causal)):
            packed[o:o + n, :j] = full[j:, :j]  # the reused keys
            packed[o:o + n, P + o:P + o + n] = full[j:, j:]  # the copy's own rows
        o += n
    return silenced, base


def per_layer(mask: torch.Tensor, heads: Heads | None, n_layers: int, n_heads: int,
              base: torch.Tensor | None = None) -> dict[int, torch.Tensor]:
    """Apply a (…, T_q, T) silencing mask to the chosen heads of each layer, `base` elsewhere.

    base: (…, T_q, T), or None for the causal mask (its T_q query rows the last ones: T_q < T
    when earlier rows are reused, not recomputed). heads: set of (layer, head) pairs, or None for
    every head of every layer. Returns {layer: (…, 1 or n_heads, T_q, T)}; with base None, layers
    not in it need only the causal mask.
    """
    if heads is None:
        return {l: mask.unsqueeze(-3) for l in range(n_layers)}  # (…, 1, T_q, T)
    out = {} if base is None else {l: base.unsqueeze(-3) for l in range(n_layers)}  # (…, 1, T_q, T), one tensor
    if base is None:
        base = causal_mask(mask.shape[-2], mask.shape[-1], device=mask.device)  # (T_q, T), aligned at the end
    for l in sorted({l for l, _ in heads}):
        chosen = torch.tensor([(l, h) in heads for h in range(n_heads)], device=mask.device)  # (n_heads,)
        out[l] = torch.where(chosen[:, None, None], mask.unsqueeze(-3), base.unsqueeze(-3))  # (…, n_heads, T_q, T)
    return out
