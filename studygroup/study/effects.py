"""Effects of silencing on the predicted word: exact (batched passes) and first-order (one gradient).

The effect of an intervention is the change in the log-probability of the predicted word t,
log p'(t) - log p(t): negative when what was silenced was helping the group reach t.

- Silencing member j in every head (batched: one pass over copies of the text, each with one
  member's key removed; see `studygroup.formulas.masks`).
- Silencing head (l, h): its write to the residual stream is zeroed (batched per layer), at every
  position, or at the last position only (one row per copy, over the run's keys and values).
- The first-order estimate of every head's silencing effect at once: put a gate g on each head's
  write (g = 1 is the run itself, g = 0 silences it); then  effect ≈ -∂ log p(t) / ∂g  at g = 1,
  from one backward pass. It ranks candidates; the exact effect is then computed for the best.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch

from studygroup.formulas import masks as masks_
from studygroup.model.interventions import CopyReplacement, PassPlan
from studygroup.model.model import Model
from studygroup.model.record import Record, step_name
from studygroup.model.interventions import Interventions, each_added
from studygroup.model.run import Run
from studygroup.study import last_question

#: Rows (copies × tokens) one batched member-silencing pass may hold, to bound its memory.
ROWS_PER_PASS = 4096
#: What reading every weight once costs a pass, in rows of arithmetic (measured here: a 10-row
#: pass takes as long as ~40 more rows in a larger one).
PASS_ROWS = 40
#: Query-key pairs of masked attention that cost as much as one row of the rest of a pass (the
#: multiplies by the weights; measured here: 2,000-3,000 at 55-2,000 rows).
KEYS_PER_ROW = 2000
#: Query-key pairs one pass's mask may hold (bool, per head where only some heads are silenced).
MASK_CELLS = 4 * 2**20
#: Rows of logits turned into float64 log-probabilities at once (`token_log_probs`).
LOG_PROB_ROWS = 64


def log_probs(logits: torch.Tensor) -> torch.Tensor:
    """log softmax in float64: (…, vocab) -> (…, vocab)."""
    return torch.log_softmax(logits.double(), dim=-1)


def token_log_probs(logits: torch.Tensor, token: int) -> torch.Tensor:
    """log p(token) of each row, `log_probs` LOG_PROB_ROWS rows at a time: (B, vocab) -> (B,) float64.

    The same numbers as log_probs(logits)[:, token] (each row's softmax is its own), without B
    rows of float64 log-probabilities and their float64 logits at once: for every head of an 8B
    model (1,024 copies, 128,256 words) those are 2.1 GB.

    >>> x = torch.randn(130, 50)
    >>> torch.equal(token_log_probs(x, 7), log_probs(x)[:, 7])
    True
    """
    out = torch.empty(logits.shape[0], dtype=torch.float64, device=logits.device)  # (B,)
    for a in range(0, logits.shape[0], LOG_PROB_ROWS):
        out[a:a + LOG_PROB_ROWS] = log_probs(logits[a:a + LOG_PROB_ROWS])[:, token]  # a copy: the chunk goes
    return out


def gradient_run(model: Model, ids: list[int], record: Record, on_layer=None,
                 interventions: Interventions = Interventions()) -> tuple[Run, torch.Tensor]:
    """One pass that records `record`, and the first-order silencing estimate of every head.

    Returns the Run (with `interventions`, none by default) and estimate (n_layers, n_heads): -∂ log p(t)/∂g_{l,h},
    with t the run's predicted word and g_{l,h} the gate on head (l, h)'s write.

    >>> run, estimate = gradient_run(model, model.ids("I have a lot"), Record())
    >>> estimate.shape
    torch.Size([30, 9])

    on_layer: called after each layer of the forward pass, then as the backward pass reaches each
    layer's gate (2·n_layers calls: a progress bar's advance).
    """
    c = model.config
    with torch.inference_mode(False), torch.enable_grad():  # even when the caller is in inference mode
        gates = {l: torch.ones(1, c.n_heads, device=model.device, requires_grad=True) for l in range(c.n_layers)}
        if on_layer is not None:
            for g in gates.values():
                g.register_hook(lambda grad: _called(on_layer))
        base = interventions.plan(model, len(ids), record)
        plan = PassPlan(masks=base.masks, gates={l: g * base.gates[l] if l in base.gates else g for l, g in gates.items()},
                        record=record, on_layer=on_layer)
        logits, steps = model.forward(torch.tensor(ids, device=model.device), plan)
        last = log_probs(logits[0, -1])  # (vocab,)
        last[int(last.argmax())].backward()
    estimate = -torch.stack([gates[l].grad[0] for l in range(c.n_layers)]).float().cpu()  # (L, H)
    run = Run(model, ids, interventions, record, logits[0].detach().float(), {k: v[0] for k, v in steps.items()})
    return run, estimate


def _called(f) -> None:
    """Call f(); None, so that as a gradient hook it leaves the gradient as it is."""
    f()


def member_log_probs(model: Model, ids: list[int], token: int, members: Sequence[int],
                     kv: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None, bar=None) -> torch.Tensor:
    """log p(token) with each member silenced alone in every head: (len(members),) float64.

    Batched: model.silenced_logits takes many copies in one pass. kv: {layer: (k, v)}, each
    (H_kv, T, d), from a run of the text without interventions (see `keys_and_values`): silencing
    member j changes no row before j, so a copy then starts at its member and reuses the earlier
    rows. The members, sorted, are split into the passes `passes` chooses.
    bar: a Progress advanced after each layer of each pass (its total set here).
    """
    out = torch.empty(len(members), dtype=torch.float64)
    order = sorted(range(len(members)), key=lambda b: members[b])
    starts = [members[b] for b in order] if kv is not None else [0] * len(members)
    groups = passes(starts, len(ids), packable=kv is not None)
    on_layer = _layers_of(bar, len(groups) * model.config.n_layers)
    for group, packed in groups:
        chosen = [order[b] for b in group]
        logits = model.silenced_logits(ids, [members[b] for b in chosen], kv=kv, on_layer=on_layer,
                                       packed=packed)  # (B, vocab)
        out[chosen] = token_log_probs(logits, token).cpu()
    return out


def _layers_of(bar, total: int):
    """The advance of `bar` (None: no bar), after setting its total to `total` layers."""
    if bar is None:
        return None
    bar.total = total
    return bar.advance


def pass_cost(starts: Sequence[int], T: int, packed: bool, pass_rows: int = PASS_ROWS) -> float | None:
    """What one pass over copies starting at sorted rows `starts` costs, in rows of arithmetic
    (None: it passes the bounds). Side by side, every copy computes from the first start to T;
    packed, each from its own start, but every row then meets the other copies' keys (masked):
    attention costs ~KEYS_PER_ROW query-key pairs a row. Plus `pass_rows` for reading the weights.

    >>> pass_cost([0, 8], 10, packed=False, pass_rows=0), pass_cost([0, 8], 10, packed=True, pass_rows=0)
    (20.1, 12.12)
    """
    if packed:
        rows = sum(T - s for s in starts)
        keys = starts[-1] + rows  # the reused keys, then every packed row
        cells = rows * keys
    else:
        rows = len(starts) * (T - starts[0])
        cells = rows * T
    if len(starts) > 1 and (rows > ROWS_PER_PASS or cells > MASK_CELLS):
        return None
    return rows + cells / KEYS_PER_ROW + pass_rows


def passes(starts: Sequence[int], T: int, pass_rows: int = PASS_ROWS, packable: bool = True) -> list[tuple[range, bool]]:
    """Split copies that start at sorted rows `starts` into consecutive groups, one pass each.

    Returns (group, packed) pairs, the groups ranges of indices into `starts`, of least total
    `pass_cost` (a copy alone always side by side), by dynamic programming. packable: whether a
    pass may pack its copies (they must reuse the clean run's rows).

    >>> passes([0, 1, 2, 3], 4, pass_rows=40)   # a short text: one pass, packed
    [(range(0, 4), True)]
    >>> passes([0, 0, 90, 95], 100, pass_rows=10)   # late members need not compute the early rows
    [(range(0, 2), False), (range(2, 4), True)]
    """
    n = len(starts)
    best, cut = [0.0] + [float("inf")] * n, [(0, False)] * (n + 1)  # best[i]: least cost of copies 0..i-1
    for i in range(1, n + 1):
        for a in range(i - 1, -1, -1):  # the last pass holds copies a..i-1
            modes = (False, True) if packable and i - a > 1 else (False,)
            costs = [(pass_cost(starts[a:i], T, packed, pass_rows), packed) for packed in modes]
            costs = [(cost, packed) for cost, packed in costs if cost is not None]
            if not costs:  # too many rows: no longer group fits either
                break
            cost, packed = min(costs)
            if best[a] + cost < best[i]:
                best[i], cut[i] = best[a] + cost, (a, packed)
    groups, i = [], n
    while i > 0:
        a, packed = cut[i]
        groups.append((range(a, i), packed))
        i = a
    return groups[::-1]


def keys_and_values(run: Run) -> dict[int, tuple[torch.Tensor, torch.Tensor]] | None:
    """{layer: (k, v)}, each (H_kv, T, d) in the model's dtype (a run records float32), from a run
    without interventions that recorded them (else None)."""
    model = run.model
    n = model.config.n_layers
    if run.interventions != Interventions() or not all((s, l) in run for l in range(n) for s in ("k", "v")):
        return None
    return {l: (run["k", l].to(model.dtype), run["v", l].to(model.dtype)) for l in range(n)}


def added_log_probs(model: Model, ids: list[int], token: int, base: Interventions,
                    copies: Sequence[Interventions], bar=None) -> torch.Tensor:
    """log p(token) in a run that silences what `base` and copies[b] silence together, for each b:
    (len(copies),) float64. Every copy runs the whole text (batched, at most ROWS_PER_PASS rows a
    pass): the way to measure on top of a run that already silences something."""
    c, T = model.config, len(ids)
    out = torch.empty(len(copies), dtype=torch.float64)
    per_pass = max(1, ROWS_PER_PASS // T)
    starts = range(0, len(copies), per_pass)
    on_layer = _layers_of(bar, len(starts) * c.n_layers)
    ids_t = torch.tensor(ids, device=model.device)
    with torch.inference_mode():
        for a in starts:
            plan = each_added(base, copies[a:a + per_pass], T, c.n_layers, c.n_heads, model.device)
            plan.on_layer = on_layer
            logits, _ = model.forward(ids_t, plan)  # (B, 1, vocab)
            out[a:a + per_pass] = token_log_probs(logits[:, -1], token).cpu()
    return out


def head_log_probs(model: Model, ids: list[int], token: int, heads: Sequence[tuple[int, int]],
                   resid_pre: dict[int, torch.Tensor] | None = None, bar=None, past=None,
                   per_pass: int | None = None, values: torch.Tensor | None = None) -> torch.Tensor:
    """log p(token) with each head silenced alone: (len(heads),) float64.

    values: None silences by zeroing the head's write (zero ablation); else (n_layers, n_heads, R,
    d_head), what each head's output is replaced by at every row of the pass (R = 1: the same row
    at every member; else one per row): mean or resample ablation (`studygroup.study.ablation`).

    Silencing a head of layer l changes nothing before l, so its copy of the text joins a batched
    pass at layer l, entering it with the clean residual stream: each layer's weights are read once
    for every copy that needs them (a short text's pass is bound by reading the weights, not by
    arithmetic), and no copy computes a layer it does not change. Copies are split into passes of
    at most ROWS_PER_PASS rows. resid_pre: {layer: (T, d_model)} from a recorded run (or None: one
    extra pass records it). bar: a Progress advanced after each layer of each pass. past, per_pass:
    as `_joined_log_probs` takes them.
    """
    def gates(copies, joined, device):
        g = torch.ones(joined, model.config.n_heads, device=device)  # (B by layer l, H)
        g[[b for b, _ in copies], [heads[i][1] for _, i in copies]] = 0
        return g

    def replacements(copies, joined, device):
        l, at = heads[copies[0][1]][0], torch.tensor([heads[i][1] for _, i in copies])
        value = values[l, at].expand(-1, len(ids), -1)  # (B_l, T, d_head)
        return CopyReplacement(step_name("output", l), value, torch.tensor([b for b, _ in copies]), heads=at)
    change = {"gates": gates} if values is None else {"replace": replacements}
    return _joined_log_probs(model, ids, token, [l for l, _ in heads], resid_pre, bar, past=past,
                             per_pass=per_pass, **change)


def last_position_head_log_probs(model: Model, run: Run, token: int, heads: Sequence[tuple[int, int]],
                                 bar=None, values: torch.Tensor | None = None) -> torch.Tensor:
    """log p(token) with each head's write zeroed at the last position only: (len(heads),) float64.

    Only the last row changes (no earlier member hears the last), and only from the head's layer
    on: each copy is the last row alone, joining the batched pass at its head's layer with the
    run's residual stream there, and asking over every earlier member's keys and values from the
    run (shared by every copy, `studygroup.formulas.shared_past`). `run` must have recorded k and v,
    every row, and resid_pre, its last row at least (explain's recordings do).
    """
    past = last_question.earlier_keys_and_values(model, run)  # {layer: (1, H_kv, T-1, d) each}
    resid_pre = {l: run["resid_pre", l][-1:] for l in range(model.config.n_layers)}  # {layer: (1, d_model)}
    heads = [model.check_head(l, h) for l, h in heads]
    return head_log_probs(model, run.token_ids[-1:], token, heads, resid_pre, bar, past=past,
                          per_pass=last_question.COPIES_PER_PASS, values=None if values is None else values[:, :, -1:])


def member_in_head_log_probs(model: Model, ids: list[int], token: int, silenced: Sequence[tuple[int, int, int]],
                             resid_pre: dict[int, torch.Tensor] | None = None, bar=None,
                             kv: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None) -> torch.Tensor:
    """log p(token) with member j silenced in head (l, h) only, for each (l, h, j) of `silenced`:
    (len(silenced),) float64.

    One copy per (head, member), joining the batched pass at layer l (nothing changes before it)
    with the mask changed in that one head of that one layer: every question of head (l, h) stops
    hearing member j; the other heads and layers keep the causal mask. kv: {layer: (k, v)}, each
    (H_kv, T, d), from a run of the text without interventions (`keys_and_values`) with resid_pre:
    no question before j hears j anyway, so the rows before j change nowhere, and a copy then
    computes the rows j… only, over the earlier rows' keys and values as they are.
    """
    T = len(ids)

    def masks(copies, joined, device, rows: range):
        m = torch.ones(joined, model.config.n_heads, len(rows), T, dtype=torch.bool, device=device).tril_(rows.start)  # (B, H, R, T)
        each = masks_.each_member_masks(T, [silenced[i][2] for _, i in copies], device, rows)  # (B_l, R, T)
        m[[b for b, _ in copies], [silenced[i][1] for _, i in copies]] = each
        return m
    for l, h, j in silenced:
        model.check_head(l, h), model.check_member(j, T)
    starts = [j for _, _, j in silenced] if kv is not None and resid_pre is not None else None
    return _joined_log_probs(model, ids, token, [l for l, _, _ in silenced], resid_pre, bar, masks=masks,
                             starts=starts, kv=kv)


def _joined_log_probs(model: Model, ids: list[int], token: int, layers: Sequence[int],
                      resid_pre: dict[int, torch.Tensor] | None, bar, gates=None, masks=None, replace=None,
                      past=None, per_pass: int | None = None, starts: Sequence[int] | None = None,
                      kv=None) -> torch.Tensor:
    """log p(token) for copies of the text that each change one layer, layers[b], and join a
    batched pass there. gates / replace(copies, joined, device), masks(copies, joined, device,
    rows): the layer's (B, H) gates, CopyReplacement or (B, H, R, T) masks of the rows computed for
    the `joined` copies in the pass by then, `copies` the (row, index) pairs of those joining at it.
    past: {layer: (k, v)}, each (1, H_kv, P, d), the keys and values of P earlier members that every
    copy shares (then `ids` and resid_pre's rows are the members after them). starts: the first
    row each copy changes (masks only), with kv {layer: (k, v)}, each (H_kv, T, d), the clean
    run's: the copies starting at a row make passes of their own over the rows from it, the
    earlier rows' keys and values taken from kv. per_pass: copies a pass (None: ROWS_PER_PASS
    rows). -> (len(layers),) float64."""
    if not layers:
        return torch.empty(0, dtype=torch.float64)
    c, T = model.config, len(ids)
    ids_t = torch.tensor(ids, device=model.device)
    starts = [0] * len(layers) if starts is None else starts
    order = sorted(range(len(layers)), key=lambda b: (starts[b], layers[b]))  # by row, then layer: copies join in this order
    groups = []
    for start, same in itertools.groupby(order, key=lambda b: starts[b]):
        same, n = list(same), per_pass or max(1, ROWS_PER_PASS // (T - start))
        groups += [same[i:i + n] for i in range(0, len(same), n)]
    on_layer = _layers_of(bar, sum(c.n_layers - layers[g[0]] for g in groups) + (c.n_layers if resid_pre is None else 0))
    if resid_pre is None:
        _, steps = model.forward(ids_t, PassPlan(record=Record(steps=("resid_pre",)), on_layer=on_layer))
        resid_pre = {l: steps[step_name("resid_pre", l)][0] for l in range(c.n_layers)}
    finals = torch.empty(len(layers), c.d_model, device=model.device, dtype=model.dtype)  # (B, d_model)
    with torch.inference_mode():
        for group in groups:
            start = starts[group[0]]
            changes = {}
            for l in sorted({layers[b] for b in group}):
                copies = [(r, b) for r, b in enumerate(group) if layers[b] == l]
                joined = sum(1 for b in group if layers[b] <= l)
                changes[l] = (masks(copies, joined, model.device, range(start, T)) if masks else
                              (gates or replace)(copies, joined, model.device))
            kind = "gates" if gates else "masks" if masks else "replace"
            shared = past if not start else {l: (k[None, :, :start], v[None, :, :start]) for l, (k, v) in kv.items()}
            finals[group] = _joined_final(model, ids_t[start:], [layers[b] for b in group],
                                          {l: r[start:] for l, r in resid_pre.items()}, changes, kind, on_layer,
                                          shared or {})
        logits = model.final_logits(finals)  # (B, vocab): the family's final norm, then W_U
    return token_log_probs(logits, token)


def _joined_final(model: Model, ids_t: torch.Tensor, layers: list[int], resid_pre: dict[int, torch.Tensor],
                  changes: dict[int, torch.Tensor], kind: str, on_layer=None, past=None) -> torch.Tensor:
    """One pass, one copy per entry of `layers` (sorted), each joining at its layer with the clean
    residual stream; changes {layer: gates, masks or a CopyReplacement} as `kind` says. Returns the last layer's
    residual stream at the last position: (B, d_model)."""
    c, last = model.config, model.config.n_layers - 1
    joining = {l: resid_pre[l].to(model.dtype)[None].expand(layers.count(l), -1, -1)  # (B_l, T, d_model)
               for l in sorted(set(layers))}
    first = layers[0]
    if kind == "replace":  # {layer: CopyReplacement} -> the plan's {name: [replacements]}
        changes = {r.name: [r] for r in changes.values()}
    plan = PassPlan(start=(first, joining.pop(first)), joining=joining,
                    record=Record(steps=("resid_post",), rows="last", layers=(last,)), stop_after=last,
                    on_layer=on_layer, past=past or {}, **{kind: changes})
    _, steps = model.forward(ids_t, plan)
    return steps[step_name("resid_post", last)][:, -1].to(model.dtype)  # (B, d_model)
