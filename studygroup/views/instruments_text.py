"""The researcher's instruments at a terminal: the logit lens as a layer × member grid of top words,
and activation patching as layer × member and layer × head grids of normalised cells."""
from __future__ import annotations

from studygroup.formats import percent, quote
from studygroup.views.text import _short, table, wrap

#: Members shown as the lens's columns at a terminal (the last ones; --json has them all).
LENS_COLUMNS = 6
#: Cells listed for the grids a terminal does not draw whole (attn_out, mlp_out) without --full.
PATCH_CELLS_LISTED = 5


def lens(e) -> str:
    """The last members' top words after each layer, the last member's final word's probability and rank."""
    shown = list(range(len(e.positions)))[-LENS_COLUMNS:]
    final = e.final[-1]
    header = ["after layer", *(_short(e.tokens[e.positions[p]], 10) for p in shown),
              f"p({_short(final.token, 10)})", "rank"]
    rows = [[l, *(_short(row[p].top[0].token, 10) for p in shown), percent(row[-1].final_prob), row[-1].final_rank]
            for l, row in enumerate(e.layers)]
    lines = [f"members ({len(e.tokens)}): " + " | ".join(e.tokens), "",
             f"the logit lens (model {e.model.label}): each column a member, each cell its top word if the group "
             "stopped after that layer;",
             f"the last two columns: the probability and rank of {final.token}, the model's own conclusion at {_last_shown(e)}",
             table(header, rows), "", "the story:"]
    return "\n".join(lines + [wrap(s) for s in e.story])


def _last_shown(e) -> str:
    """The member whose conclusion the lens's last columns follow: "the last member", or the last shown."""
    j = e.positions[-1]
    return "the last member" if j == len(e.tokens) - 1 else f"member {j} ({quote(e.tokens[j])}), the last shown"


def patching(p, full: bool = False) -> str:
    """The residual stream's and the heads' grids (normalised: 0 corrupted, 1 clean), the attention's
    and MLP's largest cells (every grid with full)."""
    changed = [j for j, (a, b) in enumerate(zip(p.clean_tokens, p.corrupted_tokens)) if a != b]
    lines = [f"clean ({len(p.clean_tokens)}):     " + " | ".join(p.clean_tokens),
             f"corrupted ({len(p.corrupted_tokens)}): " + " | ".join(p.corrupted_tokens), "",
             f"activation patching (model {p.model.label}): the corrupted text, one thing taken from the clean run;",
             f"the metric: logit({p.answer.token}) − logit({p.wrong.token}) at the last member, normalised: "
             "0 = the corrupted run's, 1 = the clean run's (· where both runs' are equal; --json: the raw values too)"]
    member = [_member_label(p, j, changed) for j in range(len(p.clean_tokens))]
    for name in ("resid_pre", "attn_out", "mlp_out") if full else ("resid_pre",):
        lines += ["", f"{name} (layer × member):", _grid(p.grids[name].normalised, member)]
    if not full:
        lines += ["", *_largest(p, "attn_out", member), *_largest(p, "mlp_out", member)]
    heads = [str(h) for h in range(len(p.grids["heads"].normalised[0]))]
    lines += ["", "heads (layer × head), each head's output at every member taken from the clean run:",
              _grid(p.grids["heads"].normalised, heads), "", "the story:"]
    return "\n".join(lines + [wrap(s) for s in p.story])


def _member_label(p, j: int, changed: list[int]) -> str:
    a, b = _short(p.clean_tokens[j], 8), _short(p.corrupted_tokens[j], 8)
    return f"{j}:{a}/{b}" if j in changed else f"{j}:{a}"


def _grid(values: list[list[float | None]], columns: list[str]) -> str:
    rows = [[l, *(None if v is None else round(v, 2) + 0.0 for v in row)] for l, row in enumerate(values)]  # no "-0"
    return table(["layer", *columns], rows)


def _largest(p, name: str, member: list[str]) -> list[str]:
    cells = [(v, l, j) for l, row in enumerate(p.grids[name].normalised) for j, v in enumerate(row) if v is not None]
    cells.sort(key=lambda c: -abs(c[0]))
    listed = ", ".join(f"layer {l} at {member[j]}: {v:+.2f}" for v, l, j in cells[:PATCH_CELLS_LISTED])
    return [f"{name}, the largest cells (--full: the grid): {listed or 'none'}"]


def ablations(a, shown: int = 10) -> str:
    """The heads with the largest zero-ablation effects, each under the ablations measured."""
    header = ["layer", "head", "zero", "mean", *(["resample"] if a.resample_from else [])]
    rows = [[h.layer, h.head, *(round(x, 4) + 0.0 for x in (h.zero, h.mean, *([h.resample] if a.resample_from else [])))]
            for h in a.heads[:shown]]  # + 0.0: no "-0"
    lines = [f"members ({len(a.tokens)}): " + " | ".join(a.tokens), "",
             f"each head taken out at every member (model {a.model.label}): the change in log p({a.predicted}), "
             f"{percent(a.prob)} in the run;",
             f"zero: its write zeroed; mean: its output replaced by its mean over {a.reference}"
             + ("; resample: its output taken from the other text" if a.resample_from else ""),
             table(header, rows), "", "the story:"]
    return "\n".join(lines + [wrap(s) for s in a.story])
