"""What a run will cost before it starts: memory and time, from the config and a quick probe.

The time estimate counts multiply-adds (the projections, the MLP and the T×T attention) and
divides by the speed this machine reaches on a matrix multiply of the model's own sizes, measured
once per process (about 20 ms). Where many passes follow (explain), `speed` times the model's own
layers instead: a row of the text, a row with a gradient, and a one-row copy over kept keys.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from functools import lru_cache

import torch

from studygroup.errors import InputError
from studygroup.gguf.config import Config
from studygroup.model.interventions import PassPlan
from studygroup.model.record import MAP_STEPS, Record, names


@dataclass(frozen=True)
class Estimate:
    """Peak memory in bytes and wall time in seconds (rough: within a factor of two)."""

    bytes: int
    seconds: float

    def __str__(self) -> str:
        return f"about {self.bytes / 2**30:.1f} GiB and {duration(self.seconds)}"


def duration(s: float) -> str:
    """Seconds for a person: '37.9 s', '2.9 min'."""
    return f"{s:.1f} s" if s < 90 else f"{s / 60:.1f} min"


def flops(c: Config, T: int, rows: int | None = None) -> float:
    """Multiply-add count ×2 of one forward pass over T tokens (`rows` of them recomputed)."""
    rows = T if rows is None else rows
    attention = 2 * c.n_heads * c.d_head * (T + 1) / 2  # causal: half the keys on average, Q·K and weights·V
    return rows * (_weight_flops_per_row(c) + 2.0 * c.n_layers * attention) + 2.0 * c.d_model * c.vocab_size


def _weight_flops_per_row(c: Config) -> float:
    """Multiply-add count ×2 of one row through every layer's weight matrices."""
    proj = c.d_model * (c.n_heads + 2 * c.n_kv_heads) * c.d_head + c.n_heads * c.d_head * c.d_model
    mlp = 3 * c.d_model * c.d_mlp
    return 2.0 * c.n_layers * (proj + mlp)


def weight_bytes(c: Config, dtype_bytes: int = 4) -> int:
    """Bytes of the model's weights, `dtype_bytes` a number (4: float32; 2: bfloat16): the embedding,
    and the unembedding where it is a matrix of its own (not `c.tied`).

    >>> from studygroup.gguf.config import Config
    >>> shape = (30, 9, 3, 576, 64, 1536, 8192, 1e5, 1e-5, 49152)
    >>> weight_bytes(Config(*shape, tied=False)) - weight_bytes(Config(*shape)) == 4 * 49152 * 576
    True
    """
    per_layer = (c.d_model * (c.n_heads + 2 * c.n_kv_heads) * c.d_head + c.n_heads * c.d_head * c.d_model
                 + 3 * c.d_model * c.d_mlp + 2 * c.d_model)
    embeddings = (1 if c.tied else 2) * c.vocab_size * c.d_model
    return dtype_bytes * (c.n_layers * per_layer + embeddings + c.d_model)


def layer_bytes(c: Config) -> int:
    """Bytes of one layer's matrices in float32."""
    return 4 * (c.d_model * (c.n_heads + 2 * c.n_kv_heads) * c.d_head + c.n_heads * c.d_head * c.d_model
                + 3 * c.d_model * c.d_mlp)


#: Models whose float32 weights are at most this many bytes are dequantized once and cached (their
#: many short passes would otherwise dequantize every layer each time); larger ones keep the file's
#: blocks. Measured by bench/memory.py (docs/performance.md).
FLOAT32_MAX_BYTES = 3 * 2**29
#: STUDYGROUP_WEIGHTS=blocks or =float32 chooses for every model.
WEIGHTS_SWITCH = "STUDYGROUP_WEIGHTS"


