"""studygroup.formulas.attention: the notations agree with each other and with torch's kernel, and bad input
gets a NotationError that names the problem."""
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.overrides import TorchFunctionMode

from studygroup.formulas import attention
from studygroup.formulas.attention import as_drawn, by_rows, causal_mask, columns, fused, paper, repeat_kv, scores, tiled
from studygroup.errors import NotationError

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
ATOL = {torch.float64: 1e-10, torch.float32: 1e-5}
SOME = settings(max_examples=80, deadline=None)


# --- building problems ---------------------------------------------------------------------------


@dataclass
class Problem:
    """Paper-notation inputs: Q (…, H, T_q, d_k), K (…, H_kv, T_k, d_k), V (…, H_kv, T_k, d_v)."""

    Q: torch.Tensor
    K: torch.Tensor
    V: torch.Tensor
    mask: torch.Tensor | str | None  # paper orientation, broadcasting to (…, H, T_q, T_k)

    def column_mask(self):
        """The same mask in column orientation (…, T_k, T_q)."""
        return self.mask.mT if isinstance(self.mask, torch.Tensor) else self.mask


def qkv(batch, H, H_kv, T_q, T_k, d_k, d_v, seed=0, dtype=torch.float64, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    make = lambda *shape: torch.randn(*batch, *shape, generator=g, dtype=torch.float64)  # noqa: E731
    Q, K, V = make(H, T_q, d_k), make(H_kv, T_k, d_k), make(H_kv, T_k, d_v)
    return tuple(X.to(dtype=dtype, device=device) for X in (Q, K, V))


def random_mask(shape, seed=0, device="cpu"):
    """A random bool mask (…, T_q, T_k) in which every query sees at least one key."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(shape, generator=g) < 0.5
    keep = torch.randint(shape[-1], (*shape[:-1], 1), generator=g)  # one key each query surely sees
    return mask.scatter(-1, keep, True).to(device)


@st.composite
def problems(draw, dtype=torch.float64, masks=("none", "causal", "random")):
    batch = draw(st.lists(st.integers(1, 3), max_size=2))
    H_kv, group = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    T_q = draw(st.integers(1, 9))
    kind = draw(st.sampled_from(masks))
    T_k = draw(st.integers(T_q if kind == "causal" else 1, 12))
    d_k, d_v, seed = draw(st.integers(1, 8)), draw(st.integers(1, 8)), draw(st.integers(0, 2**31))
    Q, K, V = qkv(batch, H_kv * group, H_kv, T_q, T_k, d_k, d_v, seed, dtype)
    mask = {"none": None, "causal": "causal"}.get(kind)
    if kind == "random":  # shaped (…, H, T_q, T_k), (T_q, T_k) or (…, 1, T_q, T_k)
        lead = draw(st.sampled_from([(*batch, H_kv * group), (), (*batch, 1)]))
        mask = random_mask((*lead, T_q, T_k), seed)
    return Problem(Q, K, V, mask)


def sdpa(Q, K, V, mask=None):
    """torch's reference, with our end-aligned causal mask passed explicitly."""
    if mask == "causal":
        mask = causal_mask(Q.shape[-2], K.shape[-2], Q.device)
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=mask, enable_gqa=True)


def close(a, b, atol):
    torch.testing.assert_close(a, b, rtol=0, atol=atol)


# --- the two notations ---------------------------------------------------------------------------


@SOME
@given(p=st.one_of(problems(torch.float64), problems(torch.float32)))
def test_paper_equals_the_transpose_of_the_column_form(p):
    output, weights = paper(p.Q, p.K, p.V, p.mask)
    output_c, weights_c = columns(p.Q.mT, p.K.mT, p.V.mT, p.column_mask())
    close(output, output_c.mT, ATOL[p.Q.dtype])
    close(weights, weights_c.mT, ATOL[p.Q.dtype])


@SOME
@given(p=problems())
def test_paper_rows_and_column_form_columns_sum_to_one(p):
    _, weights = paper(p.Q, p.K, p.V, p.mask)
    _, weights_c = columns(p.Q.mT, p.K.mT, p.V.mT, p.column_mask())
    rows, cols = weights.sum(dim=-1), weights_c.sum(dim=-2)  # (…, H, T_q) both
    close(rows, torch.ones_like(rows), 1e-12)
    close(cols, torch.ones_like(cols), 1e-12)
    assert (weights >= 0).all() and (weights_c >= 0).all()


