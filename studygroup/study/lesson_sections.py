"""The lesson's sections on any text, for one head: the numbers the page's Lesson mode and
`studygroup lesson [TEXT]` (text, --json, --html) show, from one pass of the model (one source).

The sections, in the article's order (SECTIONS): the members; E at layer 0 and where position
enters; the chosen head's input at its layer; Q, K and V; the scores Q·Kᵀ/√d_k with one dot
product term by term; the softmax of one row beside the article's 100/1/1,000 example; the
weighted sum of the answers; the conclusion and how context changes it. Each section gives its
formula in both notations (rows: the paper; columns: 3Blue1Brown's video) and sentences that state
the numbers it shows.

The default head is the most decisive one (explain's order) that is not resting on a sink: the
chosen question gives < REST_WEIGHT of its weight to the head's sinks (study.sinks.head_sinks_of).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch

from studygroup.errors import InputError, NotationError
from studygroup.formulas import attention
from studygroup.formulas.softmax_example import softmax_example
from studygroup.model.interventions import Interventions
from studygroup.model.record import Record, step_name
from studygroup.study.ablation import head_effects
from studygroup.study.jsonable import JSONable
from studygroup.study.results import top_words
from studygroup.study.sinks import (MAX_QUESTIONS, REST_WEIGHT, SINK_SHARE, SINK_WEIGHT, head_sinks_of, rests_on_sink,
                                     sink_weight)
from studygroup.formats import brief, clipped, percent, quote, signed
from studygroup.study.story import MEMBER_TAKEN_OUT, TAKEN_OUT, members_line
from studygroup.study.text_ids import checked_ids, checked_pair

#: The sections' names, in order (the page's URL and the JSON use them).
SECTIONS = ("members", "embedding", "layer_input", "qkv", "scores", "softmax", "weighted_sum", "conclusion")
#: Past this many members the T × T score grid is left out (the chosen row and pair stay).
GRID_MAX_T = 64
#: Past this many members Q, K and V hold only this many members' rows (`shown_members`).
VECTORS_MAX_T = 64
TOP = 5


@dataclass
class LessonSections(JSONable):
    """The lesson on one text for one head. See docs/json.md ("LessonSections")."""

    text: str
    tokens: list[str]
    layer: int
    head: int
    query: int  # the question followed
    key: int  # the answer followed
    silenced_members: list[int]
    silenced_heads: list[list[int]]
    sections: list[dict]  # in SECTIONS order: name, title, formula_paper, formula_columns, says, numbers

    def __repr__(self) -> str:
        """<LessonSections of 8 sections on head 6 of layer 24, “…”, question 9; …>"""
        return brief(self, f"of {len(self.sections)} sections on head {self.head} of layer {self.layer}, "
                           f"{clipped(self.text, 30)}, question {self.query}", ".section(n), .sections, .to_dict()")

    def section(self, n: int) -> dict:
        """Section n (1-based, as the CLI's --section); InputError for a number outside 1..8."""
        return self.sections[check_section(n) - 1]


def _floats(x: torch.Tensor) -> list:
    return x.double().tolist()


@dataclass
class Followed:
    """The head the lesson follows, as it reads it: every member's vectors, (T, d_head) each, and
    the rows of the questions it needs, (R, T) each: the question followed and the last
    min(T, MAX_QUESTIONS), where the head's sinks are found (every row up to 512 members). No
    T × T map past that: 8,191 members cost 512 rows, not 8,191."""

    layer: int
    head: int
    kv_head: int
    q_pre_rope: torch.Tensor
    k_pre_rope: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    asked: list[int]  # the questions whose rows are held, in order
    scores: torch.Tensor  # (R, T) q·k/√d_k, every cell (the masked ones too)
    weights: torch.Tensor  # (R, T) softmax per row over the cells the question hears
    mask: torch.Tensor  # (R, T) bool: the cells it hears
    output: torch.Tensor  # (R, d_head) Σ_j w_ij v_j

    def row(self, name: str, i: int) -> torch.Tensor:
        """Question i's row of scores, weights, mask or output."""
        return getattr(self, name)[self.asked.index(i)]

    def sinks(self) -> list[int]:
        """The head's sinks (sinks.head_sinks_of its last questions' rows)."""
        T = self.q.shape[0]
        tail = self.weights[-min(T, MAX_QUESTIONS):]  # (R', T) the last questions
        return head_sinks_of(tail)


def followed(run, layer: int, head: int, i: int) -> Followed:
    """Head `head` of `layer` in `run`, for question i (see Followed)."""
    vec = run.head_vectors(layer, head)  # (T, d_head) each: no T × T map
    tail = range(max(0, run.T - MAX_QUESTIONS), run.T)
    parts = ([] if i in tail else [range(i, i + 1)]) + [tail]  # i before the tail: its row first
    asked = [r for part in parts for r in part]
    mask = torch.cat([run.head_mask(layer, head, part) for part in parts])  # (R, T)
    q = vec["q"][asked]  # (R, d_head)
    output, weights = attention.paper(q[None], vec["k"][None], vec["v"][None], mask=mask)  # (1, R, d), (1, R, T)
    return Followed(layer, head, run.model.config.kv_head_of(head), vec["q_pre_rope"], vec["k_pre_rope"],
                    vec["q"], vec["k"], vec["v"], asked, attention.scores(q[None], vec["k"][None])[0], weights[0],
                    mask, output[0])


def sink_share(h: Followed, i: int) -> tuple[list[int], float]:
    """The head's sinks and the weight question i gives them.

    >>> run = model.run("Cash or credit card? I have a lot")
    >>> members, weight = sink_share(followed(run, 24, 6, 9), 9)
    >>> members, round(weight, 4) == round(float(run.head(24, 6).weights[9, members].sum()), 4)
    ([0], True)
    """
    s = h.sinks()
    return s, sink_weight(h.row("weights", i), s)


def default_head(model, text: str, ranked: list[tuple[int, int]], i: int = -1) -> tuple[int, int]:
    """The first head of `ranked` (most decisive first) not resting on a sink for question i;
    the first of `ranked` if every one rests on a sink."""
    run = model.run(checked_ids(model, text), record="none")
    i = i % run.T
    for l, h in ranked:
        if not rests_on_sink(sink_share(followed(run, l, h, i), i)[1]):
            return l, h
    return ranked[0]


def _shorter(text: str) -> str | None:
    """The text without its first sentence (or first word): the context the conclusion is compared with."""
    parts = re.split(r"(?<=[.?!])\s+", text.strip(), maxsplit=1)
    if len(parts) == 2 and parts[1]:
        return parts[1]
    words = text.strip().split(maxsplit=1)
    return words[1] if len(words) == 2 else None


def lesson_sections(model, text: str, layer: int, head: int, query: int | None = None, key: int | None = None,
                    interventions: Interventions = Interventions(), top: int = TOP) -> LessonSections:
    """Every section's numbers for `text`, head `head` of layer `layer`, question `query` (default:
    the last member) and answer `key` (default: the one it weighs most); the conclusion lists `top`
    next words. interventions: the lesson of a run with its members and heads silenced. See
    docs/json.md ("lesson").

    >>> d = lesson_sections(model, "I have a lot", 0, 0)
    >>> [s["name"] for s in d.sections][:3]
    ['members', 'embedding', 'layer_input']
    """
    model.check_head(layer, head)
    ids = checked_ids(model, text)
    T = len(ids)
    i = T - 1 if query is None else model.check_member(query, T)
    key = None if key is None else checked_pair(model, T, i, key)[1]  # refused before the pass
    vectors = tuple(step_name(s, layer) for s in ("q_pre_rope", "k_pre_rope", "q", "k", "v"))
    record = Record(steps=(step_name("E", 0), step_name("E", layer), step_name("resid_pre", layer), *vectors))
    run = model.run(ids, record=record, interventions=interventions)
    h = followed(run, layer, head, i)
    j = int(h.row("weights", i).argmax()) if key is None else key
    ctx = dict(model=model, run=run, h=h, i=i, j=j, text=text, top=top)
    sections = [globals()["_" + name](**ctx) for name in SECTIONS]
    for s, name in zip(sections, SECTIONS):
        s["name"] = name
    silenced = run.interventions.silenced()
    return LessonSections(text, run.tokens, layer, head, i, j, silenced["silenced_members"], silenced["silenced_heads"],
                          sections)


def _section(title: str, paper: str, columns: str, says: list[str], **numbers) -> dict:
    return {"title": title, "formula_paper": paper, "formula_columns": columns, "says": says, **numbers}


def _members(model, run, h, i, j, text, top) -> dict:
    return _section(
        "The study group: its members", "one row per member: T rows", "one column per member: T columns",
        [f"{members_line(run.tokens)} Each member is one token of the text.",
         f"The question followed is member {i}'s ({quote(run.tokens[i])}); the answer followed is member {j}'s "
         f"({quote(run.tokens[j])})."], T=run.T)


def _embedding(model, run, h, i, j, text, top) -> dict:
    E0 = run["layers.0.E"]  # (T, d_model)
    d_model, arch = E0.shape[1], model.config.arch
    learned = arch.position == "learned"
    position = ([f"This model adds a learned position embedding: E = token embedding + position embedding "
                 f"(row p of a learned table for the member at position p), literally, before the {arch.norm_name}. "
                 "The same token's E differs with where it stands; attention turns nothing: q and k are used as "
                 "made."] if learned else
                ["This model adds no position embedding: a token's E is the same wherever it stands (a model with "
                 "learned positions has E = token + position, literally). Position enters inside attention, by RoPE: "
                 "each question q and each key k is turned by an angle set by its member's position, so a score "
                 "depends on how far apart the two members are.",
                 f"Here RoPE changes the score of the pair ({i}, {j}) in head {h.head} of layer {h.layer} (the head this "
                 "lesson follows) from "
                 f"{float(h.q_pre_rope[i] @ h.k_pre_rope[j]) / math.sqrt(h.q.shape[1]):.4g} (unturned) to "
                 f"{float(h.row('scores', i)[j]):.4g}."])
    return _section(
        "E at layer 0: the token embedding, and where position enters",
        f"E is T × d_model = {run.T} × {d_model}: row i is member i", f"E is d_model × T = {d_model} × {run.T}: column i is member i",
        [f"Each member enters as its token's embedding{' plus its position' if learned else ''}, normalised "
         f"({arch.norm_name}): a vector of d_model = {d_model} numbers. "
         f"Member {i}'s has norm {float(E0[i].norm()):.4g}; member {j}'s {float(E0[j].norm()):.4g}.", *position],
        d_model=d_model, query_row=_floats(E0[i]), key_row=_floats(E0[j]), norms=_floats(E0.norm(dim=-1)))


def _layer_input(model, run, h, i, j, text, top) -> dict:
    E = run["E", h.layer]  # (T, d_model)
    writers = "layer 0" if h.layer == 1 else f"the {h.layer} earlier layers"
    earlier = ("Layer 0: nothing has been written yet, so the input is E itself." if h.layer == 0 else
               f"It is not the token embedding: it is E plus what {writers} wrote (the residual "
               f"stream), normalised ({model.config.arch.norm_name}). Member {i}'s row has norm {float(E[i].norm()):.4g}.")
    return _section(
        f"The input of layer {h.layer}: the normalised residual stream",
        f"E (layer {h.layer}) is T × d_model: row i is member i", f"E (layer {h.layer}) is d_model × T: column i is member i",
        [f"Head {h.head} of layer {h.layer} reads the members as its layer's input, not as layer 0's E. {earlier}"],
        query_row=_floats(E[i]), key_row=_floats(E[j]), norms=_floats(E.norm(dim=-1)))


def _qkv(model, run, h, i, j, text, top) -> dict:
    T, d = h.q.shape
    shown = shown_members(T, i, j)
    d_model = run["E", h.layer].shape[1]
    normed = f"layers.{h.layer}.q_norm" in model.w  # Gemma 3: a per-head RMSNorm of q and k before RoPE
    then = ("q and k then normalised per head (RMSNorm over d_head) and turned by RoPE" if normed else
            "q and k then turned by RoPE" if model.config.arch.position == "rope" else "no turning: position entered with E")
    return _section(
        "Questions Q, natures of the answers K, answers V",
        f"Q = E·W_Q, K = E·W_K, V = E·W_V: E (T × {d_model}) times W_Q, W_K, W_V ({d_model} × {d}) gives T × {d}; {then}",
        f"Q = W_Qᵀ·E, K = W_Kᵀ·E, V = W_Vᵀ·E: ({d} × {d_model}) times E ({d_model} × T) gives {d} × T",
        [f"W_Q, W_K and W_V are d_model × d_head = {d_model} × {d} matrices of head {h.head} (its keys and answers "
         f"are shared with its key/value group: key/value head {h.kv_head}). Each member's question, key and answer "
         f"is a vector of d_head = {d} numbers.",
         f"Member {i}'s question q_{i} has norm {float(h.q[i].norm()):.4g}; member {j}'s key k_{j} "
         f"{float(h.k[j].norm()):.4g} and answer v_{j} {float(h.v[j].norm()):.4g}.", *_rows_left_out(shown, T)],
        d_head=d, members=shown, q=_floats(h.q[shown]), k=_floats(h.k[shown]), v=_floats(h.v[shown]),
        scales={n: float(getattr(h, n)[shown].abs().max()) for n in ("q", "k", "v")})  # each drawing's colour scale: ±this


def member_row(qkv: dict, name: str, m: int) -> list[float]:
    """Member m's row of "q", "k" or "v" in the qkv section as JSON gives it (rows of its `members`)."""
    return qkv[name][qkv["members"].index(m)]


def shown_members(T: int, i: int, j: int, n: int | None = None) -> list[int]:
    """The members whose rows of Q, K and V the lesson shows: all T up to n; past that n of them:
    the first four (where sinks sit), the answer followed and three on either side, then the
    question followed and the members just before it, as many as fit.

    >>> shown_members(5, 4, 0)
    [0, 1, 2, 3, 4]
    >>> shown_members(100, 99, 50, n=16)
    [0, 1, 2, 3, 47, 48, 49, 50, 51, 52, 53, 95, 96, 97, 98, 99]
    """
    n = VECTORS_MAX_T if n is None else n
    if T <= n:
        return list(range(T))
    chosen = set(range(4)) | {m for m in range(j - 3, j + 4) if 0 <= m < T}
    m = i
    while len(chosen) < n and m >= 0:
        chosen.add(m)
        m -= 1
    return sorted(chosen)


def _sinks_said(members: list[int], share: float, i: int, rests: bool) -> str:
    """The sentence on the head's attention sinks and question i's weight on them."""
    if not members:
        return (f"This head has no attention sink: no member takes {SINK_WEIGHT} of the weight of "
                f"{SINK_SHARE:.0%} of its questions.")
    return (f"This head's sinks ({_members_named(members)}) take {share:.4g} of question {i}'s weight"
            + (": the head rests on a sink, and its weights say little about meaning." if rests else "."))


def _ablated(model, run, h, text) -> dict | None:
    """The head's effect on log p of the text's next word zeroed and mean-ablated (its output replaced
    by its mean over the text's own members): {"predicted", "zero", "mean"}; None on a run with
    something silenced (the measure takes the head out of the plain run)."""
    if run.interventions != Interventions():
        return None
    a = head_effects(model, text, [(h.layer, h.head)])
    return {"predicted": a.predicted, "zero": a.heads[0].zero, "mean": a.heads[0].mean}


def _ablation_said(h, ablated: dict | None) -> list[str]:
    """Two sentences on why zero ablation misleads with a head resting on a sink, with its measure."""
    if ablated is None:
        return []
    return ["A head resting on a sink writes nearly the same vector on every text; zeroing it (zero ablation) removes "
            "that constant too, while mean ablation (its output replaced by its mean over this text's members) "
            "removes only what this text changes.",
            f"Taking head {h.layer}.{h.head} out changes log p({quote(ablated['predicted'])}), the predicted next word, by "
            f"{ablated['zero']:+.2g} zeroed and by {ablated['mean']:+.2g} mean-ablated"
            + (": zero ablation overstates what it does here." if abs(ablated["mean"]) < abs(ablated["zero"]) / 2 else ".")]


def _members_named(members: list[int]) -> str:
    """"member 0", "members 0 and 3", "members 0, 3 and 5".

    >>> _members_named([0]), _members_named([0, 3]), _members_named([0, 3, 5])
    ('member 0', 'members 0 and 3', 'members 0, 3 and 5')
    """
    if len(members) == 1:
        return f"member {members[0]}"
    return "members " + ", ".join(map(str, members[:-1])) + f" and {members[-1]}"


def _rows_left_out(shown: list[int], T: int) -> list[str]:
    """The sentence saying which members' rows are shown, where not all are."""
    if len(shown) == T:
        return []
    return [f"Of the {T} members, the rows of {len(shown)} are shown here (members {_ranges(shown)}): the first "
            "four, the answer followed and its neighbours, and the question followed with the members before it; "
            "the head view shows any member's."]


def _ranges(members: list[int]) -> str:
    """Sorted members as runs: [0, 1, 2, 5, 7, 8] -> "0-2, 5, 7-8"."""
    runs, start = [], members[0]
    for a, b in zip(members, members[1:] + [None]):
        if b != a + 1:
            runs.append(str(start) if start == a else f"{start}-{a}")
            start = b
    return ", ".join(runs)


def _scores(model, run, h, i, j, text, top) -> dict:
    d = h.q.shape[1]
    terms = h.q[i].double() * h.k[j].double()  # (d_head,)
    dot = float(terms.sum())
    score = float(h.row("scores", i)[j])
    grid = [[float(x) if seen else None for x, seen in zip(h.row("scores", a), h.row("mask", a))] for a in range(run.T)] \
        if run.T <= GRID_MAX_T else None  # every row is held up to MAX_QUESTIONS members
    says = [f"The score of answer j for question i is q_i · k_j / √d_k, with √d_k = √{d} = {math.sqrt(d):.4g}.",
            f"For the pair ({i}, {j}): q_{i} · k_{j} = Σ of {d} products = {dot:.4g}; divided by {math.sqrt(d):.4g} "
            f"that is {dot / math.sqrt(d):.4g} (the model's score: {score:.4g}).",
            "A member cannot hear the members after it: those cells are masked (the future), not zero."]
    if grid is None:
        says.append(f"The whole grid ({run.T} × {run.T}) is left out here; the head view draws it.")
    return _section(
        "Scores: Q·Kᵀ/√d_k", "scores = Q·Kᵀ/√d_k: T × T, row i is question i",
        "scores = Kᵀ·Q/√d_k: T × T, column i is question i", says,
        sqrt_d_k=math.sqrt(d), terms=_floats(terms), dot=dot, score=score, grid=grid)


def _softmax(model, run, h, i, j, text, top) -> dict:
    row_s, row_w = h.row("scores", i), h.row("weights", i)  # (T,)
    seen = h.row("mask", i)
    ex = softmax_example()
    sink_members, share = sink_share(h, i)
    rests = share >= REST_WEIGHT
    top = float(row_s[seen].max())
    exps = torch.where(seen, (row_s.double() - top).exp(), 0.0)  # (T,) exp(s_j − max): the same ratios as exp(s_j)
    says = [f"Softmax turns question {i}'s scores into weights between 0 and 1 that sum to 1 "
            f"(here {float(row_w.sum()):.6f}). Its scores run from {float(row_s[seen].min()):.4g} to "
            f"{top:.4g}; member {j} gets weight {float(row_w[j]):.4g}.",
            f"Each weight is exp(s_j) / Σ_k exp(s_k). Subtracting the largest score first ({top:.4g}) changes no "
            f"weight (e^−{top:.4g} cancels above and below) and keeps exp from overflowing: for member {j}, "
            f"exp({float(row_s[j]) - top:.4g}) = {float(exps[j]):.4g}, divided by the sum of all {int(seen.sum())} "
            f"exps {float(exps.sum()):.4g}, is {float(exps[j] / exps.sum()):.4g}.",
            f"The article's example: scores 1, 1, 1, 100 give “lot” weight {ex.alone.said(-1)}; with four "
            f"members scoring 1,000 in front, each of those gets {ex.after_question.said(0)} and “lot” "
            f"{ex.after_question.said(-1)}. "
            + ("The real scores are far smaller, so the weights are less extreme." if float(row_s[seen].abs().max()) < 50
               else "The real scores are as large as the article's."),
            _sinks_said(sink_members, share, i, rests)]
    ablated = _ablated(model, run, h, text) if rests else None
    says += _ablation_said(h, ablated)
    example = [{"context": g.context, "members": list(g.members), "scores": list(g.scores), "weights": list(g.weights)}
               for g in (ex.alone, ex.after_question)]
    return _section(
        "Softmax of one question's scores", "softmax per row: row i of the weights sums to 1",
        "softmax per column: column i of the weights sums to 1", says,
        scores=[float(x) if m else None for x, m in zip(row_s, seen)], weights=_floats(row_w),
        sinks=sink_members, sink_weight=share, rests_on_sink=rests, ablation=ablated, example=example,
        shift=top, exps=[float(x) if m else None for x, m in zip(exps, seen)], exp_sum=float(exps.sum()))


def _weighted_sum(model, run, h, i, j, text, top) -> dict:
    w = h.row("weights", i)  # (T,)
    by_hand = w.double() @ h.v.double()  # (T,) @ (T, d_head) -> (d_head,)
    W_O_h = model.W_O_head(h.layer, h.head).float()  # (d_head, d_model)
    sizes = (h.v @ W_O_h).norm(dim=-1)  # (T,)
    Q, K, V = h.q.mT[None], h.k.mT[None], h.v.mT[None]  # (1, d_head, T): the video's columns
    t = int(h.row("output", i).abs().argmax())  # the coordinate worked out: the output's largest
    seen = h.row("mask", i)
    terms = w.double() * h.v[:, t].double()  # (T,) w_j · v_j[t]
    return _section(
        "The weighted sum of the answers", "output_i = Σ_j w_ij v_j: output = weights · V (T × d_head)",
        "output_i = Σ_j v_j w_ji: output = V · weights (d_head × T), so V softmax(KᵀQ/√d_k)",
        [f"Question {i}'s conclusion in this head is Σ_j w_ij v_j, {h.v.shape[1]} numbers; computed by hand it "
         f"differs from the model's own by {float((by_hand - h.row('output', i).double()).abs().max()):.1e}.",
         f"Member {j}'s part is w·v_{j} with w = {float(w[j]):.4g}; through the output projection W_O "
         f"its size is w × ‖v_{j}·W_O‖ = {float(w[j] * sizes[j]):.4g}.",
         f"One coordinate worked out: t = {t}, the output's largest. output_{i}[{t}] = Σ_j w_j · v_j[{t}], one term per "
         f"member it hears ({int(seen.sum())}), sums to {float(terms[seen].sum()):.4g}; the model's own: "
         f"{float(h.row('output', i)[t]):.4g}.",
         "In columns the answers stand as V (d_head × T) and must multiply the weights from the left: the video's "
         "drawn softmax(KᵀQ/√d_k)·V does not fit the shapes. The library's own check says: " + _drawn_form_error(Q, K, V)],
        output=_floats(h.row("output", i)), contributions=_floats(w * sizes), t=t,
        v_t=[float(x) if m else None for x, m in zip(h.v[:, t].double(), seen)],
        terms=[float(x) if m else None for x, m in zip(terms, seen)], terms_sum=float(terms[seen].sum()))


def _conclusion(model, run, h, i, j, text, top) -> dict:
    full = _top(model, text, top, run)
    silenced = run.interventions != Interventions()
    plain = _top(model, text, top) if silenced else full  # the context is compared with nothing silenced on either side
    shorter = _shorter(text)
    other = _top(model, shorter, top) if shorter else None
    says = [f"After the last layer, the group's most likely next word is {_said_top(full)}."]
    nothing = "nothing silenced" if run.interventions.zero else "nothing taken out"
    if silenced:
        says = [f"After the last layer, with {_silencing_said(run)}, the group's most likely next word is {_said_top(full)}; "
                f"with {nothing} it is {_said_top(plain)}."]
    if other:
        says.append(f"Without {clipped(text[:len(text) - len(shorter)].strip(), 60)} in front ({clipped(shorter, 60)}"
                    f"{', ' + nothing if silenced else ''}), it is {_said_top(other)}: the context changes the conclusion"
                    + (" and keeps its first word." if other[0]["token"] == plain[0]["token"] else "."))
    return _section(
        "The conclusion, and how context changes it", "the last member's row of the last layer gives the next word",
        "the last member's column of the last layer gives the next word", says,
        top=full, unsilenced_top=plain if silenced else None, shorter_text=shorter, shorter_top=other)


def _said_top(words: list[dict]) -> str:
    """The first of the top words and its probability: '“␣of” (96%)'."""
    return f"{quote(words[0]['token'])} ({percent(words[0]['prob'])})"


def _silencing_said(run) -> str:
    """What the run silences, in words: 'member 8 (“␣a”) silenced (its keys removed) and head 3 of
    layer 1 silenced (its write zeroed)', or taken out by its ablation."""
    taken = run.interventions
    kind = taken.ablation.kind
    how = "silenced" if taken.zero else "taken out"
    where = "" if taken.member_heads is None else f" in {len(taken.member_heads)} chosen heads"
    parts = [f"member {j} ({quote(run.tokens[j])}) {how}{where} ({MEMBER_TAKEN_OUT[kind]})" for j in sorted(taken.silenced_members)]
    parts += [f"head {hd} of layer {l} {how} ({TAKEN_OUT[kind]})" for l, hd in sorted(taken.silenced_heads)]
    parts += [f"{len(taken.replacements)} values replaced"] if taken.replacements else []
    return " and ".join(parts)


def _top(model, text: str, top: int, run=None) -> list[dict]:
    run = run or model.run(checked_ids(model, text), record="none")
    lp = torch.log_softmax(run.last_logits.double().flatten(), -1)  # (vocab,)
    return [{"token": w.token, "id": w.id, "prob": w.prob} for w in top_words(run, lp, top)]


def _drawn_form_error(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> str:
    """The message attention.as_drawn raises for these column-notation matrices (1, d_head, T)."""
    try:
        attention.as_drawn(Q, K, V)
    except NotationError as e:
        return str(e)
    raise AssertionError("as_drawn must refuse")  # pragma: no cover


def check_section(n: int) -> int:
    """n, when 1 <= n <= the number of sections (the CLI's --section); InputError otherwise.

    >>> check_section(9)
    Traceback (most recent call last):
    studygroup.errors.InputError: section 9 does not exist: the lesson has 8 sections (1-8)
    """
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= len(SECTIONS):
        raise InputError(f"section {n} does not exist: the lesson has {len(SECTIONS)} sections (1-{len(SECTIONS)})")
    return n


def check_section_name(name: str) -> int:
    """The index of a section by name; InputError naming the sections otherwise."""
    if name not in SECTIONS:
        raise InputError(f"section {name!r} does not exist: the sections are {', '.join(SECTIONS)}")
    return SECTIONS.index(name)
