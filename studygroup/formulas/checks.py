"""Input checks for `studygroup.formulas.attention`: shape checks plus one isfinite reduction per input.

Every check raises NotationError naming the argument, its shape and what was expected, in the
caller's notation: "paper" (rows are tokens) or "columns" (columns are tokens, 3Blue1Brown).
"""
from __future__ import annotations

import torch

from studygroup.errors import NotationError

# The last three axes of each input, by notation. Leading axes are batch axes and broadcast.
LAYOUTS: dict[str, dict[str, tuple[str, str, str]]] = {
    "paper": {"Q": ("H", "T_q", "d_k"), "K": ("H_kv", "T_k", "d_k"), "V": ("H_kv", "T_k", "d_v")},
    "columns": {"Q": ("H", "d_k", "T_q"), "K": ("H_kv", "d_k", "T_k"), "V": ("H_kv", "d_v", "T_k")},
}
# The weights' last two axes, by notation: paper rows are queries, column-notation columns are.
WEIGHT_AXES = {"paper": ("T_q", "T_k"), "columns": ("T_k", "T_q")}


def _layout(notation: str) -> str:
    """'Q (…, H, T_q, d_k), K (…, H_kv, T_k, d_k), V (…, H_kv, T_k, d_v)' for the notation."""
    return ", ".join(f"{name} (…, {', '.join(axes)})" for name, axes in LAYOUTS[notation].items())


def broadcast_shapes(*shapes) -> tuple[int, ...]:
    """The shape that `shapes` broadcast to; ValueError if they do not (torch.broadcast_shapes
    does the same, but its first call imports torch's symbolic-shape machinery: ~0.9 s).

    >>> broadcast_shapes((2, 1, 3), (4, 1)), broadcast_shapes((), (5,))
    ((2, 4, 3), (5,))
    """
    n = max((len(s) for s in shapes), default=0)
    out = []
    for sizes in zip(*((1,) * (n - len(s)) + tuple(s) for s in shapes)):
        other = {d for d in sizes if d != 1}
        if len(other) > 1:
            raise ValueError(f"shapes {', '.join(str(tuple(s)) for s in shapes)} do not broadcast")
        out.append(other.pop() if other else 1)
    return tuple(out)


def _shape(X: torch.Tensor) -> str:
    return str(tuple(X.shape))


def read_sizes(tensors: dict[str, torch.Tensor], notation: str) -> dict[str, int]:
    """Sizes by name ("H", "T_q", "d_k", ...), checking that the inputs agree on the shared ones."""
    sizes: dict[str, tuple[str, int]] = {}  # symbol -> (the input it was read from, size)
    for name, X in tensors.items():
        axes = LAYOUTS[notation][name]
        if not isinstance(X, torch.Tensor):
            raise NotationError(f"{name} must be a torch.Tensor shaped (…, {', '.join(axes)}); got {type(X).__name__}")
        if X.dim() < 3:
            raise NotationError(
                f"{name} has shape {_shape(X)} with {X.dim()} dims; it needs at least 3: "
                f"({', '.join(axes)}). For a single head add the head axis with {name}.unsqueeze(0)."
            )
        for symbol, size in zip(axes, X.shape[-3:]):
            seen = sizes.setdefault(symbol, (name, size))
            if seen[1] != size:
                raise NotationError(
                    f"{seen[0]} and {name} disagree on {symbol}: {seen[0]} has {symbol}={seen[1]}, "
                    f"{name} {_shape(X)} has {symbol}={size}. In {notation} notation: {_layout(notation)}."
                )
    return {symbol: size for symbol, (_, size) in sizes.items()}


def check_sizes(sizes: dict[str, int], tensors: dict[str, torch.Tensor], notation: str) -> None:
    """No empty axis, and H a multiple of H_kv (grouped-query heads)."""
    for symbol, size in sizes.items():
        if size == 0:
            name = next(n for n in tensors if symbol in LAYOUTS[notation][n])
            raise NotationError(
                f"{name} {_shape(tensors[name])} has {symbol}=0: an empty sequence or head. Attention "
                f"needs at least one head, one token and one feature ({_layout(notation)})."
            )
    if sizes["H"] % sizes["H_kv"]:
        raise NotationError(
            f"Q has H={sizes['H']} query heads, which is not a multiple of the H_kv={sizes['H_kv']} "
            f"key/value heads of K {_shape(tensors['K'])}: each key/value head must serve the same "
            f"number of query heads (query head h uses key/value head h // (H // H_kv))."
        )