@SOME
@given(p=problems())
def test_both_forms_equal_torch_sdpa_with_any_bool_mask(p):
    expected = sdpa(p.Q, p.K, p.V, p.mask)
    close(paper(p.Q, p.K, p.V, p.mask)[0], expected, 1e-10)
    close(columns(p.Q.mT, p.K.mT, p.V.mT, p.column_mask())[0].mT, expected, 1e-10)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mask_kind", ["none", "causal", "random"])
def test_default_model_heads_equal_sdpa(device, mask_kind):
    """9 query heads sharing 3 key/value heads, d_head 64, as in the default model."""
    Q, K, V = qkv((2,), 9, 3, 17, 17, 64, 64, seed=1, dtype=torch.float32, device=device)
    mask = {"none": None, "causal": "causal", "random": random_mask((2, 9, 17, 17), 2, device)}[mask_kind]
    is_causal = mask_kind == "causal"  # T_q == T_k, so torch's top-left causal mask is ours
    attn_mask = None if is_causal else mask
    expected = F.scaled_dot_product_attention(Q, K, V, attn_mask=attn_mask, is_causal=is_causal, enable_gqa=True)
    column_mask = mask.mT if isinstance(mask, torch.Tensor) else mask
    close(paper(Q, K, V, mask)[0], expected, 1e-5)
    close(columns(Q.mT, K.mT, V.mT, column_mask)[0].mT, expected, 1e-5)
    close(fused(Q, K, V, mask), expected, 1e-5)
    close(tiled(Q, K, V, mask, tile=5), expected, 1e-5)


def test_query_head_h_uses_key_value_head_h_over_group():
    Q, K, V = qkv((), 9, 3, 5, 6, 4, 3, seed=3)
    output, _ = paper(Q, K, V)
    for h in range(9):
        kv = h // 3
        alone, _ = paper(Q[h : h + 1], K[kv : kv + 1], V[kv : kv + 1])
        close(output[h : h + 1], alone, 1e-12)
    assert repeat_kv(torch.arange(3.0).reshape(3, 1, 1), 3).flatten().tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]


# --- what the article says about Q, K and V ------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_swapping_q_and_k_transposes_the_scores_but_changes_the_result(seed):
    Q, K, V = qkv((), 2, 2, 6, 6, 8, 5, seed=seed)
    close(scores(K, Q), scores(Q, K).mT, 1e-12)
    output, weights = paper(Q, K, V)
    swapped_output, swapped_weights = paper(K, Q, V)
    assert (output - swapped_output).abs().max() > 1e-3
    assert (weights - swapped_weights.mT).abs().max() > 1e-3  # softmax runs the other way


