"""What a run keeps: the stable names of every recorded step, and the caller's choice of them.

Names are hierarchical, like ``layers.3.weights``. Shapes are for one text of T tokens; R is the
number of query rows kept (T, or 1 when only the last member's row is asked for). Query heads are
in the paper's orientation (rows are tokens, the questions); keys and values (k, v) are per
key/value head: query head h shares key/value head ``h // (n_heads // n_kv_heads)``.
"""
from __future__ import annotations

import contextlib
import fnmatch
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

#: Steps recorded once per layer, in the order the forward pass meets them.
LAYER_STEPS: dict[str, str] = {
    "resid_pre": "(R, d_model) residual stream entering the layer",
    "E": "(R, d_model) attention's input: RMSNorm(resid_pre), the members as attention sees them",
    "q_pre_rope": "(n_heads, R, d_head) questions Q = E·W_Q, before the rotation",
    "k_pre_rope": "(n_kv_heads, T, d_head) natures of the answers K = E·W_K, before the rotation",
    "q": "(n_heads, R, d_head) questions after RoPE",
    "k": "(n_kv_heads, T, d_head) natures of the answers after RoPE",
    "v": "(n_kv_heads, T, d_head) answers V = E·W_V",
    "scores": "(n_heads, R, T) Q·Kᵀ/√d_head, before the mask (masked cells are in `mask`)",
    "weights": "(n_heads, R, T) softmax per row of the masked scores",
    "output": "(n_heads, R, d_head) weighted sum of the answers",
    "write": "(n_heads, R, d_model) each head's write to the residual stream: output_h·W_O[h]",
    "attn_out": "(R, d_model) the sum of the heads' writes",
    "resid_mid": "(R, d_model) residual stream after attention",
    "mlp_out": "(R, d_model) the SwiGLU MLP's write",
    "resid_post": "(R, d_model) residual stream leaving the layer",
}

#: Steps only some families have, recorded once per layer where they exist (Gemma 3).
FAMILY_STEPS: dict[str, str] = {
    "q_normed": "(n_heads, R, d_head) the questions after the per-head RMSNorm, before the rotation",
    "k_normed": "(n_kv_heads, T, d_head) the natures of the answers after the per-head RMSNorm",
    "attn_pre_norm": "(R, d_model) the heads' writes summed, before the norm after attention; "
                     "`write` and `attn_out` are after it (its scale held per member)",
}

#: Steps recorded once per run.
RUN_STEPS: dict[str, str] = {
    "embed": "(R, d_model) token embeddings, the residual stream's start",
    "resid_final": "(R, d_model) residual stream after the last layer",
    "final": "(R, d_model) RMSNorm(resid_final), what the unembedding reads",
}

#: Steps recorded once per run by the families that have them.
FAMILY_RUN_STEPS: dict[str, str] = {
    "pos_embed": "(R, d_model) the learned position embedding (GPT-2), added to `embed` at the first layer",
}

#: Steps whose rows are keys (every member), not questions: never cut to the last row.
KEY_STEPS = frozenset({"k_pre_rope", "k_normed", "k", "v"})

#: Steps that hold a T×T map per head.
MAP_STEPS = frozenset({"scores", "weights"})

#: Up to this many tokens the default recording keeps everything; past it, the last row only.
FULL_RECORD_MAX_T = 256

#: What the default recording keeps for long texts (the last member's row in every head).
LONG_DEFAULT = frozenset({"scores", "weights", "output", "write", "resid_final", "final"})


def shape(step: str, config, T: int) -> tuple[int, ...]:
    """A step's shape in a run of T members, without the batch axis, as its description gives it
    (R: the questions' rows, every member's in a whole pass).

    >>> c = model.config
    >>> shape("resid_pre", c, 10), shape("k", c, 10), shape("weights", c, 10)
    ((10, 576), (3, 10, 64), (9, 10, 10))
    """
    described = {**LAYER_STEPS, **FAMILY_STEPS, **RUN_STEPS, **FAMILY_RUN_STEPS}[step]
    sizes = {"R": T, "T": T, "d_model": config.d_model, "n_heads": config.n_heads,
             "n_kv_heads": config.n_kv_heads, "d_head": config.d_head}
    return tuple(sizes[axis.strip()] for axis in described[1:described.index(")")].split(","))


def step_name(step: str, layer: int) -> str:
    """The recorded name of a layer's step: what `run[step, layer]` reads.

    >>> step_name("weights", 5)
    'layers.5.weights'
    """
    return f"layers.{layer}.{step}"


def names(n_layers: int) -> list[str]:
    """Every name a run can record, in forward order.

    >>> names(1)[:3]
    ['embed', 'layers.0.resid_pre', 'layers.0.E']
    """
    per_layer = [step_name(step, l) for l in range(n_layers) for step in LAYER_STEPS]
    return ["embed", *per_layer, "resid_final", "final"]


