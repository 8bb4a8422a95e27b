"""The lesson's building blocks: text, tables, code and grids, as plain data for every renderer."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from studygroup.errors import NotationError
from studygroup.formulas import attention
from studygroup.study.jsonable import JSONable
from studygroup.study.story import quote

SHOWN_ENTRIES = 6  # entries of a long vector shown in a table


@dataclass
class Block(JSONable):
    """A paragraph ("text"), a table ("table") or preformatted text ("code")."""

    kind: str
    text: str = ""
    caption: str = ""
    header: list[str] = field(default_factory=list)
    rows: list[list] = field(default_factory=list)  # cells: str, float, or None (masked)
    shade: bool = False  # cells are weights in [0, 1]: a renderer may shade them


def text(s: str) -> Block:
    return Block("text", text=s)


def table(caption: str, header: list[str], rows: list[list], shade: bool = False) -> Block:
    return Block("table", caption=caption, header=header, rows=rows, shade=shade)


def code(s: str) -> Block:
    return Block("code", text=s)


def grid(caption: str, tokens: list[str], values: torch.Tensor, mask: torch.Tensor, shade: bool = False) -> Block:
    """A T×T grid in paper orientation: rows are questions, columns answers; masked cells None."""
    rows = [[f"{quote(tokens[i])} asks"] + [float(values[i, j]) if mask[i, j] else None for j in range(len(tokens))]
            for i in range(len(tokens))]
    return table(caption, ["question \\ answer from"] + tokens, rows, shade)


def drawn_form_error(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> str:
    """The message attention.as_drawn raises for these column-notation matrices."""
    try:
        attention.as_drawn(Q, K, V)
    except NotationError as e:
        return str(e)
    raise AssertionError("as_drawn must refuse")  # pragma: no cover


def summary_row(name: str, x: torch.Tensor) -> list:
    """[name, norm, first SHOWN_ENTRIES entries] for a vector x (d,)."""
    return [name, float(x.norm()), *[float(v) for v in x[:SHOWN_ENTRIES]]]


def summary_header(first: str) -> list[str]:
    return [first, "norm", *[f"[{i}]" for i in range(SHOWN_ENTRIES)]]
