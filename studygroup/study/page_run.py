"""The one pass of a text that serves the page's views of it: the conclusion, the model view and,
up to FULL_MAPS_MAX_T members, every head's view; kept by the server and started from where a
kept pass with less silenced allows."""
from __future__ import annotations

from studygroup.model.interventions import Interventions
from studygroup.model.record import KEY_STEPS, Record
from studygroup.study import attribution
from studygroup.study.model_view import FULL_MAPS_MAX_T
from studygroup.study.text_ids import checked_ids

#: The steps a head's view reads: page_run records them for short texts.
HEAD_VECTORS = ("q_pre_rope", "k_pre_rope", "q", "k", "v")
#: What page_run keeps up to FULL_MAPS_MAX_T members: every head's map and vectors and the residual
#: stream entering each layer (where a run silencing a head starts) for every member, and of the rest
#: (what the direct contributions read) the last member's row only.
PAGE_RECORD = Record(steps=("weights", *attribution.NEEDED_STEPS, *HEAD_VECTORS, "resid_pre"),
                     full_rows=KEY_STEPS | {"weights", *HEAD_VECTORS, "resid_pre"}, last_rows=1)
#: What page_run keeps past FULL_MAPS_MAX_T members: the last question's row of each.
LONG_PAGE_RECORD = Record(steps=("weights", *attribution.NEEDED_STEPS), rows="last")


def page_run(model, text, interventions: Interventions = Interventions(), base=None):
    """One pass of `text` with these interventions that serves the page's three views of it: the
    conclusion (its logits), the model view (every head's weights and what the direct
    contributions need) and, up to FULL_MAPS_MAX_T members, any head's view (its vectors).
    Past that, each head's view makes its own pass up to its layer. base: a page_run of this text
    that this run can start from: with the same members silenced (and the same ablation) and fewer
    heads, its layers before the first head newly silenced (`Run.silence_heads`: the same numbers,
    those layers not computed again); silencing by zero ablation, with the same heads silenced and
    fewer members, its rows before the first member newly silenced (`Run.silence_members`: those
    rows not computed again).

    >>> from studygroup.study.head import head_view
    >>> one = Interventions(silenced_members=(1,))
    >>> run = page_run(model, "I have a lot", one)
    >>> a = head_view(model, "I have a lot", 3, 0, run=run).weights
    >>> b = head_view(model, "I have a lot", 3, 0, interventions=one).weights  # its own pass, up to layer 3
    >>> max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb)) < 1e-5
    True
    """
    ids = checked_ids(model, text)
    record = PAGE_RECORD if len(ids) <= FULL_MAPS_MAX_T else LONG_PAGE_RECORD
    wanted = interventions.checked(model, len(ids))
    if base is not None and base.record == record and list(base.token_ids) == ids and base.interventions.ablation == wanted.ablation:
        had = base.interventions
        if had.silenced_members == wanted.silenced_members and had.silenced_heads <= wanted.silenced_heads:
            return base.silence_heads(wanted.silenced_heads)
        if (had.silenced_heads == wanted.silenced_heads and had.member_heads is None and wanted.zero
                and set(had.silenced_members) <= set(wanted.silenced_members)):
            return base.silence_members(wanted.silenced_members)
    return model.run(ids, record=record, interventions=wanted)
