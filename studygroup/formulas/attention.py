"""Scaled dot-product attention, in the paper's notation and in 3Blue1Brown's.

Paper ("Attention Is All You Need"), rows are tokens, softmax per row:

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V

Column notation (3Blue1Brown), columns are tokens, every matrix transposed, softmax per column:

    Attention(Q, K, V) = V softmax(Kᵀ Q / √d_k)

Shapes: Q (…, H, T_q, d_k), K (…, H_kv, T_k, d_k), V (…, H_kv, T_k, d_v) in paper notation, the
last two axes swapped in column notation. H query heads share H_kv key/value heads (grouped-query
attention): query head h uses key/value head h // (H // H_kv), as Llama does. Masks are bool,
True where a query may see a key, shaped like the weights (or broadcasting to them); the string
"causal" means query i sees keys up to i + (T_k - T_q), the last query aligned with the last key.

Every function checks its inputs (shapes, finite values, masks) unless given validate=False, and
raises NotationError with a message that names what to fix.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from studygroup.formulas.checks import broadcast_shapes, check_attention
from studygroup.errors import NotationError

__all__ = ["as_drawn", "causal_mask", "columns", "fused", "paper", "repeat_kv", "scores", "tiled"]

Mask = torch.Tensor | str | None  # bool tensor (True = may see), "causal", or None (see all)


def causal_mask(T_q: int, T_k: int, device: torch.device | str | None = None) -> torch.Tensor:
    """True where query i may see key j: j <= i + (T_k - T_q), aligned at the end.

    Returns a bool tensor (T_q, T_k), paper orientation (transpose it for column notation).

    >>> causal_mask(2, 3).int()
    tensor([[1, 1, 0],
            [1, 1, 1]], dtype=torch.int32)
    """
    return _causal_block(T_q, T_k, 0, T_k, device)


def _causal_block(T_q: int, T_k: int, start: int, stop: int, device) -> torch.Tensor:
    """Columns start..stop-1 of causal_mask(T_q, T_k), built without the rest."""
    i = torch.arange(T_q, device=device)[:, None]  # (T_q, 1) query positions
    j = torch.arange(start, stop, device=device)[None, :]  # (1, stop - start) key positions
    return j <= i + (T_k - T_q)  # (T_q, stop - start)


def repeat_kv(X: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Repeat each key/value head n_rep times, so head h of the result is head h // n_rep of X.

    X (…, H_kv, T, d) -> (…, H_kv * n_rep, T, d); the head axis is -3 in both notations.

    >>> repeat_kv(torch.tensor([[[1.0]], [[2.0]]]), 2).flatten().tolist()
    [1.0, 1.0, 2.0, 2.0]
    """
    return X if n_rep == 1 else X.repeat_interleave(n_rep, dim=-3)


def _is_causal(mask: Mask) -> bool:
    """True for mask="causal"; refuses any other string, whether or not the inputs are validated."""
    if isinstance(mask, str) and mask != "causal":
        raise NotationError(f'mask must be None, "causal" or a bool tensor; got {mask!r}')
    return isinstance(mask, str)


def _visible(mask: Mask, T_q: int, T_k: int, device) -> torch.Tensor | None:
    """The mask as a bool tensor in paper orientation (…, T_q, T_k), or None for no mask."""
    return causal_mask(T_q, T_k, device) if _is_causal(mask) else mask


