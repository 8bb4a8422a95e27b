"""Activation patching: which layer, member and head carry the difference between two texts.

Two texts of the same number of members, a clean one and a corrupted one. The metric is the
logit difference at the last member between two words, m = logit(answer) − logit(wrong) (by
default the clean run's top word against the corrupted run's). Each cell runs the corrupted text
with one thing taken from the clean run, and gives m there, raw and normalised:

    normalised = (m_patched − m_corrupted) / (m_clean − m_corrupted)   (0: corrupted, 1: clean)

- `resid_pre` [layer][member]: the residual stream entering that layer at that member;
- `attn_out`, `mlp_out` [layer][member]: the layer's attention (all heads) or MLP write at that member;
- `heads` [layer][head]: that head's output (its weighted sum of answers) at every member.

Each layer's cells are copies of the corrupted text in batched passes that start at that layer from
the corrupted run's residual stream (the layers below are the corrupted run's, kept, not
recomputed), each copy patched at its own place (`CopyReplacement`).
Shapes: L = n_layers, T members, H = n_heads.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from studygroup.errors import InputError
from studygroup.model import estimate
from studygroup.model.interventions import CopyReplacement, PassPlan
from studygroup.model.record import NOTHING, Record, step_name
from studygroup.progress import Progress
from studygroup.study.jsonable import JSONable
from studygroup.study.lens import LensWord
from studygroup.study.results import ModelInfo, model_info
from studygroup.formats import quote
from studygroup.study.text_ids import checked_ids

GRIDS = ("resid_pre", "attn_out", "mlp_out", "heads")
#: A member's stream "carries" the difference where its normalised cell is at least this.
HALF = 0.5
#: Rows (copies × members) of one batched pass at most.
ROWS_PER_PASS = 4096


@dataclass
class PatchGrid(JSONable):
    """One kind of patch: m after each patch, raw and normalised ([layer][member or head])."""

    raw: list[list[float]]
    normalised: list[list[float | None]]  # None for every cell where the two runs' m are equal


@dataclass
class Patching(JSONable):
    """Activation patching of a corrupted text from a clean one. See docs/json.md."""

    model: ModelInfo
    clean_tokens: list[str]
    corrupted_tokens: list[str]
    answer: LensWord  # the metric's first word (prob: in the clean run)
    wrong: LensWord  # its second word (prob: in the corrupted run)
    clean_diff: float  # m in the clean run
    corrupted_diff: float  # m in the corrupted run
    grids: dict[str, PatchGrid]
    story: list[str]


def patch(model, clean, corrupted, *, answer: str | None = None, wrong: str | None = None,
          on_progress=None) -> Patching:
    """Activation patching of `corrupted` from `clean` (texts or ids of the same length).

    answer, wrong: the metric's words (each one token; default the clean run's top word and the
    corrupted run's). on_progress: called with (done, total) layer-passes.

    >>> p = patch(model, "The cat sat on the", "The dog sat on the")
    >>> len(p.grids["resid_pre"].raw), round(p.grids["resid_pre"].normalised[0][1], 4)  # member 1 at layer 0: all of it
    (30, 1.0)
    """
    ids_c, ids_x = checked(model, clean, corrupted, answer, wrong)
    steps = ("resid_pre", "attn_out", "mlp_out", "output")
    clean_run = model.run(ids_c, record=Record(steps=steps))
    # the same ids twice: one run, so that m is one number there (two passes recording different steps
    # round differently, and their ratio would be read as a normalised cell)
    corrupt_run = clean_run if ids_x == ids_c else model.run(ids_x, record=Record(steps=("resid_pre",)))
    a, b = _words(model, clean_run, corrupt_run, answer, wrong)
    m_clean, m_corrupt = _diff(clean_run.last_logits, a, b), _diff(corrupt_run.last_logits, a, b)
    grids = _grids(model, ids_x, clean_run, corrupt_run, a, b, on_progress)
    result = Patching(model_info(model), clean_run.tokens, corrupt_run.tokens,
                      _word(model, clean_run, a), _word(model, corrupt_run, b), m_clean, m_corrupt,
                      {k: PatchGrid(v.tolist(), _normalised(v, m_clean, m_corrupt)) for k, v in grids.items()}, [])
    result.story = story(result)
    return result


def checked(model, clean, corrupted, answer=None, wrong=None) -> tuple[list[int], list[int]]:
    """The two texts' ids, checked before any pass: InputError (one line) for an empty text, texts of
    different lengths, or a metric word that is not one token."""
    ids_c, ids_x = checked_ids(model, clean), checked_ids(model, corrupted)
    if len(ids_c) != len(ids_x):
        raise InputError(f"the clean text is {len(ids_c)} members and the corrupted text {len(ids_x)}: patching "
                         "puts each member's numbers in the same member of the other run, so give texts of the "
                         "same number of tokens (change words for words of one token each)")
    a, b = (None if w is None else _one_token(model, w) for w in (answer, wrong))
    if a is not None and a == b:
        raise InputError(f"the answer and the wrong word are both {model.tokenizer.readable(a)}: the metric is the "
                         "difference of their logits, 0 in every run, so no patch could move it; give two words")
    return ids_c, ids_x


def passes(model, T: int) -> int:
    """Layer-passes patching makes on T members: each layer's copies through that layer and those above."""
    L, H = model.config.n_layers, model.config.n_heads
    per_pass = max(1, ROWS_PER_PASS // T)
    return sum(math.ceil((3 * T + H) / per_pass) * (L - l) for l in range(L))


def cost(model, T: int) -> str:
    """What patching T members will cost, in words, before it runs."""
    L, H = model.config.n_layers, model.config.n_heads
    copies = 3 * T + H
    guess = estimate.layer_passes(model.config, T, copies * T * L * (L + 1) / 2, max(T, ROWS_PER_PASS))
    return (f"patching {copies} places in each of {L} layers ({T} members × resid_pre, attn_out, mlp_out, and "
            f"{H} heads), each layer's copies run from that layer up: {guess}")


def _words(model, clean_run, corrupt_run, answer, wrong) -> tuple[int, int]:
    """The metric's two word ids: given (one token each), else the two runs' top words (the corrupted
    run's second where both runs' top word is the same)."""
    a = _one_token(model, answer) if answer is not None else int(clean_run.last_logits.argmax())
    if wrong is not None:
        return a, _one_token(model, wrong)
    ranked = corrupt_run.last_logits.topk(2).indices.tolist()
    return a, ranked[1] if ranked[0] == a else ranked[0]


def _one_token(model, word: str) -> int:
    ids = model.tokenizer.encode(word) if isinstance(word, str) and word else []
    if len(ids) != 1:
        pieces = " | ".join(model.tokenizer.readable(i) for i in ids) or "nothing"
        raise InputError(f"the word {word!r} is {len(ids)} tokens ({pieces}): the metric compares the logits of "
                         "single tokens; give one (mind a leading space: ' Paris')")
    return ids[0]


def _word(model, run, i: int) -> LensWord:
    return LensWord(model.tokenizer.readable(i), i, float(torch.softmax(run.last_logits.double(), -1)[i]))


def _diff(logits: torch.Tensor, a: int, b: int) -> float:
    """(…, vocab) -> (…,) logit(a) − logit(b), in float64."""
    return logits[..., a].double() - logits[..., b].double() if logits.dim() > 1 else float(logits[a]) - float(logits[b])


def _normalised(raw: torch.Tensor, m_clean: float, m_corrupt: float) -> list[list[float | None]]:
    if m_clean == m_corrupt:
        return [[None] * raw.shape[1] for _ in range(raw.shape[0])]
    return ((raw - m_corrupt) / (m_clean - m_corrupt)).tolist()


@torch.inference_mode()
def _grids(model, ids, clean_run, corrupt_run, a, b, on_progress) -> dict[str, torch.Tensor]:
    """{grid: (L, T) or (L, H) float64 m after each patch}."""
    L, H, T = model.config.n_layers, model.config.n_heads, len(ids)
    out = {g: torch.empty(L, H if g == "heads" else T, dtype=torch.float64) for g in GRIDS}
    total = passes(model, T)
    with Progress(total, "patching, layer by layer") as bar:  # advanced after each layer of each pass
        for l in range(L):
            places = _places(l, T, H)
            per_pass = max(1, ROWS_PER_PASS // T)
            for start in range(0, len(places), per_pass):
                chunk = places[start:start + per_pass]
                m = _diff(_patched_logits(model, ids, l, chunk, clean_run, corrupt_run, bar.advance), a, b)  # (copies,)
                for (grid, i), value in zip(chunk, m.tolist()):
                    out[grid][l, i] = value
                if on_progress is not None:
                    on_progress(bar.done, total)
    return out


def _places(l: int, T: int, H: int) -> list[tuple[str, int]]:
    """Each copy's patch at layer l: (grid, member or head)."""
    return [(g, i) for g in GRIDS for i in range(H if g == "heads" else T)]


def _patched_logits(model, ids, l, chunk, clean_run, corrupt_run, on_layer) -> torch.Tensor:
    """The last member's logits of each copy in `chunk`, the corrupted text from layer l on with
    that copy's patch: (copies, vocab). on_layer: called after each layer of the pass (a Watch set
    on this thread then follows it layer by layer, and stops it there once cancelled)."""
    B, dev = len(chunk), model.device
    start = corrupt_run["resid_pre", l].to(dev, model.dtype).expand(B, -1, -1).clone()  # (B, T, d_model)
    replace: dict[str, list] = {}
    for grid in GRIDS:
        copies = [n for n, (g, _) in enumerate(chunk) if g == grid]
        if not copies:
            continue
        at = torch.tensor([chunk[n][1] for n in copies])
        if grid == "resid_pre":
            start[copies, at] = clean_run["resid_pre", l][at].to(dev, model.dtype)
            continue
        name = "output" if grid == "heads" else grid
        value = clean_run[name, l][at]  # (N, d_model) rows, or (N, T, d_head) heads
        rows, heads = (None, at) if grid == "heads" else (at, None)
        replace[step_name(name, l)] = [CopyReplacement(step_name(name, l), value, torch.tensor(copies), rows, heads)]
    plan = PassPlan(record=NOTHING, start=(l, start), replace=replace, on_layer=on_layer)
    logits, _ = model.forward(torch.tensor(ids, device=dev), plan)  # (B, 1, vocab)
    return logits[:, -1].float()


def _last_member(resid: torch.Tensor, changed: bool) -> list[str]:
    """From which layer the last member's own stream carries the difference (resid (L, T)), and how it
    got there: by attention from the changed members, or in the last member itself when it is one."""
    last = next((l for l in range(resid.shape[0]) if resid[l:, -1].min() >= HALF), None)
    if last is None:
        return []
    if changed:
        return [f"The last member is itself a changed member, and its own stream carries at least half of it "
                f"from layer {last} on: it holds the difference itself, which attention need not move from another "
                "member (heads that add to it are in the head grid)."]
    return [f"The last member's own stream carries at least half of it from layer {last} on: below that layer, "
            "attention moved it there from the changed members; the heads are in the head grid."]


def story(p: Patching) -> list[str]:
    """Where the difference lives: how far up the changed members carry it, from which layer the last
    member carries it, and the heads whose clean output moves it most."""
    m = f"logit({p.answer.token}) − logit({p.wrong.token})"
    said = [f"The metric is {m} at the last member: {p.clean_diff:+.2f} in the clean run, {p.corrupted_diff:+.2f} in "
            "the corrupted run. Each cell runs the corrupted text with one thing taken from the clean run: "
            "1 means that thing alone restores the clean run's difference, 0 that it changes nothing."]
    if p.clean_diff == p.corrupted_diff:
        return said + ["The two runs give the same difference, so no patch can move it: every normalised cell is "
                       "0/0 and left empty."]
    resid = torch.tensor(p.grids["resid_pre"].normalised)  # (L, T)
    changed = [j for j, (a, b) in enumerate(zip(p.clean_tokens, p.corrupted_tokens)) if a != b]
    for j in changed[:2]:
        held = [l for l in range(resid.shape[0]) if resid[l, j] >= HALF]
        where = f"up to layer {held[-1]}" if held else "at no layer"
        said.append(f"Member {j} ({quote(p.clean_tokens[j])} in the clean text, {quote(p.corrupted_tokens[j])} in the "
                    f"corrupted one) carries at least half of it {where} (entering layer 0: {resid[0, j]:.2f}).")
    said += _last_member(resid, len(p.clean_tokens) - 1 in changed)
    heads = torch.tensor(p.grids["heads"].normalised)  # (L, H)
    order = heads.flatten().abs().argsort(descending=True)[:3].tolist()
    named = ", ".join(f"{i // heads.shape[1]}.{i % heads.shape[1]} ({heads.flatten()[i]:+.2f})" for i in order)
    said.append(f"The heads whose output, taken from the clean run, moves it most: {named}.")
    return said
