"""The fused projections: Q/K/V and gate/up as one matrix each, every matrix stored (out, in).

One multiply instead of three: every matrix keeps the paper's (in, out) shape but lies (out, in)
in memory, the layout BLAS and oneDNN multiply fastest (10x for bfloat16 on some CPUs). Where the
cache already holds the parts' rows one after another, the fused matrix is a view: no copy.
"""
from __future__ import annotations

import torch

from studygroup.gguf import layout as gguf_layout
from studygroup.gguf.config import Config


def fuse(w: dict[str, torch.Tensor], c: Config) -> dict[str, torch.Tensor]:
    """Fuse Q/K/V and gate/up projections into one matrix each (one multiply instead of three); the
    matrices kept as the file's blocks are not in `w` (see `join_kept`).

    Every matrix keeps the paper's (in, out) shape but is stored (out, in) in memory, the layout
    BLAS and oneDNN multiply fastest (10× for bfloat16 on some CPUs). The separate W_Q, W_K, W_V,
    W_gate, W_up stay available as views into the fused matrices.
    """
    for l in range(c.n_layers):
        p = f"layers.{l}."
        for fused, parts in gguf_layout.FUSED.items():  # W_QKV (d_model, (H+2H_kv)·d), W_gate_up (d_model, 2·d_mlp)
            if p + parts[0] not in w:  # no gate (GPT-2): W_up alone
                continue
            matrices = [w.pop(p + part) for part in parts]
            w[p + fused] = _joinedout_in(matrices)
            w.update(zip((p + part for part in parts), w[p + fused].split([m.shape[1] for m in matrices], dim=1)))
        for fused, parts in gguf_layout.FUSED_BIASES.items():  # b_QKV ((H+2H_kv)·d,), where the family has it
            if p + parts[0] in w:
                vectors = [w.pop(p + part) for part in parts]
                w[p + fused] = torch.cat(vectors)
                w.update(zip((p + part for part in parts), w[p + fused].split([b.numel() for b in vectors])))
        for name in (p + "W_O", p + "W_down"):
            if name in w:  # else kept as the file's blocks (studygroup.model.packed)
                w[name] = out_in(w[name])
    if "unembed" in w or "embed" in w:
        w["unembed"] = out_in(w["unembed"]) if "unembed" in w else w["embed"].T  # tied: a view of the embedding
    return w


def join_kept(kept: dict, c: Config) -> dict[str, list]:
    """Matrices kept as the file's blocks ({our name: FileMatrix}) under the names the model multiplies:
    W_Q, W_K, W_V as "W_QKV" and W_gate, W_up as "W_gate_up" (their rows one after the other, as
    `fuse` joins them), the others alone: {name: [parts]}."""
    joined = {}
    for l in range(c.n_layers):
        p = f"layers.{l}."
        for fused, parts in gguf_layout.FUSED.items():
            if p + parts[0] in kept:
                joined[p + fused] = [kept[p + part] for part in parts]
    taken = {p for parts in joined.values() for p in parts}
    return joined | {n: [m] for n, m in kept.items() if m not in taken}


def out_in(W: torch.Tensor) -> torch.Tensor:
    """The same (in, out) matrix, stored (out, in) in memory (no copy when it already is)."""
    return W.T.contiguous().T


def _joinedout_in(matrices: list[torch.Tensor]) -> torch.Tensor:
    """(in, out_k) matrices side by side, (in, Σ out_k), stored (out, in): one copy, or none when
    their (out, in) rows already lie one after the other in memory (as the weights cache keeps them)."""
    rows = [W.T for W in matrices]  # (out_k, in) each
    if adjacent(rows):
        whole = (sum(r.shape[0] for r in rows), rows[0].shape[1])  # (Σ out_k, in)
        return torch.as_strided(rows[0], whole, (whole[1], 1), rows[0].storage_offset()).T
    return torch.cat(rows, dim=0).T


def adjacent(rows: list[torch.Tensor]) -> bool:
    """Whether contiguous tensors follow one another in one storage, with the same row width."""
    first = rows[0]
    offset = first.storage_offset()
    for r in rows:
        if (not r.is_contiguous() or r.shape[1:] != first.shape[1:] or r.storage_offset() != offset
                or r.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()):
            return False
        offset += r.numel()
    return True