@dataclass(frozen=True)
class Record:
    """The caller's choice of what to keep.

    steps: step names or glob patterns over full names ("weights", "layers.3.*", "*").
    rows: "all" query rows, or "last" (the last member's question only).
    map_dtype: dtype to store the T×T maps in (float16 halves their memory; weights then carry
      an absolute error below 2.5e-4).
    maps: "kept" (the pass computes the maps and the run holds them) or "on_demand" (the pass
      keeps each such layer's q and k instead, about 1/50 of its maps' memory at T=2048, and the
      run computes a layer's maps, or one head's, each time they are read: `run[name]` and
      `run.head` give the same numbers either way).
    full_rows: steps kept for every member even when rows="last" (keys and values always).
    last_rows: with rows="all", keep only the last this many rows of the steps not in full_rows
      (the questions a long text's last R rows of maps need: `Run.map(layer, last=R)`); None: all.

    >>> Record(steps=("weights",), rows="last").wants("layers.2.weights")
    True
    """

    steps: tuple[str, ...] = ("*",)
    rows: str = "all"
    map_dtype: torch.dtype = torch.float32
    layers: tuple[int, ...] | None = None
    maps: str = "kept"
    full_rows: frozenset[str] = KEY_STEPS
    last_rows: int | None = None
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        if self.rows not in ("all", "last"):
            raise ValueError(f"rows must be 'all' or 'last', not {self.rows!r}")
        if self.maps not in ("kept", "on_demand"):
            raise ValueError(f"maps must be 'kept' or 'on_demand', not {self.maps!r}")
        if self.last_rows is not None and (self.rows != "all" or self.last_rows < 1):
            raise ValueError(f"last_rows takes a positive count with rows='all', not {self.last_rows!r}")

    def wants(self, name: str) -> bool:
        """Whether the full name (``layers.3.weights`` or ``embed``) is kept."""
        if name not in self._cache:
            self._cache[name] = self._match(name)
        return self._cache[name]

    def _match(self, name: str) -> bool:
        parts = name.split(".")
        if parts[0] == "layers" and self.layers is not None and int(parts[1]) not in self.layers:
            return False
        step = parts[-1]
        return any(fnmatch.fnmatchcase(name, p) or p == step for p in self.steps)

    def keeps(self, name: str) -> bool:
        """Whether the pass itself keeps `name`: what is wanted, except that with maps on demand
        it keeps no map and keeps the layer's q and k (after RoPE) for any map wanted.

        >>> r = Record(steps=("weights",), maps="on_demand")
        >>> r.keeps("layers.2.weights"), r.keeps("layers.2.q"), r.keeps("layers.2.v")
        (False, True, False)
        """
        prefix, _, step = name.rpartition(".")
        if self.maps == "kept" or not prefix:
            return self.wants(name)
        if step in MAP_STEPS:
            return False
        if step in ("q", "k"):
            return self.wants(name) or any(self.wants(f"{prefix}.{m}") for m in MAP_STEPS)
        return self.wants(name)

    def rows_kept(self, step: str) -> int | None:
        """How many of its last rows the pass keeps of `step`, if it keeps it (None: every row).

        >>> Record(rows="last").rows_kept("write"), Record(rows="last").rows_kept("k"), Record().rows_kept("write")
        (1, None, None)
        """
        cut = 1 if self.rows == "last" else self.last_rows
        return None if cut is None or step in self.full_rows else cut

    @property
    def empty(self) -> bool:
        return self.steps == ()


NOTHING = Record(steps=())
EVERYTHING = Record()


def default_for(T: int) -> Record:
    """The default recording: everything for short texts, the last member's row for long ones.

    >>> default_for(10).rows, default_for(8192).rows
    ('all', 'last')
    """
    if T <= FULL_RECORD_MAX_T:
        return EVERYTHING
    return Record(steps=tuple(sorted(LONG_DEFAULT)), rows="last")


def resolve(record, T: int, n_layers: int | None = None) -> Record:
    """Turn the caller's `record=` argument into a Record.

    Accepts "default", "all", "none"/None, a Record, or an iterable of step names/patterns.
    "all" past FULL_RECORD_MAX_T tokens computes the maps on demand (see Record.maps).
    n_layers: where given, a name or pattern that matches no step of such a model is refused
    (InputError), rather than recording nothing.
    """
    chosen = _resolve(record, T)
    if n_layers is not None and not isinstance(record, Record):
        _check_steps(chosen.steps, n_layers)
    return chosen