def keeps_blocks(c: Config) -> bool:
    """Whether the model's matrices stay the file's blocks (else float32, cached): larger than
    FLOAT32_MAX_BYTES in float32, unless STUDYGROUP_WEIGHTS says otherwise.

    >>> from studygroup.gguf.config import Config
    >>> keeps_blocks(Config(30, 9, 3, 576, 64, 1536, 8192, 1e5, 1e-5, 49152))  # SmolLM2-135M: 0.5 GiB in float32
    False
    """
    chosen = os.environ.get(WEIGHTS_SWITCH, "").strip().lower()
    if chosen in ("blocks", "float32"):
        return chosen == "blocks"
    return weight_bytes(c) > FLOAT32_MAX_BYTES


def kept_bytes(c: Config, blocks_bytes: int) -> int:
    """Bytes of the weights when `blocks_bytes` of matrices stay the file's blocks: the blocks, one
    layer's matrices in float32, a slice of the unembedding's rows in float32 (`packed`), the norms."""
    from studygroup.model.packed import UNEMBED_SLICE_BYTES

    unembed = min(UNEMBED_SLICE_BYTES, 4 * c.vocab_size * c.d_model)
    return blocks_bytes + layer_bytes(c) + unembed + 4 * (2 * c.n_layers + 1) * c.d_model


def weights_memory(c: Config, matrix_bytes: int) -> int:
    """Bytes the weights take once loaded: `kept_bytes` for a model that keeps its blocks (its matrices
    `matrix_bytes` in the file), else its float32 weights.

    >>> from studygroup.gguf.config import Config
    >>> weights_memory(Config(30, 9, 3, 576, 64, 1536, 8192, 1e5, 1e-5, 49152), 0) == weight_bytes(
    ...     Config(30, 9, 3, 576, 64, 1536, 8192, 1e5, 1e-5, 49152))
    True
    """
    return kept_bytes(c, matrix_bytes) if keeps_blocks(c) else weight_bytes(c)


def loaded_bytes(model) -> int:
    """Bytes the model's weights take as loaded: `kept_bytes` where its matrices are the file's
    blocks, else every weight in its dtype.

    >>> loaded_bytes(model) == weight_bytes(model.config)  # the default model: float32
    True
    """
    c = model.config
    return kept_bytes(c, model.w.blocks_bytes) if model.w.kept else weight_bytes(c, model.dtype.itemsize)


def check_weights_fit(c: Config, blocks_bytes: int = 0) -> None:
    """Refuse at once, in one line, a model whose weights would not fit in the memory this machine has
    available now: float32 (and the bfloat16 figure), or kept as `blocks_bytes` of the file's blocks."""
    free = available_bytes(torch.device("cpu"))
    need = kept_bytes(c, blocks_bytes) if blocks_bytes else weight_bytes(c)
    if free is None or need <= free:
        return
    if blocks_bytes:
        raise InputError(f"{c.name or 'the model'} needs {_amount(need)} for its weights (the file's blocks and "
                         f"one layer in float32); this machine has {_amount(free)} of memory available: "
                         "choose a smaller model")
    raise InputError(f"{c.name or 'the model'} needs {_amount(need)} for its weights in float32 "
                     f"({_amount(weight_bytes(c, 2))} in bfloat16); this machine has "
                     f"{_amount(free)} of memory available: choose a smaller model")


def check_weights_fit_device(c: Config, need: int, device: torch.device, dtype: torch.dtype) -> None:
    """Refuse at once, in one line, weights of `need` bytes that the GPU `device` has not the memory
    free for (before any is dequantized or copied there)."""
    free = available_bytes(device)
    if free is None or need <= free:
        return
    other = " (half of it in bfloat16: --dtype bfloat16)" if dtype == torch.float32 else ""
    raise InputError(f"{c.name or 'the model'} needs {_amount(need)} of GPU memory for its weights in "
                     f"{str(dtype).removeprefix('torch.')}{other}; {device} has {_amount(free)} free: "
                     "choose a smaller model or --device cpu")


