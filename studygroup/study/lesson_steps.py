"""The lesson's sections, one function each, in the article's order (see `studygroup.study.lesson`).

Each takes the Context (the two runs, the followed head on each, the comparison) and returns the
section's blocks. Every number comes from the runs; sentences only name and compare them.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from studygroup.formulas import attention
from studygroup.study.lesson_blocks import (Block, code, drawn_form_error, grid, summary_header, summary_row, table, text)
from studygroup.study.story import percent, quote


@dataclass
class Context:
    model: object
    run_a: object  # "I have a lot", everything recorded
    run_b: object  # "Cash or credit card? I have a lot"
    head_a: object  # studygroup.model.run.Head: the followed head on text a
    head_b: object
    comparison: object  # studygroup.study.compare.Comparison of the two texts
    top: int  # words in the conclusion's table

    @property
    def name(self) -> str:
        return f"head {self.head_a.head} of layer {self.head_a.layer}"


def _members(tokens: list[str]) -> str:
    return ", ".join(quote(t) for t in tokens)


def notations(ctx: Context) -> list[Block]:
    h = ctx.head_a
    Q, K, V = h.q[None], h.k[None], h.v[None]  # (1, T, d_head): paper notation, rows are members
    out_p, w_p = attention.paper(Q, K, V, mask="causal")
    out_c, w_c = attention.columns(Q.mT, K.mT, V.mT, mask="causal")  # columns are members
    dw, do = float((w_c.mT - w_p).abs().max()), float((out_c.mT - out_p).abs().max())
    T, d = h.q.shape
    return [
        text("The paper writes each member's vector as a row (1 × d). Q, K and V have one row per member, and "
             "Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V, with softmax applied to each row."),
        text("3Blue1Brown's video writes vectors as columns (d × 1): every matrix is transposed, softmax runs down "
             "each column, and the formula that fits is V softmax(Kᵀ Q / √d_k)."),
        text(f"On the real numbers of {ctx.name} for “I have a lot” (T = {T} members, d_head = {d}), both forms "
             f"give the same result: the column form's weights and outputs, transposed, differ from the paper "
             f"form's by at most {dw:.1e} and {do:.1e} (float rounding)."),
        text("As drawn in the video, softmax(Kᵀ Q / √d_k) V does not fit the shapes. Asked to compute it on these "
             "matrices, studygroup.formulas.attention.as_drawn refuses:"),
        code(drawn_form_error(Q.mT, K.mT, V.mT)),
    ]


def members(ctx: Context) -> list[Block]:
    a, b, h = ctx.run_a, ctx.run_b, ctx.head_a
    E = a["layers.0.E"]  # (T, d_model)
    mask = h.mask
    unrotated = attention.scores(h.q_pre_rope[None], h.k_pre_rope[None])[0]  # (T, T)
    rotated = attention.scores(h.q[None], h.k[None])[0]  # (T, T)
    return [
        text(f"The study group for “I have a lot” has {a.T} members, one per token: {_members(a.tokens)} "
             f"(␣ marks a leading space). With the question in front it has {b.T}: {_members(b.tokens)}."),
        text(f"Each member enters as a row of E. Here E is what the first layer's attention reads: the token's "
             f"embedding, normalised (RMSNorm). E is T × d_model = {a.T} × {E.shape[1]}; its first entries:"),
        table("E, layer 0 (one row per member)", summary_header("member"),
              [summary_row(quote(t), E[i]) for i, t in enumerate(a.tokens)]),
        text("The article's E adds a position embedding to each token's embedding. This model (a Llama) adds "
             "none: a token's E is the same wherever it stands. Position enters inside attention instead, by RoPE: "
             "each question and each key is rotated by an angle proportional to its member's position, so a score "
             f"depends on how far apart two members are. The scores of {ctx.name} without and with the rotation:"),
        grid(f"Q·Kᵀ/√d_k without RoPE (q_pre_rope, k_pre_rope), {ctx.name}", a.tokens, unrotated, mask),
        grid(f"Q·Kᵀ/√d_k with RoPE (q, k): what the model uses, {ctx.name}", a.tokens, rotated, mask),
        text(f"The rotation changes the scores by up to {float((rotated - unrotated)[mask].abs().max()):.3g}; "
             f"on the diagonal (a member and itself, distance 0) by at most "
             f"{float((rotated - unrotated).diagonal().abs().max()):.1e}."),
    ]


def questions(ctx: Context) -> list[Block]:
    h, a = ctx.head_a, ctx.run_a
    where = "" if h.layer == 0 else (f" Here E_i is layer {h.layer}'s input: the residual stream after "
                                      f"{h.layer} layers, normalised.")
    return [
        text(f"A head asks one kind of question: its W_Q. In {ctx.name}, each member asks its own version of it, "
             f"q_i = E_i W_Q (then rotated by RoPE). Q is T × d_head = {h.q.shape[0]} × {h.q.shape[1]}.{where}"),
        table(f"Q, {ctx.name}: each member's question", summary_header("question of"),
              [summary_row(quote(t), h.q[i]) for i, t in enumerate(a.tokens)]),
        text("What a question asks is not written anywhere in words: 64 numbers are all there is. "
             "We can only see which answers it matches, in the next section."),
    ]


def keys_and_scores(ctx: Context) -> list[Block]:
    h, a, c = ctx.head_a, ctx.run_a, ctx.model.config
    group = [g for g in range(c.n_heads) if g // c.group_size == h.kv_head]
    scores = h.scores.masked_fill(~h.mask, float("-inf"))  # (T, T)
    best = scores.argmax(-1).tolist()
    own = sum(int(best[i] == i) for i in range(a.T))
    lines = "; ".join(f"{quote(a.tokens[i])} → {quote(a.tokens[j])} ({float(scores[i, j]):.2f})" for i, j in enumerate(best))
    return [
        text(f"Each member's key k_j = E_j W_K (rotated) is the nature of the answer it can give. {ctx.name.capitalize()} "
             f"shares its keys and answers with heads {group} of its layer (key/value head {h.kv_head}: this model "
             f"has {c.n_heads} question heads and {c.n_kv_heads} key/value heads per layer)."),
        table(f"K, {ctx.name}: the nature of each member's answer", summary_header("answer of"),
              [summary_row(quote(t), h.k[i]) for i, t in enumerate(a.tokens)]),
        text("The score of answer j for question i is the dot product q_i · k_j / √d_k: large when the answer's "
             "nature matches the question. A member cannot hear members after it: those cells are masked (empty)."),
        grid(f"scores Q·Kᵀ/√d_k, {ctx.name}", a.tokens, h.scores, h.mask),
        text(f"The best-matching answer for each question: {lines}. The article guessed that a word's own answer "
             f"matches its question best; in this head that holds for {own} of the {a.T} members."),
    ]


def _row(tokens: list[str], scores: torch.Tensor, weights: torch.Tensor) -> list[list]:
    return [[quote(t), float(scores[j]), float(weights[j])] for j, t in enumerate(tokens)]


def softmax(ctx: Context, example) -> list[Block]:
    ha, hb, a, b = ctx.head_a, ctx.head_b, ctx.run_a, ctx.run_b
    sa, wa, sb, wb = ha.scores[-1], ha.weights[-1], hb.scores[-1], hb.weights[-1]  # (T,) each
    shift = b.T - a.T  # member j of a is member j + shift of b, counting from the end
    top = int(wa.argmax())
    prefix = ctx.comparison.prefix.members if ctx.comparison.prefix else list(range(shift))
    prefix_weight = float(wb[prefix].sum())
    return [
        text("Softmax turns each question's absolute scores into relative weights between 0 and 1 that sum to 1. "
             "The article's example, with the exact float64 weights:"),
        code(str(example)),
        text(f"The real scores are {'nothing like' if float(sa.abs().max()) < 50 else 'as large as'} the "
             f"article's 100 and 1,000. In {ctx.name}, the question of {quote(a.tokens[-1])} gets scores from "
             f"{float(sa.min()):.2f} to {float(sa.max()):.2f}:"),
        table(f"the last question's row, “I have a lot”, {ctx.name}", ["member", "score", "weight"],
              _row(a.tokens, sa, wa), shade=False),
        table(f"the last question's row, “Cash or credit card? I have a lot”, {ctx.name}", ["member", "score", "weight"],
              _row(b.tokens, sb, wb)),
        text(f"With the question in front, the last member gives {prefix_weight:.2f} of its weight to the members of "
             f"“Cash or credit card?” (and {quote(b.tokens[0])} alone gets {float(wb[0]):.2f}); its weight on "
             f"{quote(a.tokens[top])} goes from {float(wa[top]):.2f} to {float(wb[top + shift]):.2f}."),
    ]


def _answer_rows(ctx: Context, run, h) -> list[list]:
    W_O_h = ctx.model.W_O_head(h.layer, h.head).float()  # (d_head, d_model)
    sizes = (h.v @ W_O_h).norm(dim=-1)  # (T,) ‖v_j · W_O[h]‖
    w = h.weights[-1]
    return [[quote(t), float(w[j]), float(h.v[j].norm()), float(sizes[j]), float(w[j] * sizes[j])]
            for j, t in enumerate(run.tokens)]


def answers(ctx: Context) -> list[Block]:
    h, a = ctx.head_a, ctx.run_a
    by_hand = h.weights[-1] @ h.v  # (T,) @ (T, d_head) -> (d_head,)
    header = ["member", "weight", "‖v‖", "‖v·W_O‖", "weight × ‖v·W_O‖"]
    return [
        text(f"Each member's answer is v_j = E_j W_V: V is T × d_head = {h.v.shape[0]} × {h.v.shape[1]}."),
        table(f"V, {ctx.name}: each member's answer", summary_header("answer of"),
              [summary_row(quote(t), h.v[i]) for i, t in enumerate(a.tokens)]),
        text(f"The last member's conclusion in this head is the weighted sum Σ_j w_j v_j of the answers. Computed "
             f"by hand it differs from the model's own by {float((by_hand - h.output[-1]).abs().max()):.1e}."),
        text("Weight alone can mislead: a large weight on a small answer adds little. The head writes each answer "
             "through its output projection W_O, so what member j adds is weight × ‖v_j · W_O‖:"),
        table("“I have a lot”, the last question", header, _answer_rows(ctx, a, h)),
        table("“Cash or credit card? I have a lot”, the last question", header, _answer_rows(ctx, ctx.run_b, ctx.head_b)),
    ]


def swapped(ctx: Context) -> list[Block]:
    h, a = ctx.head_a, ctx.run_a
    Q, K, V = h.q[None], h.k[None], h.v[None]  # (1, T, d_head)
    transposed = float((attention.scores(K, Q) - attention.scores(Q, K).mT).abs().max())
    out, w = attention.paper(Q, K, V, mask="causal")
    out_s, w_s = attention.paper(K, Q, V, mask="causal")  # the roles swapped: keys ask, questions answer
    change = float((out_s[0, -1] - out[0, -1]).norm() / out[0, -1].norm())
    return [
        text("Q and K look symmetrical: the score q_i · k_j is a dot product. Swap them and the score grid is "
             f"transposed (largest difference from the transpose on these numbers: {transposed:.1e})."),
        text("But softmax still runs along each row, and V is still multiplied on the right, so the swapped head "
             "weighs different numbers: each member now scores the others by its key against their questions."),
        grid(f"weights with Q and K swapped, softmax(K Qᵀ/√d_k), {ctx.name}", a.tokens, w_s[0], h.mask, shade=True),
        grid(f"the real weights, softmax(Q Kᵀ/√d_k), {ctx.name}", a.tokens, w[0], h.mask, shade=True),
        text(f"The last member's weighted sum changes by {100 * change:.0f}% of its size. Training gives W_Q and "
             "W_K their different roles; the formula's direction keeps them apart."),
    ]


def conclusion(ctx: Context) -> list[Block]:
    c, model = ctx.comparison, ctx.model
    dot = model.tokenizer.encode(".")[-1]
    p_dot = float(torch.softmax(ctx.run_a.last_logits.double(), -1)[dot])
    s = next(x for x in c.shift if x.id == c.word_id)
    rows = [[quote(x.token), x.prob_a, x.prob_b, x.change] for x in c.shift[:ctx.top]]
    heads = [[f"layer {e.layer}, head {e.head}", e.logit_contribution, e.silence_effect, e.prob_silenced]
             for e in c.b.heads[:5]]
    return [
        text(f"The article imagined that “I have a lot” alone would end with a period, and that the question in "
             f"front would bring “of”. The real model already predicts {quote(c.a.predicted.token)} after “I have "
             f"a lot” ({percent(c.a.predicted.prob)}); the period gets {percent(p_dot)}. The question in front "
             f"moves {quote(c.word)} to {percent(s.prob_b)} and changes which alternatives it keeps:"),
        table("the group's conclusion, next word", ["word", "I have a lot", "Cash or credit card? I have a lot",
                                                    "change"], rows),
        *[text(line) for line in c.story],
        table("the most decisive heads for “Cash or credit card? I have a lot”",
              ["head", "direct contribution to the logit", "silence effect (log-prob)", "prob. when silenced"], heads),
    ]