def _check_steps(steps: tuple[str, ...], n_layers: int) -> None:
    """InputError for a step name or pattern that matches nothing a run of n_layers can record.

    >>> _check_steps(("weights", "layers.1.*"), 2)
    >>> _check_steps(("weigths",), 2)
    Traceback (most recent call last):
    studygroup.errors.InputError: record='weigths' names no step: give 'default', 'all', 'none' or step names such as 'weights' or 'layers.3.*' (the steps: embed, resid_pre, E, q_pre_rope, k_pre_rope, q, k, v, scores, weights, output, write, attn_out, resid_mid, mlp_out, resid_post, resid_final, final)
    """
    from studygroup.errors import InputError

    every = [*names(n_layers), *(f"layers.0.{s}" for s in FAMILY_STEPS), *FAMILY_RUN_STEPS]
    for p in steps:
        if not isinstance(p, str) or not any(fnmatch.fnmatchcase(n, p) or n.rsplit(".", 1)[-1] == p for n in every):
            known = ", ".join(["embed", *LAYER_STEPS, "resid_final", "final"])
            raise InputError(f"record={p!r} names no step: give 'default', 'all', 'none' or step names such as "
                             f"'weights' or 'layers.3.*' (the steps: {known})")


def _resolve(record, T: int) -> Record:
    if record is None or record == "none":
        return NOTHING
    if record == "default":
        return default_for(T)
    if record == "all":
        return EVERYTHING if T <= FULL_RECORD_MAX_T else Record(maps="on_demand")
    if isinstance(record, Record):
        return record
    if isinstance(record, str):
        return Record(steps=(record,))
    return Record(steps=tuple(record))


class Keeper:
    """The pass's hook points: each step goes through `keep(step, t)`, which returns `t`, or `t` with
    the replacements the plan holds for that step's full name put in (see
    `studygroup.model.interventions.Replacement`), and collects what the record asks for under the
    full name, cut to the rows it asks for. first_row: the member the pass's first row is."""

    def __init__(self, record: Record, replace: dict | None = None, first_row: int = 0):
        self.record, self.layer, self.steps = record, None, {}
        self.replace, self.first_row = replace or {}, first_row
        self.storing = True  # False while a layer is computed again (see `quiet`)

    @contextlib.contextmanager
    def quiet(self, layer: int) -> Iterator[None]:
        """Layer `layer` computed again, as the backward pass of a checkpointed layer does: the same
        steps, replaced alike, and nothing recorded twice."""
        was = self.layer, self.storing
        self.layer, self.storing = layer, False
        try:
            yield
        finally:
            self.layer, self.storing = was

    def name(self, step: str) -> str:
        return step if self.layer is None else step_name(step, self.layer)

    def keeps(self, step: str) -> bool:
        """Whether the pass keeps this step of the current layer (see Record.keeps)."""
        return not self.record.empty and self.record.keeps(self.name(step))

    def last_row_suffices(self) -> bool:
        """Whether nothing kept from the current layer's questions on needs a row but the last."""
        r = self.record
        every_row = (set(LAYER_STEPS) | set(FAMILY_STEPS) | {"resid_final", "final"}) if r.rows == "all" else r.full_rows
        later = every_row - KEY_STEPS - {"resid_pre", "E"}  # the steps before the questions see every row anyway
        return r.empty or not any(r.keeps(self.name(s) if s in LAYER_STEPS or s in FAMILY_STEPS else s) for s in later)

    def replaces(self, step: str) -> bool:
        """Whether the plan replaces this step of the current layer."""
        return self.name(step) in self.replace

    def replaces_from(self, layer: int) -> bool:
        """Whether the plan replaces a step of this layer, or of the run after the layers."""
        return any(n in ("resid_final", "final") or n.startswith(f"layers.{layer}.") for n in self.replace)

    def swap(self, step: str, t: torch.Tensor) -> torch.Tensor:
        """t with this step's replacements put in (t itself where there are none). t (B, …, R, …)."""
        for r in self.replace.get(self.name(step), ()):
            t = r.put(t, self.first_row)
        return t

    def __call__(self, step: str, t: torch.Tensor, is_map: bool = False) -> torch.Tensor:
        """The step as the pass goes on with it (replaced where the plan says so), recorded if asked."""
        t = self.swap(step, t)
        self.store(step, t, is_map)
        return t

    def store(self, step: str, t: torch.Tensor, is_map: bool = False) -> None:
        """Record t under the step's full name, if the record asks for it (no replacement)."""
        if not self.storing or not self.keeps(step):
            return
        cut = self.record.rows_kept(step)
        if cut is not None and t.shape[-2] > cut:
            t = t[..., -cut:, :]
        t = t.detach().to(self.record.map_dtype if is_map else torch.float32)
        if t.untyped_storage().nbytes() > t.numel() * t.element_size():
            t = t.clone()  # a view would keep its whole base tensor alive (all T rows, or fused Q/K/V)
        self.steps[self.name(step)] = t
