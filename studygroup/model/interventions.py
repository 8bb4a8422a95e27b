"""How a pass is modified: the one place that turns silenced members and heads into masks and gates,
and values into replacements at the pass's hook points.

`Interventions` is what a run changes (the user's choice, kept with the run); `PassPlan` is how one
pass of the forward story runs (masks per layer, gates on heads' writes, replacements, what it
keeps, where it starts and stops). The batched passes that silence many things at once build their
plans here too. Shapes: B copies of the text, T members, H = n_heads.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace as with_fields

import torch

from studygroup.errors import InputError
from studygroup.formulas import masks as masks_
from studygroup.model import record as record_
from studygroup.model.ablation import ZERO, Ablation
from studygroup.model.arguments import head_set
from studygroup.model.record import NOTHING, Record, step_name

@dataclass
class PassPlan:
    """How one pass runs: its masks per layer, its gates on heads' writes, what it keeps, where it
    starts and stops, and which copies of the text it carries."""

    masks: dict[int, torch.Tensor] = field(default_factory=dict)  # {layer: (B, 1|H, T, T) bool}
    gates: dict[int, torch.Tensor] = field(default_factory=dict)  # {layer: (B|1, H) or (B|1, H, T)}: 0 silences
    record: Record = NOTHING
    stop_after: int | None = None  # last layer to run (to recompute one layer on demand)
    all_logits: bool = False
    start: tuple[int, torch.Tensor] | None = None  # (layer, resid_pre (B, T, d_model)): resume there
    joining: dict[int, torch.Tensor] = field(default_factory=dict)
    # {layer: (B_l, T, d_model)}: copies that join the batch at that layer (after `start`'s), entering
    # it with this residual stream; masks and gates of a layer cover every copy joined by then.
    past: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    # {layer: (k, v)}, each (1, H_kv, P, d) after RoPE: the keys and values of P earlier members,
    # reused unchanged; `ids` are then only the members after them (a suffix at positions P…).
    positions: torch.Tensor | None = None  # (T,) each row's position, where the rows are not P, P+1, …
    # (copies of a text packed one after another: the masks, given for every layer, keep them apart)
    asked: torch.Tensor | None = None  # (R,) the rows whose next word is predicted (None: the last)
    on_layer: object = None  # called after each layer (a progress bar's advance)
    replace: dict[str, list["Replacement"]] = field(default_factory=dict)  # {full step name: its replacements}

    @property
    def batch(self) -> int:
        """How many copies of the text the pass starts with."""
        if self.start is not None:
            return self.start[1].shape[0]
        return max((t.shape[0] for t in (*self.masks.values(), *self.gates.values())), default=1)


@dataclass(frozen=True, eq=False)
class Replacement:
    """A value the pass takes in place of what it computes at one hook point, and goes on with:
    activation patching, mean or resample ablation, steering.

    name: a recorded step's full name (`record.names`: "layers.5.resid_pre", "embed", "final"; the
      family's own steps too, `record.FAMILY_STEPS`).
    value: the step's shape without the batch axis (`record.shape`), cut to `members` and `heads`,
      or anything that broadcasts to that.
    members: the rows replaced (the questions' rows; the keys' for k and v; None: every row).
    heads: for a step per head (q, k, v, scores, weights, output, write, …), which heads (key/value
      heads for the key steps; None: every head).

    >>> run = model.run("I have a lot", record="all")
    >>> same = model.run("I have a lot", record="all", replace=[Replacement("layers.3.v", run["v", 3])])
    >>> torch.equal(same.logits, run.logits)
    True
    """

    name: str
    value: torch.Tensor
    members: tuple[int, ...] | None = None
    heads: tuple[int, ...] | None = None

    def put(self, t: torch.Tensor, first_row: int = 0) -> torch.Tensor:
        """A copy of t (B, …, rows, …) with the value put in at the rows and heads chosen (rows on the
        second axis from the end; heads on axis 1 of a step per head). first_row: the member of t's row 0."""
        t = t.clone()
        index: list = [slice(None)] * t.dim()
        heads = None if self.heads is None else torch.tensor(self.heads, device=t.device)
        if self.members is not None:
            index[-2] = torch.tensor([m - first_row for m in self.members], device=t.device)
            heads = None if heads is None else heads[:, None]  # heads × rows, not pairs
        if heads is not None:
            index[1] = heads
        t[tuple(index)] = self.value.to(device=t.device, dtype=t.dtype)
        return t