def check_values(tensors: dict[str, torch.Tensor]) -> torch.Size:
    """One floating dtype and device for all; finite values; batch axes that broadcast.

    Returns the broadcast batch shape (the axes before the last three).
    """
    first_name, first = next(iter(tensors.items()))
    for name, X in tensors.items():
        if not X.is_floating_point():
            raise NotationError(f"{name} must hold floating-point numbers; got dtype {X.dtype}")
        if (X.dtype, X.device) != (first.dtype, first.device):
            raise NotationError(
                f"{name} is {X.dtype} on {X.device} but {first_name} is {first.dtype} on "
                f"{first.device}; attention needs every input in one dtype on one device"
            )
        if not torch.isfinite(X).all():
            raise NotationError(f"{name} {_shape(X)} contains NaN or inf; attention needs finite inputs")
    try:
        return broadcast_shapes(*(X.shape[:-3] for X in tensors.values()))
    except ValueError:
        batches = ", ".join(f"{name} {tuple(X.shape[:-3])}" for name, X in tensors.items())
        raise NotationError(f"the batch axes (before the last three) do not broadcast: {batches}") from None


def check_causal(T_q: int, T_k: int) -> None:
    """mask="causal" aligns the last query with the last key, so T_q > T_k leaves queries blind."""
    if T_q > T_k:
        raise NotationError(
            f'mask="causal" with T_q={T_q} queries and T_k={T_k} keys hides every key from queries '
            f"0..{T_q - T_k - 1}: the causal mask aligns the last query with the last key, so it "
            f"needs T_q <= T_k"
        )


def check_mask(mask: object, weights_shape: tuple[int, ...], notation: str, device: torch.device) -> None:
    """A bool tensor that broadcasts to the weights' shape and leaves every query a key."""
    axes = f"(…, H, {', '.join(WEIGHT_AXES[notation])})"
    if not isinstance(mask, torch.Tensor):
        raise NotationError(f'mask must be None, "causal" or a bool tensor shaped like the weights {axes}; got {mask!r}')
    if mask.dtype != torch.bool:
        raise NotationError(
            f"mask must be a bool tensor (True where a query may see a key); got dtype {mask.dtype}. "
            f"An additive mask of 0 and -inf converts with mask == 0."
        )
    if mask.device != device:
        raise NotationError(f"mask is on {mask.device} but the inputs are on {device}; move it with mask.to({str(device)!r})")
    try:
        fits = broadcast_shapes(mask.shape, weights_shape) == tuple(weights_shape)
    except ValueError:
        fits = False
    if not fits:
        raise NotationError(
            f"mask has shape {_shape(mask)}, which does not broadcast to the weights' shape "
            f"{axes} = {tuple(weights_shape)} in {notation} notation"
        )
    check_every_query_sees_a_key(mask, notation)


def check_every_query_sees_a_key(mask: torch.Tensor, notation: str) -> None:
    """Raise naming the first query whose keys are all masked: its softmax would divide 0 by 0."""
    mask = mask.reshape((1,) * max(0, 2 - mask.dim()) + tuple(mask.shape))  # at least 2-D
    key_axis = -1 if notation == "paper" else -2
    sees_a_key = mask.any(dim=key_axis)  # (…, T_q)
    if not sees_a_key.all():
        *where, query = (~sees_a_key).nonzero()[0].tolist()
        at = f" (at mask index {tuple(where)} before the query axis)" if where else ""
        raise NotationError(
            f"the mask hides every key from query {query}{at}: each query must see at least one "
            f"key, or its softmax has nothing to share its weight between"
        )


def check_attention(tensors: dict[str, torch.Tensor], notation: str, mask: object = None) -> None:
    """All the checks, in the order a reader would make them. `tensors` holds Q, K and maybe V."""
    sizes = read_sizes(tensors, notation)
    check_sizes(sizes, tensors, notation)
    batch = check_values(tensors)
    if isinstance(mask, str) and mask == "causal":
        check_causal(sizes["T_q"], sizes["T_k"])
    elif mask is not None:
        weights_shape = (*batch, sizes["H"], *(sizes[a] for a in WEIGHT_AXES[notation]))
        check_mask(mask, weights_shape, notation, tensors["Q"].device)
