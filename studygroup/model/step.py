"""One new member's pass during generation, lean: its row only, no recording machinery.

The key/value cache is written in place, RoPE's angles are computed once for the whole window,
the fused Q/K/V and gate/up matrices are multiplied once each, straight from the file's quantized
blocks where the kernel reads them (`row_kernels`: the same float32 weights, a fifth of the bytes
to read), and the attention of the one row is written out (scores, softmax, weighted values) so
that its weights, needed for each word's record, come with it at no extra cost. Every family the model reads goes through it: q/k norms,
biases, norms after attention and the MLP, the embedding's scale and sliding windows are data.

Shapes: L layers, H query heads, H_kv key/value heads, g = H / H_kv, d = d_head, P members before.
"""
from __future__ import annotations

import math

import torch

from studygroup.formulas import rope
from studygroup.model import row_kernels
from studygroup.model.linear import project
from studygroup.model.norm import rms_norm


class LeanStep:
    """One row through every layer over a key/value cache (1, H_kv, capacity, d) per layer."""

    @staticmethod
    def takes(model) -> bool:
        """Whether the lean step computes this family's pass: RMSNorm, RoPE and a gated MLP (GPT-2's
        LayerNorm, learned positions and plain MLP go through the general pass)."""
        a = model.config.arch
        return a.norm == "rms" and a.gated and a.position != "learned"

    def __init__(self, model, cache):
        c = model.config
        self.model, self.c, self.w, self.cache = model, c, model.w, cache
        capacity = cache.k[0].shape[-2]
        self.angles = {r: model._angles(capacity, 0, r) for r in {c.rope_of(l) for l in range(c.n_layers)}}
        self.compiled = row_kernels.usable(model)  # the compiled kernels (float32 on the CPU, built)
        self.blocks = row_kernels.lean_matrices_of(model) if self.compiled else {}  # {name: BlockMatrix}
        self.layers = [self._layer_weights(l) for l in range(c.n_layers)]
        self.unembed = self._multiply("unembed")
        self.scale = 1 / math.sqrt(c.d_head)

    def _layer_weights(self, l: int) -> dict:
        w, p, c = self.w, f"layers.{l}.", self.c
        get = lambda name: w.get(p + name)
        return {"attn_norm": w[p + "attn_norm"], "W_QKV": self._multiply(p + "W_QKV"), "b_QKV": get("b_QKV"),
                "q_norm": get("q_norm"), "k_norm": get("k_norm"), "W_O": self._multiply(p + "W_O"),
                "post_attn_norm": get("post_attn_norm"), "mlp_norm": w[p + "mlp_norm"],
                "W_gate_up": self._multiply(p + "W_gate_up"), "W_down": self._multiply(p + "W_down"),
                "post_mlp_norm": get("post_mlp_norm"), "angles": self.angles[c.rope_of(l)], "window": c.window_of(l)}

    def _multiply(self, name: str):
        """x (1, in) -> x·W (1, out) for our matrix `name`: from its blocks where the kernel reads them."""
        if name in self.blocks:
            return self.blocks[name]
        if name in getattr(self.w, "kept", {}):  # kept as blocks the kernel cannot multiply: a layer at a time
            return lambda x: project(x, self.w[name])
        W = self.w[name]
        return lambda x: project(x, W)

    def __call__(self, word_id: int):
        """Logits (V,) of the new member at position P = cache.T and its weights (L, H, P + 1) over
        every member so far; its keys and values join the cache."""
        m, c, cache = self.model, self.c, self.cache
        H, H_kv, d, P = c.n_heads, c.n_kv_heads, c.d_head, cache.T
        x = m._embed(torch.tensor([word_id], device=m.device))  # (1, d_model)
        weights = torch.zeros(c.n_layers, H, P + 1, device=m.device, dtype=x.dtype)
        for l, lw in enumerate(self.layers):
            E = rms_norm(x, lw["attn_norm"], c.rms_eps)  # (1, d_model)
            qkv = lw["W_QKV"](E)  # (1, (H + 2·H_kv)·d)
            if lw["b_QKV"] is not None:
                qkv = qkv + lw["b_QKV"]
            qk, v = qkv[0].split([(H + H_kv) * d, H_kv * d])
            qk, v = qk.view(H + H_kv, d), v.view(H_kv, d)  # the questions' and keys' rows, one tensor
            if lw["q_norm"] is not None:
                qk = torch.cat([rms_norm(qk[:H], lw["q_norm"], c.rms_eps), rms_norm(qk[H:], lw["k_norm"], c.rms_eps)])
            cos, sin = (a[P] for a in lw["angles"])  # (d,)
            q, k = rope.apply(qk, cos, sin).split([H, H_kv])  # (H, d), (H_kv, d): both turned at once
            K, V = cache.k[l][0], cache.v[l][0]  # (H_kv, capacity, d)
            K[:, P], V[:, P] = k, v
            start = 0 if lw["window"] is None else max(0, P + 1 - lw["window"])
            z = self._attend(q, K, V, start, P + 1, weights[l, :, start:])  # (H, d); weights (H, S) written
            attn_out = lw["W_O"](z.view(1, H * d))  # (1, d_model)
            if lw["post_attn_norm"] is not None:
                attn_out = rms_norm(attn_out, lw["post_attn_norm"], c.rms_eps)
            x = x + attn_out
            x = x + self._mlp(rms_norm(x, lw["mlp_norm"], c.rms_eps), lw)
        cache.T += 1
        final = rms_norm(x, self.w["final_norm"], c.rms_eps)
        return self.unembed(final)[0], weights  # (V,), (L, H, P + 1)

    def _attend(self, q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, start: int, end: int,
                weights: torch.Tensor) -> torch.Tensor:
        """The row's attention over cache rows start .. end − 1, per head: its weights written into
        `weights` (H, S), the weighted sums returned. q (H, d); K, V (H_kv, capacity, d) -> (H, d)"""
        if self.compiled:
            return row_kernels.attend_row(q, K, V, start, self.scale, weights)
        H_kv, d = K.shape[0], K.shape[-1]
        K, V = K[:, start:end], V[:, start:end]  # (H_kv, S, d)
        scores = torch.matmul(q.view(H_kv, -1, d), K.transpose(1, 2)) * self.scale  # (H_kv, g, S)
        a = torch.softmax(scores, -1)  # (H_kv, g, S)
        weights.copy_(a.view(weights.shape))
        return torch.matmul(a, V).view(-1, d)  # (H, d)

    def _mlp(self, x: torch.Tensor, lw: dict) -> torch.Tensor:
        """The family's gated MLP and the norm after it, for one row. (1, d_model) -> (1, d_model)"""
        gate, up = lw["W_gate_up"](x).chunk(2, dim=-1)  # (1, d_mlp) each
        out = lw["W_down"](self.model.gate(gate, True) * up)  # (1, d_model)
        return out if lw["post_mlp_norm"] is None else rms_norm(out, lw["post_mlp_norm"], self.c.rms_eps)