def _amount(n: int) -> str:
    """Bytes for a person, three figures: '1.23 GiB', '45.6 MiB'.

    >>> _amount(3 * 2**30), _amount(1536 * 2**10), _amount(148_000 * 2**30)
    ('3 GiB', '1.5 MiB', '148,000 GiB')
    """
    x, unit = (n / 2**30, "GiB") if n >= 2**30 else (n / 2**20, "MiB")
    return f"{x:,.0f} {unit}" if x >= 100 else f"{x:.3g} {unit}"


def activation_bytes(c: Config, T: int, batch: int = 1) -> int:
    """Live activations of one layer (residual, Q/K/V, MLP hidden), float32."""
    width = 4 * c.d_model + (c.n_heads + 2 * c.n_kv_heads) * c.d_head + 3 * c.d_mlp
    return 4 * batch * T * width


def gradient_bytes(c: Config, T: int, checkpointed: bool) -> int:
    """What a pass with a gradient over T tokens keeps for its backward pass: every layer's
    activations and its two T×T maps (scores, weights), float32; checkpointed (weights kept as
    blocks: `packed.Weights.checkpointed`), every layer's input and one layer's activations.

    >>> from studygroup.gguf.config import Config
    >>> c = Config(28, 12, 2, 1536, 128, 8960, 32768, 1e6, 1e-6, 151936)  # Qwen2.5-1.5B
    >>> round(gradient_bytes(c, 512, False) / 2**20), round(gradient_bytes(c, 512, True) / 2**20)
    (2590, 176)
    """
    layer = activation_bytes(c, T) + 2 * 4 * c.n_heads * T * T
    return 4 * c.n_layers * T * c.d_model + layer if checkpointed else c.n_layers * layer


def kv_bytes(c: Config, T: int) -> int:
    """Every member's keys and values in every layer, float32 (kept for last-question analysis)."""
    return 4 * 2 * c.n_layers * c.n_kv_heads * T * c.d_head


def recording_bytes(c: Config, T: int, record: Record, all_logits: bool = False) -> int:
    """What a run over T tokens keeps for `record`, in bytes: exactly the steps its pass keeps
    (maps in record.map_dtype, everything else float32; on demand, a layer's q and k instead of
    its maps; `final` for the last row only unless every position's logits are asked for).

    >>> from studygroup.gguf.config import Config
    >>> c = Config(30, 9, 3, 576, 64, 1536, 8192, 1e5, 1e-5, 49152)
    >>> round(recording_bytes(c, 8192, Record()) / 2**30, 1)   # every step and map of every row
    145.1
    >>> round(recording_bytes(c, 8192, Record(rows="last", steps=("weights",))) / 2**20, 1)
    8.4
    """
    total = 0
    for name in names(c.n_layers):
        if record.keeps(name):
            step = name.rpartition(".")[2]
            one = step not in record.full_rows and (record.rows == "last" or (step == "final" and not all_logits))
            cut = record.last_rows is not None and step not in record.full_rows
            rows = 1 if one else min(T, record.last_rows) if cut else T
            size = torch.finfo(record.map_dtype).bits // 8 if step in MAP_STEPS else 4
            total += size * math.prod(_step_shape(c, step, T, rows))
    return total


def _step_shape(c: Config, step: str, T: int, rows: int) -> tuple[int, ...]:
    """The shape a recorded step has (see studygroup.model.record), `rows` of its rows kept."""
    if step in ("q_pre_rope", "q", "output"):
        return (c.n_heads, rows, c.d_head)
    if step in ("k_pre_rope", "k", "v"):
        return (c.n_kv_heads, rows, c.d_head)
    if step in MAP_STEPS:
        return (c.n_heads, rows, T)
    if step == "write":
        return (c.n_heads, rows, c.d_model)
    return (rows, c.d_model)


def available_bytes(device: torch.device) -> int | None:
    """Memory free for a run on `device` now (Linux's MemAvailable; CUDA's free memory); None
    where it cannot be read."""
    try:
        if device.type == "cuda":  # the driver's free memory, and the blocks torch holds unused
            return torch.cuda.mem_get_info(device)[0] + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError, RuntimeError):
        return None


