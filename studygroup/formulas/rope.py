"""Rotary position embedding (RoPE), in Hugging Face's "rotate-half" layout.

In a RoPE model, position is not added to the embedding E (as in the paper's sinusoids, or the
article's "token and position embeddings"): it rotates each query and key instead, pair of
dimensions by pair of dimensions, by an angle proportional to the token's position. A score
Q_i·K_j then depends on the positions only through i - j.

Layout: dimension k is paired with k + d_head/2 (rotate-half). GGUF files store W_Q and W_K with
rows permuted so that pairs are adjacent (2k, 2k+1); `studygroup.gguf.weights` undoes that permutation
when it reads the file, so this module, Hugging Face and our recorded Q/K all agree per dimension.
"""
from __future__ import annotations

import torch


def angles(T: int, d_head: int, base: float, device=None, offset: int = 0,
           freq_divisors: torch.Tensor | None = None, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotation angle for each position and dimension.

    θ_{p,k} = (p / scale) · base^(-2k/d_head) / divisor_k, repeated over both halves. The divisors
    (d_head/2,) are Llama 3.1's frequency scaling as llama.cpp stores it (rope_freqs.weight): slow
    pairs turn up to `factor` times slower, for a longer context; none (all 1) elsewhere. `scale` is
    linear RoPE scaling (rope.scaling.factor; llama.cpp's freq_scale = 1/scale): every pair slower.

    Returns cos, sin: (T, d_head), float32.

    >>> cos, sin = angles(4, 8, 10000.0)
    >>> tuple(cos.shape), float(cos[0, 0])
    ((4, 8), 1.0)
    """
    inv_freq = base ** (-torch.arange(0, d_head, 2, dtype=torch.float64, device=device) / d_head)  # (d_head/2,)
    if freq_divisors is not None:
        inv_freq = inv_freq / freq_divisors.to(device=inv_freq.device, dtype=torch.float64)
    inv_freq = inv_freq / scale
    positions = torch.arange(offset, offset + T, dtype=torch.float64, device=device)  # (T,)
    theta = torch.outer(positions, inv_freq)  # (T, d_head/2)
    theta = torch.cat([theta, theta], dim=-1)  # (T, d_head)
    return theta.cos().float(), theta.sin().float()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the last dimension split in halves. (…, d_head) -> (…, d_head)"""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate queries or keys by their positions.

    x: (…, T, d_head); cos, sin: (T, d_head) -> (…, T, d_head)

    >>> cos, sin = angles(3, 4, 10000.0)
    >>> x = torch.ones(2, 3, 4)
    >>> torch.allclose(apply(x, cos, sin)[:, 0], x[:, 0])  # position 0 is not rotated
    True
    """
    return x * cos.to(x.dtype) + rotate_half(x) * sin.to(x.dtype)
