"""RoPE on its own, against Hugging Face's implementation of the same rotation."""
import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from studygroup.formulas import rope


def test_rope_equals_transformers_rotate_half():
    torch.manual_seed(0)
    q, k = torch.randn(1, 4, 7, 16), torch.randn(1, 2, 7, 16)  # (B, H, T, d)
    cos, sin = rope.angles(7, 16, 10000.0)
    theirs_q, theirs_k = apply_rotary_pos_emb(q, k, cos[None], sin[None])
    assert torch.allclose(rope.apply(q, cos, sin), theirs_q, atol=1e-6)
    assert torch.allclose(rope.apply(k, cos, sin), theirs_k, atol=1e-6)


def test_rope_scores_depend_only_on_relative_position():
    torch.manual_seed(1)
    q, k = torch.randn(16), torch.randn(16)
    cos, sin = rope.angles(12, 16, 10000.0)
    at = lambda x, p: rope.apply(x[None], cos[p:p + 1], sin[p:p + 1])[0]  # noqa: E731
    assert torch.allclose(at(q, 5) @ at(k, 2), at(q, 9) @ at(k, 6), atol=1e-5)
    assert not torch.allclose(at(q, 5) @ at(k, 2), at(q, 5) @ at(k, 4), atol=1e-3)


def test_rotation_keeps_norms():
    x = torch.randn(3, 10, 8)
    cos, sin = rope.angles(10, 8, 500.0)
    assert torch.allclose(rope.apply(x, cos, sin).norm(dim=-1), x.norm(dim=-1), atol=1e-5)