def scores(Q: torch.Tensor, K: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    """Attention scores Q Kᵀ / √d_k in paper notation: entry (i, j) is how well key j answers query i.

    Q (…, H, T_q, d_k), K (…, H_kv, T_k, d_k) -> (…, H, T_q, T_k). Swapping Q and K transposes
    the scores; it is the softmax's direction and V's place that tell them apart.

    >>> Q = torch.tensor([[[2.0, 0, 0, 0], [0, 6.0, 0, 0]]])  # (H=1, T_q=2, d_k=4)
    >>> K = torch.tensor([[[1.0, 1, 0, 0], [0, 0, 1, 1]]])  # (H_kv=1, T_k=2, d_k=4)
    >>> scores(Q, K)  # √d_k = 2; both queries are answered by key 0 alone
    tensor([[[1., 0.],
             [3., 0.]]])
    """
    if validate:
        check_attention({"Q": Q, "K": K}, "paper")
    d_k = Q.shape[-1]
    K = repeat_kv(K, Q.shape[-3] // K.shape[-3])  # (…, H, T_k, d_k)
    # Q Kᵀ / √d_k
    return Q @ K.mT / math.sqrt(d_k)  # (…, H, T_q, d_k) @ (…, H, d_k, T_k) -> (…, H, T_q, T_k)


def paper(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, mask: Mask = None, *, validate: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention in the paper's notation: rows are tokens, softmax per row.

    Q (…, H, T_q, d_k), K (…, H_kv, T_k, d_k), V (…, H_kv, T_k, d_v), mask broadcasting to
    (…, H, T_q, T_k) or "causal" -> output (…, H, T_q, d_v), weights (…, H, T_q, T_k).
    Row i of the weights says how query i shares its attention over the keys; it sums to 1.

    >>> Q = K = torch.eye(2)[None]  # (H=1, T=2, d_k=2): each token's key matches its own query
    >>> V = torch.tensor([[[1.0], [3.0]]])  # (H_kv=1, T_k=2, d_v=1)
    >>> output, weights = paper(Q, K, V, mask="causal")
    >>> output.flatten().tolist(), weights.sum(-1).flatten().tolist()  # doctest: +ELLIPSIS
    ([1.0, 2.339...], [1.0, 1.0])
    """
    if validate:
        check_attention({"Q": Q, "K": K, "V": V}, "paper", mask)
    T_q, T_k = Q.shape[-2], K.shape[-2]
    S = scores(Q, K, validate=False)  # (…, H, T_q, T_k)
    visible = _visible(mask, T_q, T_k, Q.device)  # broadcasts to (…, H, T_q, T_k)
    if visible is not None:
        S = S.masked_fill(~visible, float("-inf"))
    # softmax(Q Kᵀ / √d_k), per row
    weights = torch.softmax(S, dim=-1)  # (…, H, T_q, T_k)
    # softmax(Q Kᵀ / √d_k) V
    output = weights @ repeat_kv(V, Q.shape[-3] // K.shape[-3])  # (…, H, T_q, T_k) @ (…, H, T_k, d_v) -> (…, H, T_q, d_v)
    return output, weights


def by_rows(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor | None, mask: Mask = None, block: int = 128, *,
    weights_dtype: torch.dtype | None = None, with_scores: bool = False, validate: bool = True,
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
    """paper(), a block of query rows at a time, written straight into the tensors it returns.

    Q, K, V, mask as in paper() -> output (…, H, T_q, d_v) (None when V is None: the weights
    alone), weights (…, H, T_q, T_k) in `weights_dtype` (default Q's), and the scores before the
    mask when `with_scores` (else None).
    No T_q×T_k temporary exists besides those results: one block's scores at a time. With a
    causal mask and no scores asked for, a block reads only the keys its rows can see (about
    half the work); the weights it cannot see stay 0.

    >>> _ = torch.manual_seed(0)
    >>> Q, K, V = torch.randn(3, 5, 4), torch.randn(1, 5, 4), torch.randn(1, 5, 2)
    >>> out, w, _ = by_rows(Q, K, V, "causal", block=2)
    >>> o, w_ = paper(Q, K, V, "causal")
    >>> torch.allclose(out, o, atol=1e-6), torch.allclose(w, w_, atol=1e-6)
    (True, True)
    """
    if validate:
        check_attention({"Q": Q, "K": K, "V": K if V is None else V}, "paper", mask)
        if isinstance(block, bool) or not isinstance(block, int) or block < 1:
            raise NotationError(f"block must be a positive int (query rows per block); got {block!r}")
    T_q, T_k, causal = Q.shape[-2], K.shape[-2], _is_causal(mask)
    n_rep = Q.shape[-3] // K.shape[-3]
    K = repeat_kv(K, n_rep)  # (…, H, T_k, d_k)
    V = None if V is None else repeat_kv(V, n_rep)  # (…, H, T_k, d_v)
    lead = broadcast_shapes(Q.shape[:-2], K.shape[:-2])  # (…, H)
    output = None if V is None else Q.new_empty((*lead, T_q, V.shape[-1]))
    weights = Q.new_empty((*lead, T_q, T_k), dtype=weights_dtype or Q.dtype)
    all_scores = Q.new_empty((*lead, T_q, T_k)) if with_scores else None
    Q = Q / math.sqrt(Q.shape[-1])  # (…, H, T_q, d_k): scaling the questions costs less than the scores
    # One block's scores live in one buffer, reused in place (fresh blocks cost page faults);
    # not under autograd, which cannot differentiate through out=.
    grad = torch.is_grad_enabled() and any(X is not None and X.requires_grad for X in (Q, K, V))
    scratch = None if grad else Q.new_empty(math.prod(lead) * min(block, T_q) * T_k)
    for i0 in range(0, T_q, block):
        i1 = min(i0 + block, T_q)
        seen = i1 + T_k - T_q if causal and not with_scores else T_k  # keys rows i0..i1-1 may see
        # Q Kᵀ / √d_k for this block
        S = None if grad else scratch[:math.prod(lead) * (i1 - i0) * seen].view(*lead, i1 - i0, seen)
        S = torch.matmul(Q[..., i0:i1, :], K[..., :seen, :].mT, out=S)  # (…, H, b, seen)
        if all_scores is not None:
            all_scores[..., i0:i1, :] = S
        _mask_rows_(S, mask, T_q, T_k, i0, i1)
        W = torch.softmax(S, dim=-1, out=None if grad else S)  # (…, H, b, seen) softmax per row
        if output is not None:
            output[..., i0:i1, :] = W @ V[..., :seen, :]  # (…, H, b, d_v)
        weights[..., i0:i1, :seen] = W
        weights[..., i0:i1, seen:] = 0  # keys these rows cannot see
    return output, weights, all_scores


def weights_of(S: torch.Tensor, mask: Mask = None) -> torch.Tensor:
    """The weights of given scores: softmax per row of S (…, H, T_q, T_k) after the mask hides its
    cells (a mask as in paper()), as paper() turns the scores it computes into weights.

    >>> _ = torch.manual_seed(0)
    >>> Q, K, V = torch.randn(2, 4, 3), torch.randn(2, 4, 3), torch.randn(2, 4, 3)
    >>> torch.allclose(weights_of(scores(Q, K), "causal"), paper(Q, K, V, "causal")[1])
    True
    """
    S = S.clone()
    _mask_rows_(S, mask, S.shape[-2], S.shape[-1], 0, S.shape[-2])
    return torch.softmax(S, dim=-1)


def _mask_rows_(S: torch.Tensor, mask: Mask, T_q: int, T_k: int, i0: int, i1: int) -> None:
    """Set to -inf, in place, the scores S (…, b, seen) of rows i0..i1-1 that the mask hides.
    A causal mask hides only keys after each row's own position: the last b columns at most."""
    if mask is None:
        return
    seen = S.shape[-1]
    if _is_causal(mask):
        first = max(0, i0 + T_k - T_q)  # the first key position any hidden cell can have
        i = torch.arange(i0, i1, device=S.device)[:, None] + (T_k - T_q)  # (b, 1) rows as key positions
        j = torch.arange(first, seen, device=S.device)[None, :]  # (1, seen - first)
        S[..., first:].masked_fill_(j > i, float("-inf"))
        return
    rows = mask if mask.dim() < 2 or mask.shape[-2] == 1 else mask[..., i0:i1, :]
    visible = rows if rows.dim() == 0 or rows.shape[-1] == 1 else rows[..., :seen]
    S.masked_fill_(~visible, float("-inf"))


def columns(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, mask: Mask = None, *, validate: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention in 3Blue1Brown's column notation: columns are tokens, softmax per column.

    Q (…, H, d_k, T_q), K (…, H_kv, d_k, T_k), V (…, H_kv, d_v, T_k), mask broadcasting to
    (…, H, T_k, T_q) or "causal" -> output (…, H, d_v, T_q), weights (…, H, T_k, T_q).
    Column j of the weights says how query j shares its attention over the keys; it sums to 1.
    The same numbers as paper(), every matrix transposed.

    >>> Q = K = torch.eye(2)[None]  # (H=1, d_k=2, T=2)
    >>> V = torch.tensor([[[1.0, 3.0]]])  # (H_kv=1, d_v=1, T_k=2)
    >>> output, weights = columns(Q, K, V, mask="causal")
    >>> output.flatten().tolist(), weights.sum(-2).flatten().tolist()  # doctest: +ELLIPSIS
    ([1.0, 2.339...], [1.0, 1.0])
    """
    if validate:
        check_attention({"Q": Q, "K": K, "V": V}, "columns", mask)
    d_k, T_q, T_k = Q.shape[-2], Q.shape[-1], K.shape[-1]
    n_rep = Q.shape[-3] // K.shape[-3]
    K, V = repeat_kv(K, n_rep), repeat_kv(V, n_rep)  # (…, H, d_k, T_k), (…, H, d_v, T_k)
    # Kᵀ Q / √d_k: column j holds query j's score for every key
    S = K.mT @ Q / math.sqrt(d_k)  # (…, H, T_k, d_k) @ (…, H, d_k, T_q) -> (…, H, T_k, T_q)
    visible = causal_mask(T_q, T_k, Q.device).mT if _is_causal(mask) else mask  # (…, T_k, T_q)
    if visible is not None:
        S = S.masked_fill(~visible, float("-inf"))
    # softmax(Kᵀ Q / √d_k), per column
    weights = torch.softmax(S, dim=-2)  # (…, H, T_k, T_q)
    # V softmax(Kᵀ Q / √d_k)
    output = V @ weights  # (…, H, d_v, T_k) @ (…, H, T_k, T_q) -> (…, H, d_v, T_q)
    return output, weights


def as_drawn(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """softmax(Kᵀ Q / √d_k) V, as the video draws it, with column-notation inputs: always refuses.

    Q (…, H, d_k, T_q), K (…, H_kv, d_k, T_k), V (…, H_kv, d_v, T_k). The weights are T_k×T_q
    and V is d_v×T_k, so the product's inner sizes are T_q and d_v. They differ in general, and
    where they happen to agree the product runs and mixes tokens with features. The correct form is
    V softmax(Kᵀ Q / √d_k): columns().

    >>> as_drawn(torch.ones(1, 2, 3), torch.ones(1, 2, 3), torch.ones(1, 5, 3))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    studygroup.errors.NotationError: as drawn, softmax(Kᵀ Q / √d_k) V multiplies ...
    """
    raise NotationError(_drawn_form_message(Q, K, V))


def _drawn_form_message(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> str:
    """Why softmax(Kᵀ Q / √d_k) V fails for these shapes, with their numbers."""
    T_q, T_k, d_v = _size(Q, -1), _size(K, -1), _size(V, -2)
    product = (
        f"as drawn, softmax(Kᵀ Q / √d_k) V multiplies the T_k×T_q = {T_k}×{T_q} weight matrix by "
        f"the d_v×T_k = {d_v}×{T_k} value matrix V, "
    )
    if T_q == d_v:
        why = (
            f"and the inner sizes T_q={T_q} and d_v={d_v} happen to match: the product would run "
            f"silently and give a wrong answer, a T_k×T_k matrix that mixes tokens with features. "
        )
    else:
        why = f"and the inner sizes T_q={T_q} and d_v={d_v} do not match. "
    fix = "The correct form is V softmax(Kᵀ Q / √d_k), giving d_v×T_q: use columns(Q, K, V)."
    return product + why + fix


def _size(X: object, axis: int) -> int | str:
    """X.shape[axis] of a matrix (or a stack of them), "?" for anything else."""
    return X.shape[axis] if isinstance(X, torch.Tensor) and X.dim() >= 2 else "?"


def tiled(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, mask: Mask = None, tile: int = 128, *, validate: bool = True
) -> torch.Tensor:
    """Paper-notation attention over tiles of keys with an online softmax (FlashAttention).

    Q (…, H, T_q, d_k), K (…, H_kv, T_k, d_k), V (…, H_kv, T_k, d_v), mask as in paper()
    -> output (…, H, T_q, d_v), equal to paper()'s. Never holds more than (…, H, T_q, tile)
    scores: a running max m and running sum l per query rescale what earlier tiles added.
    bfloat16 and float16 inputs are accumulated in float32.

    >>> _ = torch.manual_seed(0)
    >>> Q, K, V = torch.randn(2, 3, 5, 4), torch.randn(2, 1, 7, 4), torch.randn(2, 1, 7, 3)
    >>> torch.allclose(tiled(Q, K, V, "causal", tile=3), paper(Q, K, V, "causal")[0], atol=1e-6)
    True
    """
    if validate:
        check_attention({"Q": Q, "K": K, "V": V}, "paper", mask)
        if isinstance(tile, bool) or not isinstance(tile, int) or tile < 1:
            raise NotationError(f"tile must be a positive int (keys per tile); got {tile!r}")
    dtype, T_q, T_k = Q.dtype, Q.shape[-2], K.shape[-2]
    Q, K, V = (X.to(torch.promote_types(dtype, torch.float32)) for X in (Q, K, V))
    n_rep = Q.shape[-3] // K.shape[-3]
    m = Q.new_full((*Q.shape[:-1], 1), float("-inf"))  # (…, H, T_q, 1) running max score
    l = Q.new_zeros((*Q.shape[:-1], 1))  # (…, H, T_q, 1) running sum of exp(score - m)
    acc = Q.new_zeros((*Q.shape[:-1], V.shape[-1]))  # (…, H, T_q, d_v) running sum of exp(score - m) V
    for start in range(0, T_k, tile):
        stop = min(start + tile, T_k)
        S = scores(Q, K[..., start:stop, :], validate=False)  # (…, H, T_q, t)
        visible = _tile_mask(mask, T_q, T_k, start, stop, Q.device)  # broadcasts to (…, H, T_q, t)
        if visible is not None:
            S = S.masked_fill(~visible, float("-inf"))
        m_new = torch.maximum(m, S.amax(dim=-1, keepdim=True))  # (…, H, T_q, 1)
        m_safe = m_new.masked_fill(m_new == float("-inf"), 0.0)  # a query with no key yet: exp(-inf) = 0
        P = torch.exp(S - m_safe)  # (…, H, T_q, t) unnormalised weights of this tile
        alpha = torch.exp(m - m_safe)  # (…, H, T_q, 1) rescales the earlier tiles to the new max
        l = alpha * l + P.sum(dim=-1, keepdim=True)
        acc = alpha * acc + P @ repeat_kv(V[..., start:stop, :], n_rep)  # (…, H, T_q, t) @ (…, H, t, d_v)
        m = m_new
    # softmax(Q Kᵀ / √d_k) V = (Σ_tiles exp(S - m) V) / (Σ_tiles exp(S - m))
    return (acc / l).to(dtype)  # (…, H, T_q, d_v)


def _tile_mask(mask: Mask, T_q: int, T_k: int, start: int, stop: int, device) -> torch.Tensor | None:
    """Keys start..stop-1 of the mask, (…, T_q, stop - start); causal ones are built per tile."""
    if mask is None:
        return None
    if _is_causal(mask):
        return _causal_block(T_q, T_k, start, stop, device)
    return mask if mask.dim() == 0 or mask.shape[-1] == 1 else mask[..., start:stop]


def fused(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, mask: Mask = None, *, validate: bool = True
) -> torch.Tensor:
    """Paper-notation attention through torch's fused kernel, for when the weights are not needed.

    Q (…, H, T_q, d_k), K (…, H_kv, T_k, d_k), V (…, H_kv, T_k, d_v), mask as in paper()
    -> output (…, H, T_q, d_v), equal to paper()'s.

    >>> _ = torch.manual_seed(0)
    >>> Q, K, V = torch.randn(9, 4, 8), torch.randn(3, 4, 8), torch.randn(3, 4, 8)
    >>> torch.allclose(fused(Q, K, V, "causal"), paper(Q, K, V, "causal")[0], atol=1e-6)
    True
    """
    if validate:
        check_attention({"Q": Q, "K": K, "V": V}, "paper", mask)
    T_q, T_k = Q.shape[-2], K.shape[-2]
    # torch's is_causal aligns the first query with the first key; ours aligns the last with the
    # last, the same only when T_q == T_k. Otherwise pass the mask itself.
    is_causal = _is_causal(mask) and T_q == T_k
    visible = None if is_causal else _visible(mask, T_q, T_k, Q.device)
    # On the CPU, torch's flash kernel reads each key/value head for its group of query heads
    # (enable_gqa: 10-50% faster than copies at T = 5-512 here, the same numbers). On CUDA the
    # memory-efficient kernels refuse enable_gqa and fall back to one that holds every T_q×T_k
    # score: expand the heads there; the copies cost only (…, H, T_k, d).
    n_rep = Q.shape[-3] // K.shape[-3]
    gqa = Q.device.type == "cpu" and n_rep > 1
    if not gqa:
        K, V = repeat_kv(K, n_rep), repeat_kv(V, n_rep)  # (…, H, T_k, d_k), (…, H, T_k, d_v)
    # softmax(Q Kᵀ / √d_k) V
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=visible, is_causal=is_causal,
                                          enable_gqa=gqa)  # (…, H, T_q, d_v)
