"""Attention for B copies of one new member over earlier members shared by every copy.

Silencing candidates for the last member's questions (`studygroup.study.last_question`) recomputes one
row per copy: copy b's last member asks its questions of the same P earlier members (their keys
and values unchanged) and of itself (its own key and value, which differ between copies). Handing
that to a fused kernel means one copy of the P keys and values per copy (B·P·H_kv·d floats per
layer, 200 MB a layer for 64 copies of 8,192 members); here the P keys are multiplied once by
every copy's questions, and each copy's own key is one dot product:

    scores_b = [q_b·K_pastᵀ, q_b·k_b] / √d,   weights_b = softmax(scores_b masked),
    output_b = weights_b[:P]·V_past + weights_b[P]·v_b,

the softmax taken over the shared scores and the copy's own one without joining them (one fewer
copy of the B·P scores per layer).

Shapes: B copies, H query heads sharing H_kv key/value heads (head h uses h // (H / H_kv)),
P earlier members, d = d_head.
"""
from __future__ import annotations

import math

import torch


def attend(q: torch.Tensor, k_own: torch.Tensor, v_own: torch.Tensor, K: torch.Tensor, V: torch.Tensor,
           visible: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q [K; k_own]ᵀ / √d) [V; v_own] for each copy's one question row per head.

    q (B, H, 1, d); k_own, v_own (B, H_kv, 1, d); K, V (1, H_kv, P, d) shared by every copy;
    visible (B, P + 1) bool, True where the copy's question may hear that member (the last
    column: itself), or None (every member). -> (B, H, 1, d), as the fused kernel gives it.

    >>> q, k, v = torch.randn(3, 4, 1, 8), torch.randn(3, 2, 1, 8), torch.randn(3, 2, 1, 8)
    >>> K, V = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    >>> full = lambda X, x: torch.cat([X.expand(3, -1, -1, -1), x], 2).repeat_interleave(2, 1)
    >>> ref = torch.nn.functional.scaled_dot_product_attention(q, full(K, k), full(V, v))
    >>> torch.allclose(attend(q, k, v, K, V), ref, atol=1e-6)
    True
    """
    low = q.dtype in (torch.bfloat16, torch.float16)  # scores and softmax in float32, as the fused kernels do
    if low:
        out = attend(*(t.float() for t in (q, k_own, v_own, K, V)), visible)
        return out.to(q.dtype)
    B, H, _, d = q.shape
    H_kv, P = K.shape[1], K.shape[2]
    g = H // H_kv  # query heads per key/value head
    qg = q.view(B, H_kv, g, d).transpose(0, 1) / math.sqrt(d)  # (H_kv, B, g, d), scaled once
    # every copy's questions against the shared keys, one multiply per key/value head
    S = torch.bmm(qg.reshape(H_kv, B * g, d), K[0].mT).view(H_kv, B, g, P)  # (H_kv, B, g, P)
    s_own = (qg * k_own.transpose(0, 1)).sum(-1, keepdim=True)  # (H_kv, B, g, 1): q_b·k_b/√d
    if visible is not None:
        S.masked_fill_(~visible[None, :, None, :P], float("-inf"))
        s_own = s_own.masked_fill(~visible[None, :, None, P:], float("-inf"))
    # softmax over the P shared scores and the copy's own, without joining them (no copy of S)
    top = torch.maximum(S.amax(-1, keepdim=True), s_own) if P else s_own  # (H_kv, B, g, 1)
    E = S.sub_(top).exp_()  # (H_kv, B, g, P), in place
    e_own = (s_own - top).exp()  # (H_kv, B, g, 1)
    Z = E.sum(-1, keepdim=True) + e_own  # (H_kv, B, g, 1)
    out = torch.bmm(E.view(H_kv, B * g, P), V[0]).view(H_kv, B, g, d)  # (H_kv, B, g, d)
    out.addcmul_(e_own, v_own.transpose(0, 1)).div_(Z)  # its own answer, weighted; normalised
    return out.transpose(0, 1).reshape(B, H, 1, d)