@lru_cache(maxsize=1)
def machine_flops_per_second() -> float:
    """float32 multiply speed on a matrix of the model's shape, measured once."""
    a, b = torch.randn(256, 576), torch.randn(576, 1536)
    a @ b
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < 0.02:
        a @ b
        n += 1
    return 2 * 256 * 576 * 1536 * n / (time.perf_counter() - start)


def forward(c: Config, T: int, keep_kv: bool = False, weights: int | None = None) -> Estimate:
    """One pass over T tokens, optionally keeping every member's keys and values; weights: the bytes
    the weights take (`loaded_bytes`; None: float32).

    >>> from studygroup.gguf.config import Config
    >>> c = Config(30, 9, 3, 576, 64, 1536, 8192, 1e5, 1e-5, 49152)
    >>> forward(c, 8192).bytes < 2 * 2**30
    True
    """
    weights = weight_bytes(c) if weights is None else weights
    memory = weights + activation_bytes(c, T) + (kv_bytes(c, T) if keep_kv else 0)
    return Estimate(int(memory * 1.2) + 200 * 2**20, flops(c, T) / machine_flops_per_second())


def explain_bytes(c: Config, T: int, copies: int, rows_per_pass: int, weights: int | None = None,
                  checkpointed: bool = False, recorded: int | None = None, last_copies: int = 0,
                  log_prob_rows: int = 0) -> int:
    """Peak memory of explain's exact path on T members: the weights (`weights` bytes, as
    `loaded_bytes` gives; None: float32), what its run records (`recorded` bytes; None: every
    member's keys and values), and the largest of its steps:

    - the pass with a gradient (`gradient_bytes`); checkpointed (weights kept as blocks), also the
      layer computed again in the backward pass with its activations' gradients, and the
      unembedding's float32 slice that the backward pass dequantizes again;
    - the largest batched pass of `copies` copies of the text (at most `rows_per_pass` rows);
    - `last_copies` one-row copies' float32 logits, `log_prob_rows` of them at a time in float64
      with their float64 logits; where the weights are kept as blocks, the layers' float32 buffers
      are let go first (`Model.final_logits`).

    The weights are counted as they are; the rest with a fifth more (the allocator's slack and the
    steps' temporaries), and 200 MiB for the process (Python, torch, the tokenizer).

    >>> from studygroup.gguf.config import Config
    >>> c = Config(30, 9, 3, 576, 64, 1536, 8192, 1e5, 1e-5, 49152)
    >>> explain_bytes(c, 500, 40, 4096) < 2 * 2**30
    True
    """
    largest = min(rows_per_pass, max(T, copies * T))  # rows of the largest batched pass
    gradient = gradient_bytes(c, T, checkpointed)
    if checkpointed:
        from studygroup.model.packed import UNEMBED_SLICE_BYTES

        gradient += activation_bytes(c, T) + min(UNEMBED_SLICE_BYTES, 4 * c.vocab_size * c.d_model)
    last = 4 * c.vocab_size * (last_copies + 4 * log_prob_rows) - (layer_bytes(c) if checkpointed else 0)
    work = max(activation_bytes(c, largest), gradient, last)
    recorded = kv_bytes(c, T) if recorded is None else recorded
    return (weight_bytes(c) if weights is None else weights) + int((work + recorded) * 1.2) + 200 * 2**20


def layer_passes(c: Config, T: int, layer_rows: float, rows_per_pass: int) -> Estimate:
    """Work counted in layer-rows (a row through one layer: its projections, MLP and attention over T
    members), in batched passes of at most `rows_per_pass` rows: activation patching's copies.

    >>> from studygroup.gguf.config import Config
    >>> c = Config(30, 9, 3, 576, 64, 1536, 8192, 1e5, 1e-5, 49152)
    >>> layer_passes(c, 10, 600, 4096).seconds > layer_passes(c, 10, 300, 4096).seconds
    True
    """
    per_row = _weight_flops_per_row(c) / c.n_layers + 2.0 * c.n_heads * c.d_head * (T + 1)
    memory = weight_bytes(c) + activation_bytes(c, rows_per_pass)
    return Estimate(int(memory * 1.2), layer_rows * per_row / machine_flops_per_second())


