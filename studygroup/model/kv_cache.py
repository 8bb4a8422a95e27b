"""The key/value cache of a generation: every layer's keys (after RoPE) and values so far, in place,
so that each new member's pass reads the members before it without passing them again.

Shapes: L layers, H_kv key/value heads, d = d_head.
"""
from __future__ import annotations

import torch

from studygroup.model.record import step_name


class Cache:
    """Every layer's keys and values so far, in place: (1, H_kv, capacity, d) each, T filled."""

    def __init__(self, c, capacity: int, device, dtype):
        shape = (1, c.n_kv_heads, capacity, c.d_head)
        self.k = [torch.empty(shape, device=device, dtype=dtype) for _ in range(c.n_layers)]
        self.v = [torch.empty(shape, device=device, dtype=dtype) for _ in range(c.n_layers)]
        self.T = 0

    def reserve(self, capacity: int) -> bool:
        """Room for `capacity` members (the filled ones copied over); True if it grew."""
        if capacity <= self.k[0].shape[-2]:
            return False
        for kv in (self.k, self.v):
            for l, old in enumerate(kv):
                kv[l] = torch.empty((*old.shape[:2], capacity, old.shape[-1]), device=old.device, dtype=old.dtype)
                kv[l][:, :, :self.T] = old[:, :, :self.T]
        return True

    def append(self, steps: dict[str, torch.Tensor]) -> None:
        """Add the keys and values a pass recorded: (1, H_kv, T_new, d) per layer."""
        T_new = steps["layers.0.k"].shape[-2]
        for l in range(len(self.k)):
            self.k[l][:, :, self.T:self.T + T_new] = steps[step_name("k", l)]
            self.v[l][:, :, self.T:self.T + T_new] = steps[step_name("v", l)]
        self.T += T_new

    def past(self, T: int | None = None) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """The first T members' keys and values (all filled ones by default): (1, H_kv, T, d) per layer."""
        T = self.T if T is None else T
        return {l: (self.k[l][:, :, :T], self.v[l][:, :, :T]) for l in range(len(self.k))}

    @property
    def nbytes(self) -> int:
        """Bytes of its keys and values, the room reserved included."""
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    def keys(self) -> dict[int, torch.Tensor]:
        return {l: self.k[l][0, :, :self.T].float() for l in range(len(self.k))}
