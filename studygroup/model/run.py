"""A run of the model on one text: its logits, what was recorded, and one head as a study group."""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from studygroup.formulas import attention
from studygroup.errors import InputError
from studygroup.model.arguments import whole_number
from studygroup.model.interventions import Interventions
from studygroup.model.record import FAMILY_STEPS, KEY_STEPS, LAYER_STEPS, MAP_STEPS, Record, step_name

#: The steps one head needs to be shown whole.
HEAD_STEPS = ("q_pre_rope", "k_pre_rope", "q", "k", "v", "scores", "weights", "output", "write")


@dataclass(frozen=True, repr=False)
class Head:
    """One head of one layer as a study group, in the paper's orientation (rows are members).

    q, q_pre_rope: (T, d_head) the questions; k, k_pre_rope: (T, d_head) the natures of the
    answers; v: (T, d_head) the answers; scores, weights: (T, T); output: (T, d_head) the
    weighted sums; write: (T, d_model) the head's write to the residual stream; mask: (T, T).
    kv_head: the key/value head this query head shares with its group.
    """

    layer: int
    head: int
    kv_head: int
    q_pre_rope: torch.Tensor
    k_pre_rope: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    scores: torch.Tensor
    weights: torch.Tensor
    output: torch.Tensor
    write: torch.Tensor
    mask: torch.Tensor

    def __repr__(self) -> str:
        T, d_head = self.q.shape
        return (f"Head(layer={self.layer}, head={self.head}, kv_head={self.kv_head}, T={T}, d_head={d_head}; "
                f"q k v: (T, d_head), scores weights mask: (T, T), output: (T, d_head), write: (T, d_model))")


