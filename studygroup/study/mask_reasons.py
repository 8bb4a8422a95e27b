"""Why a question cannot hear an answer: one code per cell of a head's grid, carried in the JSON.

Every view draws a masked cell the same way (hatched, never the colour of a zero weight) and
names its reason in the legend; the reason comes from here, so the views never guess it.
Codes index REASONS; a cell that may be heard is VISIBLE.

    mask_reasons (T_q, T_k) int (or a window's (R, K)): 0 visible, 1 future (causal mask), 2 silenced (a silenced
    member's key), 3 outside_window (a sliding window's past)
"""
from __future__ import annotations

from collections.abc import Iterable

import torch

REASONS = ("visible", "future", "silenced", "outside_window")
VISIBLE, FUTURE, SILENCED, OUTSIDE_WINDOW = range(len(REASONS))


def mask_reasons(mask: torch.Tensor, silenced: Iterable[int] = (), window: int | None = None,
                 rows: range | None = None, keys: range | None = None) -> torch.Tensor:
    """The reason of every cell of `mask` (R, K) bool (True: the question may hear the answer).

    rows, keys: the members the mask's rows (questions) and columns (answers) are, by default
    every member of a square grid (R = K = T); a window of a longer grid names its own.
    Question i, answer j (paper orientation, rows are questions): a hidden cell is FUTURE when
    j > i, OUTSIDE_WINDOW when a window of `window` members leaves j behind (i - j >= window),
    else SILENCED when j is one of `silenced`. A hidden cell with none of these reasons is a
    contradiction (the mask came from somewhere else) and raises ValueError. Returns (R, K) int8.

    >>> mask_reasons(torch.tensor([[True, False, False], [False, True, False], [False, True, True]]), [0]).tolist()
    [[0, 1, 1], [2, 0, 1], [2, 0, 0]]
    >>> mask_reasons(torch.tensor([[False, True]]), [0], rows=range(2, 3), keys=range(0, 2)).tolist()
    [[2, 0]]
    """
    R, K = mask.shape[-2:]
    rows, keys = rows if rows is not None else range(R), keys if keys is not None else range(K)
    i = torch.tensor(rows)[:, None]  # (R, 1) questions
    j = torch.tensor(keys)[None, :]  # (1, K) answers
    hidden = ~mask.cpu()
    silenced = set(silenced)
    quiet = torch.tensor([k in silenced for k in keys], dtype=torch.bool)  # (K,)
    codes = torch.full((R, K), VISIBLE, dtype=torch.int8)
    codes[hidden & quiet[None, :]] = SILENCED
    if window is not None:
        codes[hidden & (i - j >= window)] = OUTSIDE_WINDOW
    codes[hidden & (j > i)] = FUTURE
    if bool((hidden & (codes == VISIBLE)).any()):
        raise ValueError("a masked cell is neither the future, outside the window, nor a silenced member's")
    return codes


def reasons_of_head(interventions, layer: int, head: int, T: int, window: int | None = None) -> torch.Tensor:
    """(T, T) int8: the reasons of this head's grid in a run with these interventions, in a layer
    whose questions see only the last `window` members (None: every earlier member)."""
    silenced = interventions.silenced_members if interventions.hides_members(layer, head) else ()
    mask = interventions.mask(layer, head, T).cpu()  # (T, T)
    if window is not None:
        i = torch.arange(T)
        mask = mask & ((i[:, None] - i[None, :]) < window)
    return mask_reasons(mask, silenced, window)
