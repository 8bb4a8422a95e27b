"""What a run will cost before it starts: memory and time, from the config and a quick probe.

The time estimate counts multiply-adds (the projections, the MLP and the T×T attention) and
divides by the speed this machine reaches on a matrix multiply of the model's own sizes, measured
once per process (about 20 ms).
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
from studygroup.model.record import MAP_STEPS, Record, names


@dataclass(frozen=True)
class Estimate:
    """Peak memory in bytes and wall time in seconds (rough: within a factor of two)."""

    bytes: int
    seconds: float

    def __str__(self) -> str:
        return f"about {self.bytes / 2**30:.1f} GiB and {_duration(self.seconds)}"


def _duration(s: float) -> str:
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
    """Bytes of the model's weights, `dtype_bytes` a number (4: float32; 2: bfloat16), tied unembedding."""
    per_layer = (c.d_model * (c.n_heads + 2 * c.n_kv_heads) * c.d_head + c.n_heads * c.d_head * c.d_model
                 + 3 * c.d_model * c.d_mlp + 2 * c.d_model)
    return dtype_bytes * (c.n_layers * per_layer + c.vocab_size * c.d_model + c.d_model)


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


def forward(c: Config, T: int, keep_kv: bool = False) -> Estimate:
    """One pass over T tokens, optionally keeping every member's keys and values.

    >>> from studygroup.gguf.config import Config
    >>> c = Config(30, 9, 3, 576, 64, 1536, 8192, 1e5, 1e-5, 49152)
    >>> forward(c, 8192).bytes < 2 * 2**30
    True
    """
    memory = weight_bytes(c) + activation_bytes(c, T) + (kv_bytes(c, T) if keep_kv else 0)
    return Estimate(int(memory * 1.2) + 200 * 2**20, flops(c, T) / machine_flops_per_second())


def long_explain(c: Config, T: int, candidates: int, copies_per_pass: int) -> Estimate:
    """explain's long-text path: a pass for the heads' sinks, one pass keeping every member's keys
    and values, then each of `candidates` silenced members or heads as one copy of the last row,
    `copies_per_pass` at a time (each copy asks over all T members and predicts: its unembedding
    counts too). The sinks' pass ends before the next begins: the memory is the larger's.

    >>> from studygroup.gguf.config import Config
    >>> c = Config(30, 9, 3, 576, 64, 1536, 8192, 1e5, 1e-5, 49152)
    >>> long_explain(c, 8192, 8192, 64).seconds > long_explain(c, 8192, 40, 64).seconds
    True
    """
    base = forward(c, T, keep_kv=True)
    passes = math.ceil(candidates / copies_per_pass)
    per_pass = min(candidates, copies_per_pass) * (_weight_flops_per_row(c) + 2.0 * c.d_model * c.vocab_size)
    per_copy = COPY_ATTENTION_SLOWDOWN * 4.0 * c.n_layers * c.n_heads * c.d_head * T  # Q·K and weights·V, all T keys
    sinks = forward(c, T).seconds
    return Estimate(base.bytes, sinks + base.seconds + (passes * per_pass + candidates * per_copy) / machine_flops_per_second())


#: A silenced copy's attention over T shared keys (scores, mask, softmax, weighted sum) runs at about
#: a fifth of the matrix-multiply speed here, in a whole explain: passes of 64 copies took ~0.6 s
#: at T=3,000 and ~1.7 s at 8,191 (every member and head of 8,191 silenced: 263 s in all).
COPY_ATTENTION_SLOWDOWN = 5


def explain(c: Config, T: int, heads: int, members: int, rows_per_pass: int) -> Estimate:
    """explain's exact path on T members: a pass for the heads' sinks, a pass with a gradient
    (about three passes' work), then `heads` copies of the text joining at their head's layer
    (half the layers on average) and `members` copies each computed from its member on (half the
    rows on average), in passes of at most `rows_per_pass` rows.

    >>> from studygroup.gguf.config import Config
    >>> c = Config(30, 9, 3, 576, 64, 1536, 8192, 1e5, 1e-5, 49152)
    >>> explain(c, 500, 16, 24, 4096).bytes < 2 * 2**30
    True
    """
    rows = 4 * T + (heads + members) * T / 2
    largest = min(rows_per_pass, max(T, (heads + members) * T))  # rows of the largest batched pass
    memory = weight_bytes(c) + activation_bytes(c, largest) + kv_bytes(c, T)
    return Estimate(int(memory * 1.2) + 200 * 2**20, flops(c, T, int(rows)) / machine_flops_per_second())


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