@dataclass(frozen=True, eq=False)
class CopyReplacement:
    """In a pass over B copies of a text, copy copies[n] takes value[n] in place of what it computes
    at the hook point `name`: at its own row rows[n] (a step of (B, T, d)), or at its own head
    heads[n] in every row (a step per head, (B, H, T, d)). One batched pass then patches a
    different place in each copy (activation patching).

    copies, rows, heads: (N,) long; value: (N, d) with rows, (N, T, d) with heads.
    """

    name: str
    value: torch.Tensor
    copies: torch.Tensor
    rows: torch.Tensor | None = None
    heads: torch.Tensor | None = None

    def put(self, t: torch.Tensor, first_row: int = 0) -> torch.Tensor:
        """A copy of t with each copy's value put in (first_row: the member of t's row 0)."""
        t = t.clone()
        copies = self.copies.to(t.device)
        if self.rows is not None:
            t[copies, self.rows.to(t.device) - first_row] = self.value.to(device=t.device, dtype=t.dtype)
        else:
            t[copies, self.heads.to(t.device)] = self.value.to(device=t.device, dtype=t.dtype)
        return t


def checked_replacement(model: "Model", T: int, r: Replacement) -> Replacement:
    """The replacement with its members and heads as sorted tuples, checked against the model and a
    run of T members: InputError (one line) for a name that is no hook point of this model, a member
    or head out of range, or a value whose shape does not fit."""
    if not isinstance(r, Replacement) or not isinstance(r.value, torch.Tensor):
        raise InputError("a replacement is a Replacement(name, value tensor, members=..., heads=...)")
    step = _step_of(model, r.name)
    full = record_.shape(step, model.config, T)  # (…, R, …)
    members = None if r.members is None else tuple(model.check_member(int(j), T) for j in r.members)
    if r.heads is not None and len(full) != 3:
        raise InputError(f"{r.name} is not a step per head: give heads=None")
    heads = None if r.heads is None else tuple(_checked_head(int(h), full[0], r.name) for h in r.heads)
    want = list(full)
    if members is not None:
        want[-2] = len(members)
    if heads is not None:
        want[0] = len(heads)
    try:
        fits = torch.broadcast_shapes(tuple(r.value.shape), tuple(want)) == tuple(want)
    except RuntimeError:
        fits = False
    if not fits:
        raise InputError(f"the value for {r.name} has shape {tuple(r.value.shape)}: it must fit {tuple(want)}"
                         " (the step's shape without the batch axis, cut to the members and heads given)")
    return Replacement(r.name, r.value, members, heads)


def _step_of(model: "Model", name: str) -> str:
    """The step of a hook point's full name, InputError where this model's pass has no such point."""
    c, w = model.config, model.w
    parts = name.split(".") if isinstance(name, str) else []
    step = parts[-1] if parts else ""
    if len(parts) == 3 and parts[0] == "layers" and parts[1].isdigit() and int(parts[1]) < c.n_layers:
        l = int(parts[1])
        own = {"q_normed": f"layers.{l}.q_norm", "k_normed": f"layers.{l}.k_norm", "attn_pre_norm": f"layers.{l}.post_attn_norm"}
        if step in record_.LAYER_STEPS or (step in own and own[step] in w):
            return step
    elif len(parts) == 1 and (step in record_.RUN_STEPS or (step == "pos_embed" and "pos_embed" in w)):
        return step
    raise InputError(f"{name!r} is no hook point of this model: give a recorded step's full name, such as "
                     f"'layers.{c.n_layers - 1}.resid_pre' or 'embed' (studygroup.model.record.names)")


