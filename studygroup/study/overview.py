"""A head's whole map at a glance: the T × T weights pooled into at most SIDE × SIDE blocks, each
block showing the LARGEST weight in it (a max-pool, so one sharp weight is not averaged away).

A long text's map does not fit as cells (8,192 members: 67 million of them), and a mean over a
block would hide the one answer a question listens to. The map is computed from the head's
vectors a block of questions at a time, each question over every key (the softmax needs the
whole row), pooled, and dropped: at most CHUNK × T weights live at once, never the T × T map.

Pooled blocks are square: `block` members on each side (the last row and column of blocks may be
smaller). A block is masked only when every cell in it is; it then carries the first of its
cells' reasons in mask_reasons.REASONS order. Paper orientation: rows are questions.
"""
from __future__ import annotations

import base64
import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from studygroup.formulas import attention
from studygroup.study.jsonable import JSONable
from studygroup.study.mask_reasons import mask_reasons
from studygroup.formats import brief
from studygroup.study.window import any_size

#: The most blocks on a side of an overview.
SIDE = 512
#: Questions computed at a time (rounded down to whole blocks, at least one block).
CHUNK = 256


@dataclass
class Overview(JSONable):
    """A window of one head's weights, max-pooled. See docs/web-api.md (/api/overview)."""

    layer: int
    head: int
    kv_head: int
    T: int
    rows_shown: list[int]  # [A, B]: the questions pooled (members A to B-1)
    keys_shown: list[int]  # [C, D]: the answers pooled
    block: int  # members on each side of a block (1: every cell is its own block)
    size: list[int]  # [P_r, P_c]: blocks down (questions) and across (answers)
    max: str  # base64 of P_r × P_c little-endian float32, row-major: each block's largest weight
    reasons: str  # base64 of P_r × P_c uint8: 0 where any cell is visible, else the block's reason code
    silenced_members: list[int] = field(default_factory=list)
    silenced_heads: list[list[int]] = field(default_factory=list)

    def max_weights(self) -> torch.Tensor:
        """(P_r, P_c) float32: `max` decoded."""
        return torch.frombuffer(bytearray(base64.b64decode(self.max)), dtype=torch.float32).reshape(self.size)

    def reason_codes(self) -> torch.Tensor:
        """(P_r, P_c) uint8: `reasons` decoded."""
        return torch.frombuffer(bytearray(base64.b64decode(self.reasons)), dtype=torch.uint8).reshape(self.size)

    def __repr__(self) -> str:
        (a, b), (c, d) = self.rows_shown, self.keys_shown
        return brief(self, f"of head {self.head} of layer {self.layer}: questions {a}:{b} × answers {c}:{d} of "
                           f"{self.T}×{self.T} in {self.size[0]}×{self.size[1]} blocks of {self.block}×{self.block}",
                     ".max_weights(), .reason_codes(), .to_dict()")


def overview(run, layer: int, head: int, rows=None, keys=None, side: int = SIDE) -> Overview:
    """The window (rows, keys: slices over the members, as head_view takes them; None: all) of
    head `head` of layer `layer` in `run`, max-pooled into at most side × side blocks.

    >>> o = overview(model.run("I have a lot", record="none"), 3, 0)
    >>> o.block, o.size, float(o.max_weights()[0, 0])
    (1, [4, 4], 1.0)
    """
    layer, head = run.model.check_head(layer, head)
    w = any_size(run.T, rows, keys)
    b = max(1, math.ceil(max(len(w.rows), len(w.keys)) / side))  # members per block side
    vec = run.head_vectors(layer, head)  # (T, d_head) each
    step = b * max(1, CHUNK // b)
    parts = [_pooled(run, layer, head, vec, range(i, min(i + step, w.rows.stop)), w.keys, b)
             for i in range(w.rows.start, w.rows.stop, step)]
    top = torch.cat([p[0] for p in parts])  # (P_r, P_c)
    codes = torch.cat([p[1] for p in parts])  # (P_r, P_c)
    return Overview(layer, head, run.model.config.kv_head_of(head), run.T, [w.rows.start, w.rows.stop],
                    [w.keys.start, w.keys.stop], b, list(top.shape), _b64(top.float().contiguous(), "<f4"),
                    _b64(codes.to(torch.uint8).contiguous(), "u1"), **run.interventions.silenced())


def _pooled(run, layer: int, head: int, vec: dict, rows: range, keys: range, b: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Questions `rows` over every key, cut to `keys`, pooled in b × b blocks: the largest weight
    (R/b, K/b) and the smallest reason code (0 where any cell is visible)."""
    mask = run.head_mask(layer, head, rows)  # (R, T)
    q = vec["q"][rows.start:rows.stop]  # (R, d_head)
    _, weights, _ = attention.by_rows(q[None], vec["k"][None], None, mask, validate=False)  # (1, R, T)
    K = slice(keys.start, keys.stop)
    quiet = run.interventions.silenced_members if run.interventions.hides_members(layer, head) else ()
    codes = mask_reasons(mask[:, K], quiet, run.model.config.window_of(layer), rows=rows, keys=keys)  # (R, K)
    pool = lambda x: F.max_pool2d(x[None, None], b, b, ceil_mode=True)[0, 0]  # noqa: E731  (R, K) -> (R/b, K/b)
    return pool(weights[0][:, K].float()), -pool(-codes.float())


def _b64(t: torch.Tensor, dtype: str) -> str:
    """A tensor's bytes, little-endian, as base64 text."""
    return base64.b64encode(np.ascontiguousarray(t.cpu().numpy(), dtype=np.dtype(dtype)).tobytes()).decode("ascii")
