"""shared_past.attend: copies of one new member over shared earlier members, against sdpa on
the keys and values written out for every copy (the float64 path of the reference kernel)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from studygroup.formulas import shared_past


def reference(q, k_own, v_own, K, V, visible):
    B, H = q.shape[:2]
    g = H // K.shape[1]
    keys = torch.cat([K.expand(B, -1, -1, -1), k_own], 2).repeat_interleave(g, 1)  # (B, H, P + 1, d)
    values = torch.cat([V.expand(B, -1, -1, -1), v_own], 2).repeat_interleave(g, 1)
    mask = None if visible is None else visible[:, None, None, :]  # (B, 1, 1, P + 1)
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)


@settings(max_examples=60, deadline=None)
@given(B=st.integers(1, 5), H_kv=st.integers(1, 3), group=st.integers(1, 3), P=st.integers(1, 9),
       d=st.sampled_from([1, 4, 8]), masked=st.booleans(), seed=st.integers(0, 2**16))
def test_equals_attention_over_the_keys_written_out_per_copy(B, H_kv, group, P, d, masked, seed):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    q, k, v, K, V = r(B, H_kv * group, 1, d), r(B, H_kv, 1, d), r(B, H_kv, 1, d), r(1, H_kv, P, d), r(1, H_kv, P, d)
    visible = None
    if masked:  # any pattern, each copy hearing at least one member (itself, where nothing else)
        visible = torch.rand(B, P + 1, generator=g) > 0.5
        visible[~visible.any(-1), P] = True
    got = shared_past.attend(q, k, v, K, V, visible)
    assert got.shape == (B, H_kv * group, 1, d)
    torch.testing.assert_close(got, reference(q, k, v, K, V, visible), atol=1e-12, rtol=1e-10)


def test_a_copy_that_hears_only_itself_gets_its_own_answer():
    q, k, v, K, V = torch.randn(2, 4, 1, 8), torch.randn(2, 2, 1, 8), torch.randn(2, 2, 1, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    visible = torch.zeros(2, 7, dtype=torch.bool)
    visible[:, 6] = True
    out = shared_past.attend(q, k, v, K, V, visible)
    torch.testing.assert_close(out, v.repeat_interleave(2, 1))


def test_bfloat16_is_computed_in_float32():
    """Within the output's own bfloat16 rounding (~4e-3 on answers near 1); scores, softmax and
    sums kept in bfloat16 are 3× further off (1.2-1.4e-2 on these seeds)."""
    for seed in (1, 2, 3):
        g = torch.Generator().manual_seed(seed)
        r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
        q, k, v, K, V = 0.3 * r(4, 6, 1, 16), r(4, 2, 1, 16), r(4, 2, 1, 16), r(1, 2, 300, 16), r(1, 2, 300, 16) + 1
        low = shared_past.attend(*(t.bfloat16() for t in (q, k, v, K, V)))
        assert low.dtype == torch.bfloat16
        assert (low.double() - reference(q, k, v, K, V, None)).abs().max() < 6e-3
