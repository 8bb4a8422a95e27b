"""One row times a matrix kept as blocks, per block type, against torch's float32 multiply: the
matrix is Qwen2.5-1.5B's MLP down projection (1536 outputs × 8960 inputs), its blocks random valid
ones (`kernel_self_check.random_blocks`). Prints the CPU, the threads, and per type its bits a weight,
the median milliseconds of `BlockMatrix` (kernels/one_row.c's sg_matvec) and of `x @ W` with W the
same weights in float32, timed in turns, and their ratio (float32 time / block time: above 1, the
blocks are faster); and the same of the fastest runs, which a machine busy with other work disturbs
least. A step of generation is bound by the bytes it reads: 55 MB of float32 here.

    .venv/bin/python bench/block_kernels.py [--repeats 100] [--threads N] [--out bench/results/NAME.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

from studygroup.model import threads

threads.set_wait_policy()  # before torch is imported, as the CLI does (studygroup.model.threads)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from gguf import GGML_QUANT_SIZES  # noqa: E402

from cache_check import cpu  # noqa: E402
from studygroup.gguf.blocks import BLOCK_TYPES, Blocks  # noqa: E402
from studygroup.model import row_kernels  # noqa: E402
from studygroup.model.kernel_self_check import random_blocks  # noqa: E402

N_OUT, N_IN = 1536, 8960  # Qwen2.5-1.5B: d_model, d_mlp


def in_turns(a, b, repeats: int) -> tuple[list[float], list[float]]:
    """Milliseconds of each run of a() and of b(), after a warm-up each, timed in turns (a, b, a, b, …)
    so that a busy spell on the machine falls on both alike."""
    a(), b()
    times = ([], [])
    for _ in range(repeats):
        for fn, kept in zip((a, b), times):
            t = time.perf_counter()
            fn()
            kept.append(time.perf_counter() - t)
    return [1e3 * t for t in times[0]], [1e3 * t for t in times[1]]


def measure(qtype, x: torch.Tensor, repeats: int) -> dict:
    """One type's figures: the blocks' multiply and the float32 multiply of the same weights."""
    blocks = random_blocks(qtype, N_OUT, N_IN, np.random.default_rng(0))  # (out, bytes a row)
    B = row_kernels.BlockMatrix(Blocks(int(qtype), torch.from_numpy(blocks), N_IN))
    W = B.weights().contiguous()  # (in, out) float32
    blocks_ms, float32_ms = in_turns(lambda: B(x), lambda: x @ W, repeats)
    n, size = GGML_QUANT_SIZES[qtype]
    row = {"type": qtype.name, "bits_per_weight": 8 * size / n}
    for what, f in (("median", statistics.median), ("fastest", min)):
        row |= {f"blocks_{what}_ms": f(blocks_ms), f"float32_{what}_ms": f(float32_ms),
                f"{what}_ratio": f(float32_ms) / f(blocks_ms)}
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=100)
    p.add_argument("--threads", type=int, help="threads for both multiplies (default: torch's)")
    p.add_argument("--out", help="also write the figures as JSON here")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)  # the kernel's OpenMP threads are torch's
    if not row_kernels.available():
        raise SystemExit("the block kernels are not available on this machine (no C compiler, or no AVX2)")
    x = torch.randn(1, N_IN)  # (1, in)
    print(f"CPU: {cpu()}; torch threads {torch.get_num_threads()}; W: {N_OUT} × {N_IN}, median of {args.repeats}")
    print(f"{'':15} {'median':^37} {'fastest':^37}")
    print(f"{'type':8} {'bits/w':>6}" + f" {'blocks ms':>10} {'float32 ms':>11} {'float32/blocks':>14}" * 2)
    rows = []
    for qtype in sorted(BLOCK_TYPES):
        r = measure(qtype, x, args.repeats)
        rows.append(r)
        print(f"{r['type']:8} {r['bits_per_weight']:6.2f}" + "".join(
            f" {r[f'blocks_{w}_ms']:10.3f} {r[f'float32_{w}_ms']:11.3f} {r[f'{w}_ratio']:13.2f}×" for w in ("median", "fastest")))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"cpu": cpu(), "threads": torch.get_num_threads(), "shape": [N_OUT, N_IN], "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