def _checked_head(h: int, n: int, name: str) -> int:
    if not 0 <= h < n:
        raise InputError(f"head {h} does not exist for {name}: it has {n} heads (0-{n - 1})")
    return h


@dataclass(frozen=True)
class Interventions:
    """What a run changes in the model: silenced members (in which heads), silenced heads, how they
    are taken out (`Ablation`: zero, mean or resample), and values replaced at hook points
    (`Replacement`, applied after the silencing of their step).

    >>> Interventions.make(model, 5, members=[1], heads=[(3, 0)], ablation=Ablation("mean")).to_dict()
    {'silence': {'members': [1], 'heads': [[3, 0]]}, 'ablation': {'kind': 'mean', 'reference': 0, 'from': None}}
    """

    silenced_members: tuple[int, ...] = ()
    member_heads: frozenset | None = None  # (layer, head) pairs the members are silenced in; None: all
    silenced_heads: frozenset = frozenset()
    replacements: tuple[Replacement, ...] = ()
    ablation: Ablation = ZERO
    # mean or resample ablation's values at the hook points, for one text (`taken_out`)
    ablated: tuple[Replacement, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def make(cls, model: "Model", T: int, members=(), member_heads=None, heads=(), replace=(),
             ablation: Ablation = ZERO) -> "Interventions":
        """Checked interventions. replace: Replacements, or {full step name: value} (every row)."""
        members = {model.check_member(j, T) for j in members}
        heads, member_heads = head_set(heads) or frozenset(), head_set(member_heads)
        for l, h in heads | (member_heads or frozenset()):
            model.check_head(l, h)
        if member_heads is not None and ablation.kind != "zero":
            raise InputError(f"{ablation.kind} ablation replaces a member's key and value, which a group of heads "
                             "shares: silence members in chosen heads with zero ablation only")
        if isinstance(replace, dict):
            replace = [Replacement(name, value) for name, value in replace.items()]
        replacements = tuple(checked_replacement(model, T, r) for r in replace or ())
        return cls(tuple(sorted(members)), member_heads, heads, replacements, ablation)

    def checked(self, model: "Model", T: int) -> "Interventions":
        """These interventions checked against the model and a run of T members (InputError, one line)."""
        made = Interventions.make(model, T, self.silenced_members, self.member_heads, self.silenced_heads,
                                  self.replacements, self.ablation)
        return with_fields(made, ablated=self.ablated)

    @property
    def zero(self) -> bool:
        """Whether what is silenced is zeroed (its keys masked, its writes gated)."""
        return self.ablation.kind == "zero"

    def taken_out(self, model: "Model", ids: list[int], taken: list[dict] | None = None) -> "Interventions":
        """These interventions with the mean or resample ablation's values for a run of ids (self
        where the ablation is zero or nothing is silenced): each silenced head's output, and each
        silenced member's key and value projections in every layer (`studygroup.model.ablation`).
        taken: `Ablation.taken(model, ids, steps)` of the steps needed, where already computed."""
        if self.zero or self.ablated or not (self.silenced_members or self.silenced_heads):
            return self
        members = self.silenced_members
        steps = (("output",) if self.silenced_heads else ()) + (("k_pre_rope", "v") if members else ())
        taken = self.ablation.taken(model, ids, steps) if taken is None else taken
        out = [Replacement(step_name("output", l), taken[l]["output"][h], heads=(h,)) for l, h in sorted(self.silenced_heads)]
        for l in range(model.config.n_layers) if members else ():
            out += [Replacement(step_name(s, l), t if t.shape[1] == 1 else t[:, list(members)], members=members)
                    for s, t in taken[l].items() if s != "output"]  # (H_kv, 1 or len(members), d)
        return with_fields(self, ablated=tuple(out))

    def cut(self, rows: range) -> "Interventions":
        """These interventions for a pass of these rows alone (the first members of a text, or one
        member's pass over a cache of the members before it): the silenced members after the rows
        dropped (they change nothing in them); under a mean or resample ablation, also those before
        the rows (their taken-out keys and values are the past's), and each value the ablation puts
        in cut to the rows (a mean, the same at every row, kept whole). Needs `taken_out` first."""
        if self.zero:
            return with_fields(self, silenced_members=tuple(j for j in self.silenced_members if j < rows.stop))
        if (self.silenced_members or self.silenced_heads) and not self.ablated:
            raise ValueError(f"{self.ablation.kind} ablation's values are not taken yet: cut interventions.taken_out(model, ids)")
        ablated = tuple(r for r in (_cut(r, rows) for r in self.ablated) if r is not None)
        return with_fields(self, silenced_members=tuple(j for j in self.silenced_members if j in rows), ablated=ablated)

    def replaced(self) -> dict[str, list[Replacement]]:
        """{full step name: its replacements, the ablation's first, then those given in order}."""
        out: dict[str, list[Replacement]] = {}
        for r in (*self.ablated, *self.replacements):
            out.setdefault(r.name, []).append(r)
        return out

    def replaces_in(self, layer: int, steps, given: bool = False) -> bool:
        """Whether one of these steps of this layer is replaced (given: by a Replacement given, not
        by the ablation)."""
        return any(r.name in {step_name(s, layer) for s in steps} for r in (*(() if given else self.ablated), *self.replacements))

    def ablated_output(self, layer: int, head: int, output: torch.Tensor) -> torch.Tensor:
        """A head's output (…, T, d_head) as this run has it: the ablation's value where it takes the head out."""
        for r in self.ablated:
            if r.name == step_name("output", layer) and r.heads == (head,):
                return r.value.to(output.dtype).expand_as(output)
        return output

    def silenced(self) -> dict[str, list]:
        """What is silenced, as the JSON views say it: {"silenced_members": [j, …] (sorted),
        "silenced_heads": [[layer, head], …] (sorted)}."""
        return {"silenced_members": list(self.silenced_members),
                "silenced_heads": [list(p) for p in sorted(self.silenced_heads)]}

    def ablation_field(self) -> dict:
        """{"ablation": Ablation.to_dict()} where what is silenced is taken out by a mean or resample
        ablation; {} for zero ablation (silencing), so a view's JSON names only an ablation that is not."""
        return {} if self.zero else {"ablation": self.ablation.to_dict()}

    def to_dict(self) -> dict:
        """The request's shape (docs/web-api.md): {"silence": {"members", "heads"}, "ablation"}."""
        return {"silence": {"members": list(self.silenced_members), "heads": [list(p) for p in sorted(self.silenced_heads)]},
                "ablation": self.ablation.to_dict()}

    def plan(self, model: "Model", T: int, record: Record, stop_after=None, all_logits=False,
             rows: range | None = None) -> PassPlan:
        """The pass's plan; rows: the members whose rows the pass computes (the last ones: the rest
        reused as `PassPlan.past`), None: all. A mean or resample ablation needs `taken_out` first."""
        if not self.zero and (self.silenced_members or self.silenced_heads) and not self.ablated:
            raise ValueError(f"{self.ablation.kind} ablation's values are not taken yet: plan interventions.taken_out(model, ids)")
        masks = {}
        if self.silenced_members and self.zero:
            mask = masks_.member_mask(T, self.silenced_members, device=model.device, rows=rows)[None]  # (1, R, T)
            masks = masks_.per_layer(mask, self.member_heads, model.config.n_layers, model.config.n_heads)
        gates = head_gates([self.silenced_heads], model.config.n_heads, model.device) if self.zero else {}
        return PassPlan(masks, gates, record, stop_after, all_logits, replace=self.replaced())

    def hides_members(self, layer: int, head: int) -> bool:
        """Whether this head's questions miss the silenced members' keys in this run."""
        return bool(self.silenced_members) and self.zero and (self.member_heads is None or (layer, head) in self.member_heads)

    def mask(self, layer: int, head: int, T: int, rows: range | None = None) -> torch.Tensor:
        """(T, T) bool: which keys each question of this head could see in this run; with rows,
        those questions' rows only (len(rows), T)."""
        return masks_.member_mask(T, self.silenced_members if self.hides_members(layer, head) else (), rows=rows)


def _cut(r: Replacement, rows: range) -> Replacement | None:
    """An ablation's replacement for a pass of these rows alone: its members among them (None where
    none is), its value cut to their rows (a value of one row, the same at every row, kept whole)."""
    whole = r.value.shape[-2] == 1
    if r.members is None:
        return r if whole else Replacement(r.name, r.value[..., rows.start:rows.stop, :], None, r.heads)
    kept = [n for n, j in enumerate(r.members) if j in rows]
    if not kept:
        return None
    return Replacement(r.name, r.value if whole else r.value[..., kept, :], tuple(r.members[n] for n in kept), r.heads)


def head_gates(copies: Sequence[Iterable[tuple[int, int]]], n_heads: int, device=None) -> dict[int, torch.Tensor]:
    """Gates that silence each copy's heads: {layer: (B, H)}, 0 for a silenced head's write, else 1.

    copies: B sets of (layer, head) pairs. Only layers where some copy silences a head have gates.

    >>> head_gates([{(0, 1)}, {(2, 0)}], n_heads=2)
    {0: tensor([[1., 0.],
            [1., 1.]]), 2: tensor([[1., 1.],
            [0., 1.]])}
    """
    copies = [set(c) for c in copies]
    gates = {}
    for l in sorted({l for c in copies for l, _ in c}):
        g = torch.ones(len(copies), n_heads, device=device)  # (B, H)
        for b, c in enumerate(copies):
            g[b, [h for m, h in c if m == l]] = 0
        gates[l] = g
    return gates


def each_member_silenced(config, ids: list[int], members: Sequence[int], heads, P: int,
                         device=None) -> tuple[torch.Tensor, PassPlan]:
    """A batch of copies of rows P.. of the text, copy b with members[b] silenced in `heads`."""
    each = masks_.each_member_masks(len(ids), members, device=device)[:, P:]  # (B, T - P, T)
    plan = PassPlan(masks=masks_.per_layer(each, head_set(heads), config.n_layers, config.n_heads))
    return torch.tensor(ids[P:], device=device), plan


def packed_members_silenced(config, ids: list[int], members: Sequence[int], heads,
                            device=None) -> tuple[torch.Tensor, PassPlan]:
    """One sequence of the copies' own rows, members[b]..T-1 each, copy b with members[b] silenced."""
    T = len(ids)
    silenced, base = masks_.packed_member_masks(T, members, device=device)  # (N, P + N) each
    per_layer = masks_.per_layer(silenced[None], head_set(heads), config.n_layers, config.n_heads, base=base[None])
    positions = torch.cat([torch.arange(j, T, device=device) for j in members])  # (N,)
    ends = torch.tensor([T - j for j in members], device=device).cumsum(0) - 1  # (B,) each copy's last row
    ids_t = torch.tensor(ids, device=device)[positions]  # (N,)
    return ids_t, PassPlan(masks=per_layer, positions=positions, asked=ends)


def each_added(base: Interventions, copies: Sequence[Interventions], T: int, n_layers: int, n_heads: int,
               device=None) -> PassPlan:
    """One pass over B = len(copies) copies of the text, copy b silencing what `base` and copies[b]
    silence together (members in every head): masks {layer: (B, 1, T, T)}, gates {layer: (B, H)}."""
    if any(i.member_heads is not None for i in (base, *copies)):
        raise ValueError("each_added silences members in every head: give member_heads=None")
    members = [set(base.silenced_members) | set(c.silenced_members) for c in copies]
    masks = {}
    if any(members):
        mask = torch.stack([masks_.member_mask(T, m, device=device) for m in members])  # (B, T, T)
        masks = masks_.per_layer(mask, None, n_layers, n_heads)
    gates = head_gates([base.silenced_heads | c.silenced_heads for c in copies], n_heads, device)
    return PassPlan(masks=masks, gates=gates)