class Run:
    """Logits and recorded steps of one pass. `run["layers.3.weights"]`, or `run["weights", 3]`,
    gives a step by name.

    Recorded tensors have no batch dimension: (n_heads, R, T) for weights, and so on (see
    `studygroup.model.record`). `run.logits` is (1, vocab) by default, (T, vocab) with logits="all".
    """

    def __init__(self, model: "Model", token_ids: list[int], interventions: Interventions, record: Record,
                 logits: torch.Tensor, steps: dict[str, torch.Tensor]):
        self.model, self.token_ids, self.interventions, self.record = model, token_ids, interventions, record
        self.logits, self.steps = logits, steps
        self._tokens: list[str] | None = None
        # (layer, its steps): the vectors of the last layer head_vectors made a pass for (T × d_head each)
        self._layer_vectors: tuple[int, dict] | None = None

    @classmethod
    @torch.inference_mode()
    def compute(cls, model: "Model", ids: list[int], interventions: Interventions, record: Record, logits: str = "last",
                on_layer=None, start: tuple[int, torch.Tensor] | None = None,
                past: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None) -> "Run":
        """The pass over ids. start: (layer, resid_pre (T, d_model)) to start at that layer from that
        residual stream (the layers before it are not computed, and nothing of them is recorded).
        past: {layer: (k, v)}, each (n_kv_heads, P, d_head) after RoPE, the keys and values of
        the first P members as they are: only rows P… are computed, and recorded (their maps
        over all T keys), and the logits are theirs."""
        if logits not in ("last", "all"):
            raise ValueError(f"logits must be 'last' or 'all', not {logits!r}")
        _check_fits(model, len(ids), record, logits == "all")
        P = next(iter(past.values()))[0].shape[-2] if past else 0
        interventions = interventions.taken_out(model, ids)  # a mean or resample ablation's values
        plan = interventions.plan(model, len(ids), record, all_logits=logits == "all", rows=range(P, len(ids)))
        plan.on_layer = on_layer
        plan.start = None if start is None else (start[0], start[1][None])  # (1, T, d_model)
        plan.past = {l: (k[None].to(model.dtype), v[None].to(model.dtype)) for l, (k, v) in (past or {}).items()}
        out, steps = model.forward(torch.tensor(ids[P:], device=model.device), plan)
        return cls(model, ids, interventions, record, out[0].float(), {k: v[0] for k, v in steps.items()})

    # ---- reading -----------------------------------------------------------------------------
    @property
    def T(self) -> int:
        return len(self.token_ids)

    @property
    def tokens(self) -> list[str]:
        """The members, readable: '␣' marks a leading space, '↵' a newline, '⇥' a tab.
        Made once per run (every silenced head of 3,000 members read them: 14 s), a new list each time."""
        if self._tokens is None:
            self._tokens = [self.model.tokenizer.readable(i) for i in self.token_ids]
        return list(self._tokens)

    @property
    def last_logits(self) -> torch.Tensor:
        """(vocab,) the logits that predict the next token."""
        return self.logits[-1]

    def __getitem__(self, name: str | tuple[str, int]) -> torch.Tensor:
        """A recorded step by its full name, or a layer's step as (step, layer):
        `run["weights", 5]` is `run["layers.5.weights"]`."""
        name = self._full_name(name)
        if name in self.steps:
            return self.steps[name]
        if self._on_demand(name):
            layer, step = name.split(".")[1:]
            return self.map(int(layer), step)
        raise KeyError(f"{name!r} was not recorded in this run; record it with record=[...] "
                       f"(steps: {', '.join(LAYER_STEPS)})")

    def __contains__(self, name: str | tuple[str, int]) -> bool:
        try:
            name = self._full_name(name)
        except InputError:  # ("weights", 99) is no more in the run than "layers.99.weights"
            return False
        return name in self.steps or self._on_demand(name)

    def _full_name(self, name: str | tuple[str, int]) -> str:
        """"layers.5.weights" for ("weights", 5); a name as it is; InputError for another tuple."""
        if not isinstance(name, tuple):
            return name
        if len(name) != 2 or (name[0] not in LAYER_STEPS and name[0] not in FAMILY_STEPS):
            raise InputError(f"run[{', '.join(map(repr, name))}]: give a layer's step and the layer, "
                             f"as run[\"weights\", 5] (steps: {', '.join(LAYER_STEPS)})")
        layer = whole_number(name[1], "a layer")
        L = self.model.config.n_layers
        if not 0 <= layer < L:
            raise InputError(f"layer {layer} does not exist: the model has {L} layers (0-{L - 1})")
        return step_name(name[0], layer)

    def _on_demand(self, name: str) -> bool:
        """Whether `name` is a map this run computes when read (Record.maps == "on_demand")."""
        parts = name.split(".")
        return (self.record.maps == "on_demand" and len(parts) == 3 and parts[2] in MAP_STEPS
                and self.record.wants(name) and self._has_q_and_k(parts[1]))

    def _has_q_and_k(self, layer) -> bool:
        return step_name("q", layer) in self.steps and step_name("k", layer) in self.steps

    @torch.inference_mode()
    def map(self, layer: int, step: str = "weights", heads=None, last: int | None = None) -> torch.Tensor:
        """A layer's maps computed now from its kept q and k, as the pass would have kept them
        (in the record's map_dtype): (len(heads), R, T). heads: query heads (None: all); last: only
        the last this many questions' rows (None: every row kept).

        For runs that kept this layer's q and k (Record(maps="on_demand") does for the maps it
        wants); the result is not kept (read it once and hold it, or read it again: the same numbers)."""
        c = self.model.config
        heads = list(range(c.n_heads)) if heads is None else [int(h) for h in heads]
        for h in heads:
            self.model.check_head(layer, h)
        if step not in MAP_STEPS:
            raise ValueError(f"step must be one of {', '.join(sorted(MAP_STEPS))}, not {step!r}")
        if not self._has_q_and_k(layer):
            raise KeyError(f"layer {layer}'s maps need its q and k, which this run did not keep; "
                           f"record with Record(maps='on_demand') or record=[...] including q and k")
        q = self.steps[step_name("q", layer)][heads]  # (h, R, d)
        q = q if last is None else q[:, -last:]
        k = self.steps[step_name("k", layer)][[c.kv_head_of(h) for h in heads]]  # (h, T, d)
        if step == "scores":
            return attention.scores(q, k, validate=False).to(self.record.map_dtype)  # (h, R, T)
        _, weights, _ = attention.by_rows(q, k, None, self._rows_mask(layer, heads, q.shape[-2]),
                                          weights_dtype=self.record.map_dtype, validate=False)
        return weights  # (h, R, T)

    def _rows_mask(self, layer: int, heads: list[int], R: int):
        """What the last R questions of these heads could see: "causal", or (h, R, T) bool."""
        if not any(self.interventions.hides_members(layer, h) for h in heads) and self.model.window_mask(layer, self.T) is None:
            return "causal"
        masks = [self.head_mask(layer, h, range(self.T - R, self.T)) for h in heads]  # (R, T) each
        return torch.stack(masks).to(self.model.device)  # (h, R, T)

    def head_mask(self, layer: int, head: int, rows: range | None = None) -> torch.Tensor:
        """(T, T) bool: which keys each question of this head could see in this run (silenced
        members and, in a local layer, members outside its window left out); with rows (a range
        of members), those questions' rows only (len(rows), T), built without the rest."""
        mask = self.interventions.mask(layer, head, self.T, rows).to(self.model.device)  # (R, T)
        window = self.model.window_mask(layer, self.T, rows)  # (R, T) or None
        return mask if window is None else mask & window

    def head(self, layer: int, head: int) -> Head:
        """One head whole. Taken from the recording, or recomputed (that head only) if not kept."""
        self.model.check_head(layer, head)
        kv = self.model.config.kv_head_of(head)
        if not self._has_whole(layer):
            return self._recompute_head(layer, head, kv)

        def get(s: str) -> torch.Tensor:
            if step_name(s, layer) not in self.steps:  # a map on demand: this head's only
                return self.map(layer, s, heads=[head])[0].float()
            return self.steps[step_name(s, layer)][kv if s in KEY_STEPS else head].float()

        return Head(layer, head, kv, *(get(s) for s in HEAD_STEPS), self.head_mask(layer, head))

    def _has_whole(self, layer: int) -> bool:
        return all(self.record.rows_kept(s) is None and step_name(s, layer) in self for s in HEAD_STEPS)

    @torch.inference_mode()
    def head_vectors(self, layer: int, head: int) -> dict[str, torch.Tensor]:
        """This head's vectors for every member, float32 (T, d_head) each: "q_pre_rope",
        "k_pre_rope", "q", "k", "v". From the recording, or from a pass that stops after `layer`
        and keeps that layer's vectors only: no T×T map is built (a window of a long text needs
        none but its own rows). That layer's vectors (every head's) are kept until another layer
        is asked for, so the next window of a head of the same layer makes no pass."""
        self.model.check_head(layer, head)
        kv = self.model.config.kv_head_of(head)
        vectors = ("q_pre_rope", "k_pre_rope", "q", "k", "v")
        if all(self.record.rows_kept(s) is None and step_name(s, layer) in self.steps for s in vectors):
            steps = {n: t[None] for n, t in self.steps.items()}  # as the pass returns them: (1, H, T, d)
        elif self._layer_vectors is not None and self._layer_vectors[0] == layer:
            steps = self._layer_vectors[1]
        else:
            record = Record(steps=(*vectors, "attn_pre_norm"), layers=(layer,))
            plan = self.interventions.plan(self.model, self.T, record, stop_after=layer)
            _, steps = self.model.forward(torch.tensor(self.token_ids, device=self.model.device), plan)
            self._layer_vectors = (layer, steps)  # the next window of any head of this layer needs no pass
        out = {s: steps[step_name(s, layer)][0, kv if s in KEY_STEPS else head].float() for s in vectors}
        pre_norm = steps.get(step_name("attn_pre_norm", layer))  # (1, T, d_model) where the family has that norm
        if pre_norm is not None:
            out["attn_pre_norm"] = pre_norm[0].float()
        return out

    @torch.inference_mode()
    def _recompute_head(self, layer: int, head: int, kv: int) -> Head:
        """Run up to `layer` keeping its Q, K, V; then build this head's one T×T map, no other."""
        if self.interventions.replaces_in(layer, ("scores", "weights", "output", "write", "attn_pre_norm"), given=True):
            raise InputError(f"layer {layer}'s attention was replaced in this run: record its steps "
                             "(record=\"all\") to read its heads")
        vec = self.head_vectors(layer, head)
        q, k, v = vec["q"], vec["k"], vec["v"]  # (T, d_head) each
        mask = self.head_mask(layer, head)  # (T, T)
        output, weights = attention.paper(q[None], k[None], v[None], mask=mask)  # (1, T, d_head), (1, T, T)
        output = self.interventions.ablated_output(layer, head, output)
        W_O_h = self.model.W_O_head(layer, head).float()  # (d_head, d_model)
        silent = (layer, head) in self.interventions.silenced_heads and self.interventions.zero
        write = torch.zeros(self.T, W_O_h.shape[1], device=q.device) if silent else output[0] @ W_O_h  # (T, d_model)
        if "attn_pre_norm" in vec:  # families with a norm after attention: its scale held, as in the pass
            write = write * self.model.write_scale(layer, vec["attn_pre_norm"])
        return Head(layer, head, kv, vec["q_pre_rope"], vec["k_pre_rope"], q, k, v,
                    attention.scores(q[None], k[None])[0], weights[0], output[0], write, mask)

    def __repr__(self) -> str:
        shown = ", ".join(repr(t) for t in self.tokens[:5]) + (", …" if self.T > 5 else "")
        return (f"<Run of {self.T} tokens [{shown}]: {self._recorded()}; logits {tuple(self.logits.shape)}"
                f"{self._changed()}; {self._how_to_read()}>")

    def _recorded(self) -> str:
        """What the run holds, in words: "recorded 15 steps × 30 layers (rows: all) + embed, resid_final, final"."""
        if not self.steps:
            return "nothing recorded"
        per_layer = [n.split(".") for n in self.steps if n.startswith("layers.")]
        steps = [s for s in LAYER_STEPS if s in {p[2] for p in per_layer}]
        others = [n for n in self.steps if not n.startswith("layers.")]
        words = []
        if steps:
            named = ", ".join(steps) if len(steps) <= 3 else f"{len(steps)} steps"
            words.append(f"{named} × {len({p[1] for p in per_layer})} layers (rows: {self.record.rows})")
        if others:
            words.append(", ".join(others) if len(others) <= 3 else f"{len(others)} other steps")
        return "recorded " + " + ".join(words) + (", maps on demand" if self.record.maps == "on_demand" else "")

    def _changed(self) -> str:
        i = self.interventions
        words = f"; silenced members {list(i.silenced_members)}" if i.silenced_members else ""
        if i.silenced_members and i.member_heads is not None:
            words += f" in {len(i.member_heads)} heads"
        words += f"; silenced heads {sorted(i.silenced_heads)}" if i.silenced_heads else ""
        return words + (f"; replaced {', '.join(i.replaced())}" if i.replacements else "")

    def _how_to_read(self) -> str:
        """One way in: a recorded layer step by (step, layer), and a head whole."""
        l = min(5, self.model.config.n_layers - 1)
        found = ["layers", str(l), "weights"] if ("weights", l) in self else next(
            (n.split(".") for n in self.steps if n.startswith("layers.")), None)
        example = f"run[{found[2]!r}, {found[1]}], " if found else ""
        return f"{example}run.head({found[1] if found else l}, 0), run.tokens, run.logits"

    # ---- interventions -----------------------------------------------------------------------
    def silence_member(self, j: int, heads=None) -> "Run":
        """A new run with member j silenced in `heads` ((layer, head) pairs; None: every head)."""
        return self.silence_members([j], heads)

    def silence_members(self, members, heads=None) -> "Run":
        """A new run with these members silenced too, all of them in `heads` ((layer, head) pairs;
        None: every head). No member before the first one newly silenced sees it, so their rows
        are this run's: where this run kept every row of its keys and values (and of every step
        it keeps whole), the pass computes only the rows from that member on, over those members'
        kept keys and values. The numbers are a whole pass's up to float32 rounding (the
        multiplies see fewer rows).

        >>> run = model.run("Cash or credit card? I have a lot", record=["weights", "k", "v"])
        >>> a = run.silence_members([6])  # rows 6-10 computed
        >>> b = model.run("Cash or credit card? I have a lot", record=["weights", "k", "v"], silence_members=[6])
        >>> (a.logits - b.logits).abs().max() < 1e-4, (a["weights", 9] - b["weights", 9]).abs().max() < 1e-5
        (tensor(True), tensor(True))
        """
        s = Interventions.make(self.model, self.T, (*self.interventions.silenced_members, *members), heads,
                               self.interventions.silenced_heads)
        new = set(s.silenced_members) - set(self.interventions.silenced_members)
        first = min(new, default=0)
        if first == 0 or not self._rows_reusable(first, s):
            return Run.compute(self.model, self.token_ids, s, self.record, self._logits_kind)
        past = {l: (self.steps[step_name("k", l)][:, :first], self.steps[step_name("v", l)][:, :first])
                for l in range(self.model.config.n_layers)}  # (n_kv_heads, first, d_head) each
        run = Run.compute(self.model, self.token_ids, s, self.record, self._logits_kind, past=past)
        R = self.T - first
        run.steps = {n: torch.cat([self.steps[n][..., :first, :], t], dim=-2)  # a step kept for every row
                     if self.steps[n].shape[-2] == self.T and t.shape[-2] == R else t for n, t in run.steps.items()}
        if self._logits_kind == "all":  # (T, vocab): the rows before `first` are this run's
            run.logits = torch.cat([self.logits[:first], run.logits])
        return run

    def _rows_reusable(self, first: int, s: Interventions) -> bool:
        """Whether a run with `s` (this run's silenced heads, more members) can take this run's rows
        before `first` as they are: the members silenced here are silenced there in the same heads,
        every layer's keys and values are kept whole, every step kept for only its last n rows has
        n rows from `first` on, no scores are kept (a question's scores before the mask reach
        later members' keys, which the silencing changes), and nothing is replaced."""
        i, n_layers, rows_kept = self.interventions, self.model.config.n_layers, self.record.rows_kept
        return (not i.replacements and i.zero and (not i.silenced_members or i.member_heads == s.member_heads)
                and self.record.maps == "kept"
                and all((n := rows_kept(name.rpartition(".")[2])) is None or n <= self.T - first for name in self.steps)
                and not any(name.endswith(".scores") for name in self.steps)
                and all(rows_kept(x) is None and step_name(x, l) in self.steps for l in range(n_layers) for x in ("k", "v")))

    def silence_head(self, layer: int, head: int) -> "Run":
        """A new run with this head's write to the residual stream zeroed."""
        return self.silence_heads([(layer, head)])

    def silence_heads(self, heads) -> "Run":
        """A new run with these heads' writes zeroed too ((layer, head) pairs). Its layers before the
        first head newly silenced are this run's: where this run kept every member's `resid_pre`
        there, its pass starts at that layer from it, the same numbers for fewer layers' work.

        >>> run = model.run("I have a lot", record=["resid_pre", "weights"])
        >>> a = run.silence_heads([(20, 1)])  # layers 20-29 computed
        >>> b = model.run("I have a lot", record=["resid_pre", "weights"], silence_heads=[(20, 1)])
        >>> torch.equal(a.logits, b.logits), all(torch.equal(a.steps[n], b.steps[n]) for n in b.steps)
        (True, True)
        """
        new = frozenset(self.model.check_head(l, h) for l, h in heads) - self.interventions.silenced_heads
        s = replace(self.interventions, silenced_heads=self.interventions.silenced_heads | new, ablated=())
        first = min((l for l, _ in new), default=0)
        start = self.steps.get(step_name("resid_pre", first))
        if first == 0 or start is None or self.record.rows_kept("resid_pre") is not None:
            return Run.compute(self.model, self.token_ids, s, self.record, self._logits_kind)
        run = Run.compute(self.model, self.token_ids, s, self.record, self._logits_kind, start=(first, start))
        before = {n: t for n, t in self.steps.items()
                  if n in ("embed", "pos_embed") or n.startswith("layers.") and int(n.split(".")[1]) < first}
        run.steps = before | run.steps  # in forward order
        return run

    @property
    def _logits_kind(self) -> str:
        return "all" if self.logits.shape[0] == self.T and self.T > 1 else "last"


def _check_fits(model: "Model", T: int, record: Record, all_logits: bool) -> None:
    """InputError, before the pass, when what `record` keeps (and the pass's own working memory)
    would not fit in the memory free now: better than a process killed halfway for lack of it."""
    from studygroup.model import estimate

    kept = estimate.recording_bytes(model.config, T, record, all_logits)
    free = estimate.available_bytes(model.device)
    if free is not None and kept + estimate.activation_bytes(model.config, T) > free:
        raise InputError(f"recording this on {T} tokens would keep about {kept / 2**30:.1f} GiB and "
                         f"{free / 2**30:.1f} GiB is free: keep fewer steps (record=[\"weights\"]), the last "
                         "member's row only (Record(rows=\"last\")) or the maps computed when read "
                         "(Record(maps=\"on_demand\"))")