def test_scores_are_q_k_transposed_over_root_d_k():
    Q, K, _ = qkv((2,), 6, 2, 3, 4, 16, 1, seed=4)
    S = scores(Q, K)
    assert S.shape == (2, 6, 3, 4)
    close(S[1, 5], Q[1, 5] @ K[1, 5 // 3].T / 4.0, 1e-12)


@SOME
@given(T=st.integers(1, 10), H=st.integers(1, 3), seed=st.integers(0, 2**31))
def test_permuting_tokens_permutes_the_outputs(T, H, seed):
    Q, K, V = qkv((), H, H, T, T, 4, 3, seed)
    perm = torch.randperm(T, generator=torch.Generator().manual_seed(seed))
    output, _ = paper(Q, K, V)
    permuted, _ = paper(Q[:, perm], K[:, perm], V[:, perm])
    close(permuted, output[:, perm], 1e-12)


@SOME
@given(T=st.integers(2, 10), i=st.integers(0, 8), seed=st.integers(0, 2**31))
def test_causal_output_at_i_ignores_later_tokens(T, i, seed):
    i = i % (T - 1)
    Q, K, V = qkv((1,), 3, 1, T, T, 4, 3, seed)
    Q2, K2, V2 = (X.clone() for X in (Q, K, V))
    for X in (Q2, K2, V2):
        X[..., i + 1 :, :] = torch.randn(X[..., i + 1 :, :].shape, dtype=X.dtype) * 10
    for attend in (lambda *a: paper(*a)[0], lambda *a: tiled(*a, tile=3), fused):
        before, after = attend(Q, K, V, "causal"), attend(Q2, K2, V2, "causal")
        close(after[..., : i + 1, :], before[..., : i + 1, :], 1e-12)
        assert not torch.allclose(after[..., i + 1 :, :], before[..., i + 1 :, :])


def test_causal_mask_aligns_the_last_query_with_the_last_key():
    assert causal_mask(3, 3).int().tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    assert causal_mask(2, 4).int().tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    assert causal_mask(2, 4).dtype == torch.bool


# --- tiled and fused -----------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mask_kind", ["none", "causal", "random"])
@pytest.mark.parametrize("tile", [1, 7, 33, 127])
def test_tiled_equals_paper_for_odd_tiles(device, mask_kind, tile):
    Q, K, V = qkv((2,), 6, 2, 300, 300, 16, 8, seed=tile, dtype=torch.float32, device=device)
    mask = {"none": None, "causal": "causal", "random": random_mask((2, 1, 300, 300), tile, device)}[mask_kind]
    close(tiled(Q, K, V, mask, tile=tile), paper(Q, K, V, mask)[0], 1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mask_kind, tile", [("causal", 127), ("random", 128)])
def test_tiled_equals_paper_at_4096_tokens(device, mask_kind, tile):
    T = 4096
    Q, K, V = qkv((), 2, 1, T, T, 16, 16, seed=5, dtype=torch.float32, device=device)
    mask = "causal" if mask_kind == "causal" else random_mask((T, T), 6, device)
    close(tiled(Q, K, V, mask, tile=tile), paper(Q, K, V, mask)[0], 1e-5)


@SOME
@given(p=problems(torch.float32), tile=st.integers(1, 13))
def test_tiled_equals_paper_for_any_shape(p, tile):
    close(tiled(p.Q, p.K, p.V, p.mask, tile=tile), paper(p.Q, p.K, p.V, p.mask)[0], 1e-5)


def test_tiled_causal_with_fewer_queries_than_keys():
    Q, K, V = qkv((), 4, 2, 100, 333, 8, 8, seed=7, dtype=torch.float32)
    close(tiled(Q, K, V, "causal", tile=33), paper(Q, K, V, "causal")[0], 1e-5)


class LargestTensor(TorchFunctionMode):
    """Records the largest tensor any torch call returns."""

    largest = 0

    def __init__(self):
        super().__init__()
        self.sizes = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
                self.sizes.append(t.numel())
        return out


def test_tiled_never_holds_a_t_by_t_matrix():
    H, T, tile = 4, 256, 16
    Q, K, V = qkv((), H, 2, T, T, 8, 8, seed=8, dtype=torch.float32)
    with LargestTensor() as seen:
        tiled(Q, K, V, "causal", tile=tile)
    assert 0 < seen.largest <= H * T * tile < H * T * T


@SOME
@given(p=problems(torch.float32), block=st.integers(1, 13), with_scores=st.booleans())
def test_by_rows_equals_paper_for_any_shape(p, block, with_scores):
    out, weights, S = by_rows(p.Q, p.K, p.V, p.mask, block=block, with_scores=with_scores)
    expected_out, expected_weights = paper(p.Q, p.K, p.V, p.mask)
    close(out, expected_out, 1e-5)
    close(weights, expected_weights, 1e-5)
    if with_scores:
        close(S, scores(p.Q, p.K), 1e-5)
    else:
        assert S is None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mask_kind", ["causal", "random"])
def test_by_rows_writes_the_stored_dtype_and_holds_one_block(device, mask_kind):
    H, T, block = 4, 300, 32
    Q, K, V = qkv((2,), H, 2, T, T, 8, 8, seed=11, dtype=torch.float32, device=device)
    mask = "causal" if mask_kind == "causal" else random_mask((2, 1, T, T), 12, device)
    with LargestTensor() as seen:
        out, weights, _ = by_rows(Q, K, V, mask, block=block, weights_dtype=torch.float16)
    expected_out, expected_weights = paper(Q, K, V, mask)
    assert weights.dtype == torch.float16
    close(out, expected_out, 1e-5)
    close(weights.float(), expected_weights, 1e-3)  # float16 keeps 11 bits
    maps = 2 * H * T * T  # the weights themselves (both batches); every other tensor far smaller
    assert seen.largest == maps and seen.sizes.count(maps) == 1 and sorted(seen.sizes)[-2] <= maps // 4


def test_by_rows_refuses_a_bad_block():
    Q, K, V = qkv((), 2, 1, 4, 4, 8, 8)
    with pytest.raises(NotationError, match="block must be a positive int"):
        by_rows(Q, K, V, "causal", block=0)


@SOME
@given(p=st.one_of(problems(torch.float64), problems(torch.float32)))
def test_fused_equals_paper(p):
    close(fused(p.Q, p.K, p.V, p.mask), paper(p.Q, p.K, p.V, p.mask)[0], ATOL[p.Q.dtype])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("T_q, T_k", [(7, 7), (3, 7)])  # torch's is_causal path, then our own mask
def test_fused_causal_equals_paper(device, T_q, T_k):
    Q, K, V = qkv((2,), 9, 3, T_q, T_k, 64, 64, seed=9, dtype=torch.float32, device=device)
    close(fused(Q, K, V, "causal"), paper(Q, K, V, "causal")[0], 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_bfloat16_is_close_to_float64(device):
    Q, K, V = qkv((1,), 9, 3, 20, 20, 64, 64, seed=10, dtype=torch.float64, device=device)
    expected = paper(Q, K, V, "causal")[0]
    low = [X.bfloat16() for X in (Q, K, V)]
    results = {
        "paper": paper(*low, "causal")[0],
        "columns": columns(*(X.mT for X in low), "causal")[0].mT,
        "tiled": tiled(*low, "causal", tile=7),
        "fused": fused(*low, "causal"),
    }
    for name, result in results.items():
        assert result.dtype == torch.bfloat16, name
        close(result.double(), expected, 0.05)


def test_validate_false_gives_the_same_result():
    Q, K, V = qkv((2,), 6, 3, 5, 8, 4, 4, seed=11)
    mask = random_mask((5, 8), 12)
    for attend in (paper, columns):
        args = (Q, K, V, mask) if attend is paper else (Q.mT, K.mT, V.mT, mask.mT)
        close(attend(*args, validate=False)[0], attend(*args)[0], 0)
    close(tiled(Q, K, V, mask, tile=3, validate=False), tiled(Q, K, V, mask, tile=3), 0)
    close(fused(Q, K, V, mask, validate=False), fused(Q, K, V, mask), 0)


# --- the drawn form ------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(T_q=st.integers(1, 12), T_k=st.integers(1, 12), d_k=st.integers(1, 8), d_v=st.integers(1, 12), same=st.booleans())
def test_the_drawn_form_refuses_every_shape(T_q, T_k, d_k, d_v, same):
    d_v = T_q if same else d_v  # T_q == d_v is where the product would run silently
    Q, K, V = qkv((), 2, 2, T_q, T_k, d_k, d_v)
    with pytest.raises(NotationError) as error:
        as_drawn(Q.mT, K.mT, V.mT)
    message = str(error.value)
    assert f"T_k×T_q = {T_k}×{T_q}" in message and f"d_v×T_k = {d_v}×{T_k}" in message
    assert "V softmax(Kᵀ Q / √d_k)" in message
    assert ("silently" in message) == (T_q == d_v)


# --- bad input -----------------------------------------------------------------------------------


def _good():
    return qkv((2,), 4, 2, 3, 5, 6, 7, seed=13)  # Q (2, 4, 3, 6), K (2, 2, 5, 6), V (2, 2, 5, 7)


def _nan(X, value):
    X = X.clone()
    X[0, 0, 0, 0] = value
    return X


def _bad_cases():
    Q, K, V = _good()
    hides_query_2 = torch.ones(3, 5, dtype=torch.bool)
    hides_query_2[2] = False
    return {
        "d_k": ((Q, K[..., :4], V, None), ["d_k", "d_k=6", "d_k=4"]),
        "rank": ((Q[0, 0], K, V, None), ["Q", "at least 3", "(3, 6)"]),
        "nan": ((_nan(Q, float("nan")), K, V, None), ["Q", "NaN"]),
        "inf": ((Q, K, _nan(V, float("inf")), None), ["V", "inf"]),
        "empty T": ((Q[..., :0, :], K, V, None), ["T_q=0", "empty"]),
        "empty d": ((Q[..., :0], K[..., :0], V, None), ["d_k=0", "empty"]),
        "T_k": ((Q, K, V[..., :4, :], None), ["T_k", "T_k=5", "T_k=4"]),
        "heads": ((Q[:, :3], K, V, None), ["H=3", "H_kv=2", "multiple"]),
        "mask shape": ((Q, K, V, torch.ones(3, 4, dtype=torch.bool)), ["mask", "(3, 4)", "(2, 4, 3, 5)"]),
        "mask dtype": ((Q, K, V, torch.ones(3, 5)), ["mask", "bool", "torch.float32"]),
        "mask hides": ((Q, K, V, hides_query_2), ["query 2", "every key"]),
        "mask word": ((Q, K, V, "future"), ["causal", "'future'"]),
        "causal blind": ((Q[..., :3, :], K[..., :2, :], V[..., :2, :], "causal"), ["causal", "T_q=3", "T_k=2", "0..0"]),
    }


@pytest.mark.parametrize("attend", [paper, tiled, fused], ids=["paper", "tiled", "fused"])
@pytest.mark.parametrize("case", list(_bad_cases()))
def test_bad_input_gets_a_clear_error(attend, case):
    args, fragments = _bad_cases()[case]
    with pytest.raises(NotationError) as error:
        attend(*args)
    for fragment in fragments:
        assert fragment in str(error.value), (fragment, str(error.value))


@pytest.mark.parametrize("case", ["d_k", "rank", "nan", "T_k", "heads", "mask hides"])
def test_bad_input_in_column_notation_gets_a_clear_error(case):
    (Q, K, V, mask), fragments = _bad_cases()[case]
    T = lambda X: X.mT if X.dim() >= 2 else X  # noqa: E731
    with pytest.raises(NotationError) as error:
        columns(T(Q), T(K), T(V), None if mask is None else mask.mT)
    for fragment in fragments:
        fragment = fragment.replace("(3, 6)", "(6, 3)")  # the rank case's shape, transposed
        assert fragment in str(error.value), (fragment, str(error.value))


def test_a_mask_removing_every_key_names_the_query_and_its_index():
    Q, K, V = _good()
    mask = torch.ones(2, 4, 3, 5, dtype=torch.bool)
    mask[1, 2, 0] = False
    with pytest.raises(NotationError, match=r"query 0 \(at mask index \(1, 2\)"):
        paper(Q, K, V, mask)
    with pytest.raises(NotationError, match=r"query 0 \(at mask index \(1, 2\)"):
        columns(Q.mT, K.mT, V.mT, mask.mT)


def test_other_bad_arguments():
    Q, K, V = _good()
    with pytest.raises(NotationError, match="tile must be a positive int"):
        tiled(Q, K, V, tile=0)
    with pytest.raises(NotationError, match="dtype torch.int64"):
        paper(Q, K, V.long())
    with pytest.raises(NotationError, match="torch.float32 on cpu but Q is torch.float64"):
        paper(Q, K.float(), V)
    with pytest.raises(NotationError, match=r"batch axes .* do not broadcast"):
        paper(Q, K[:1].expand(3, -1, -1, -1), V)
    with pytest.raises(NotationError, match="d_k"):
        scores(Q, K[..., :2])


def test_every_public_function_has_a_docstring_with_an_example():
    for name in attention.__all__:  # pytest runs the examples (--doctest-modules)
        assert ">>> " in getattr(attention, name).__doc__, name


def test_module_stays_readable():
    with open(attention.__file__) as f:
        assert len(f.readlines()) <= 400


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from([1, 2, 3]), max_size=4), min_size=1, max_size=3))
def test_broadcast_shapes_agrees_with_torch(shapes):
    from studygroup.formulas.checks import broadcast_shapes

    try:
        expected = tuple(torch.broadcast_shapes(*shapes))
    except RuntimeError:
        with pytest.raises(ValueError, match="do not broadcast"):
            broadcast_shapes(*shapes)
        return
    assert broadcast_shapes(*shapes) == expected
