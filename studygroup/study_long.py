"""explain for long texts: one bounded pass, and interventions on the last member's questions.

Past LONG_T members, silencing every member (or head) for every question would mean a full pass
over the whole text per candidate. Instead (see `studygroup.last_question`) one pass keeps the
last member's row in every head and every member's keys and values; a silenced member (or head)
is then removed for the last member's questions only (at the last position only), and only
that row is recomputed. The result says so in `heads_silenced` and `members_silenced`.
"""
from __future__ import annotations

import torch

from studygroup import attribution, effects, estimate, last_question
from studygroup.progress import Progress, say
from studygroup.record import Record

#: Past this many members, explain takes the long-text path.
LONG_T = 512
SCOPE = "for the last member's questions only"


def announce(model, T: int, silence_heads, silence_members, stream=None) -> None:
    """Print what the run will need before a large run starts."""
    from studygroup.study import _count

    c = model.config
    heads, members = _count(silence_heads, c.n_layers * c.n_heads), _count(silence_members, T)
    need = estimate.long_explain(c, T, heads + members, last_question.COPIES_PER_PASS)
    say(f"explaining {T} members: {need} (one pass, then one row for each of {heads} silenced heads "
        f"and {members} silenced members)", stream)


def base_run(model, ids: list[int], steps: tuple[str, ...]):
    """One pass keeping the last member's row of `steps` and every member's keys and values."""
    with Progress(model.config.n_layers, "forward pass, layer by layer") as bar:
        return model.run(ids, record=Record(steps=(*steps, *last_question.STEPS), rows="last"), on_layer=bar.advance)


def analyse_long(model, ids: list[int], text, *, top: int, silence_heads, silence_members):
    """study.analyse for long texts (same Explanation; interventions on the last questions only)."""
    from studygroup import story, study

    announce(model, len(ids), silence_heads, silence_members)
    run = base_run(model, ids, study.STEPS)
    lp = effects.log_probs(run.last_logits)  # (vocab,)
    token = int(lp.argmax())
    parts = attribution.direct_contributions(run, token)
    words = study.top_words(run, lp, top)
    heads, heads_said = _heads(run, token, lp[token], parts.heads, silence_heads)
    members, members_said = _members(run, token, lp[token], silence_members)
    e = study.Explanation(text=text if isinstance(text, str) else None, tokens=run.tokens, token_ids=list(ids),
                          predicted=words[0], top=words, heads=heads, heads_silenced=heads_said, members=members,
                          members_silenced=members_said, logit_parts=study._logit_sum(parts),
                          contributions=parts.heads.tolist(), silence_estimates=[], model=study.model_info(model),
                          scope=SCOPE)
    e.story = story.explain_story(e)
    return study.Analysis(e, run)


def _heads(run, token: int, lp_t, direct: torch.Tensor, silence_heads):
    from studygroup import study

    c = run.model.config
    total = c.n_layers * c.n_heads
    n = study._count(silence_heads, total)
    order = direct.flatten().abs().argsort(descending=True, stable=True).tolist()
    chosen = [(i // c.n_heads, i % c.n_heads) for i in order[:n]]
    with Progress(n, f"silencing {n} heads at the last position") as bar:
        lps = last_question.silenced_heads_logits(run.model, run, chosen, token, bar.advance) if n else []
    rank = {i: r + 1 for r, i in enumerate(order)}
    u = attribution.direction_for(run, token)
    out = [study._head_effect(run, l, h, u, float(direct[l, h]), float(s - lp_t), float(s.exp()), None,
                              rank[l * c.n_heads + h]) for (l, h), s in zip(chosen, lps)]
    out.sort(key=lambda e: -abs(e.silence_effect))
    said = "none" if n == 0 else f"top {n} of {total} by |direct contribution|, each silenced at the last position only"
    return out, said


def _members(run, token: int, lp_t, silence_members):
    from studygroup.study import MemberEffect, _count

    T = run.T
    shares = attribution.member_shares(run, token)  # (T,)
    n = _count(silence_members, T)
    chosen = sorted(shares.abs().argsort(descending=True, stable=True)[:n].tolist())
    with Progress(n, f"silencing {n} members for the last questions") as bar:
        lps = last_question.silenced_members_logits(run.model, run, [[j] for j in chosen], token, bar.advance) if n else []
    effect = {j: float(s - lp_t) for j, s in zip(chosen, lps)}
    prob = {j: float(s.exp()) for j, s in zip(chosen, lps)}
    ranks = {j: r + 1 for r, j in enumerate(sorted(effect, key=lambda j: -abs(effect[j])))}
    tokens = run.tokens
    said = (f"{'all' if n == T else f'top {n} of'} {T}" + ("" if n == T else " by |direct share|")
            + f", each silenced {SCOPE} (every member's keys and values reused)")
    return [MemberEffect(j, tokens[j], effect.get(j), prob.get(j), float(shares[j]), ranks.get(j))
            for j in range(T)], said