@dataclass(frozen=True)
class Speed:
    """Seconds one row takes through one layer on this machine, now, by kind of pass: `text`, a
    row of a text's pass (attention over the rows before it; at `T` rows); `gradient`, the same
    forward and backward; `copy`, a one-row copy asking over T kept keys, in a batch of copies."""

    T: int
    text: float
    gradient: float
    copy: float

    def text_at(self, c: Config, T: int) -> float:
        """A text row's seconds at T rows: the probe's, scaled by the multiply-adds of a row's
        projections, MLP and attention at T against at the probe's length."""
        per_row = lambda n: flops(c, n, 1) - 2.0 * c.d_model * c.vocab_size  # noqa: E731  (one row, no unembedding)
        return self.text * per_row(T) / per_row(self.T)


#: Rows of the text the probe passes through two layers (more only lengthen the probe), and the
#: one-row copies it passes together (as `studygroup.study.last_question.COPIES_PER_PASS`).
PROBE_ROWS = 128
PROBE_COPIES = 64


def speed(model, T: int) -> Speed:
    """This machine's `Speed` for the model at T members: its first two layers timed on random rows
    (min(T, PROBE_ROWS) of a text, with and without a gradient; PROBE_COPIES one-row copies over T
    kept keys), the mean of three tries each (the machine as loaded now, not at its best). About
    0.4 s for the default model on two idle cores.

    >>> s = speed(model, 300)
    >>> 0 < s.text < s.gradient and s.copy > 0
    True
    """
    c, R = model.config, min(T, PROBE_ROWS)
    x = torch.randn(1, R, c.d_model, device=model.device, dtype=model.dtype)  # (1, R, d_model)
    ids = torch.zeros(R, dtype=torch.long, device=model.device)
    text = lambda: model.forward(ids, PassPlan(start=(0, x), stop_after=1, on_layer=_nothing))  # noqa: E731

    def gradient():
        with torch.inference_mode(False), torch.enable_grad():
            g, out = torch.ones(1, c.n_heads, device=model.device, requires_grad=True), _Held()
            model.forward(ids, PassPlan(start=(0, x.clone()), stop_after=1, gates={0: g}, on_layer=_nothing,
                                        replace={"layers.1.resid_post": [out]}))
            out.t[0, -1].sum().backward()
    kv = torch.randn(1, c.n_kv_heads, T, c.d_head, device=model.device, dtype=model.dtype)  # (1, H_kv, T, d)
    past = {0: (kv, kv), 1: (kv, kv)}
    one = torch.randn(PROBE_COPIES, 1, c.d_model, device=model.device, dtype=model.dtype)  # (B, 1, d_model)
    copy = lambda: model.forward(ids[:1], PassPlan(start=(0, one), stop_after=1, past=past, on_layer=_nothing))  # noqa: E731
    with torch.inference_mode():
        t, cp = _mean(text, model.device) / (2 * R), _mean(copy, model.device) / (2 * PROBE_COPIES)
    return Speed(T, t, _mean(gradient, model.device) / (2 * R), cp)


class _Held:
    """A hook point's value, held as the pass goes on with it (a Replacement that replaces nothing)."""

    t: torch.Tensor | None = None

    def put(self, t: torch.Tensor, first_row: int = 0) -> torch.Tensor:
        self.t = t
        return t


def _nothing() -> None:
    """A pass's on_layer that shows nothing (the probe draws no progress bar)."""


def _mean(f, device: torch.device, tries: int = 3) -> float:
    """The mean wall seconds of `tries` calls of f (after one call to warm it), on `device`'s clock
    (a GPU's work waited for)."""
    wait = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    f()
    wait()
    start = time.perf_counter()
    for _ in range(tries):
        f()
    wait()
    return (time.perf_counter() - start) / tries
