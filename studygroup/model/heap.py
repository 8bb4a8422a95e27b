"""Freed memory goes back to the system after each pass (glibc keeps it otherwise).

Two glibc settings, measured with the default model on this 2-core machine:
- blocks over MMAP_THRESHOLD are their own mappings, handed back as soon as they are freed; smaller
  ones are reused from the heap. 1 MiB made a 512-token prefill ~17% slower (each activation a
  fresh mapping, paid in page faults) than 8 MiB; glibc's own rising threshold (up to 32 MiB) made
  a 4,096-token pass peak at 1.7 GiB instead of 1.3 GiB. A fixed 32 MiB (glibc's largest) kept
  every activation up to T≈2,700 in the heap: page faults per 2,048-token pass 360k -> 86k, the
  pass 6.1-6.3 s -> 5.6 s, but the 8,191-token explain, whose kept keys and values sit between
  freed activations, peaked at 2,748 MiB instead of ~1,600 (its target is 2 GB): not used.
- malloc_trim after every pass returns the heap's free pages: without it a 4,096-token pass left
  1.5 GiB held instead of 0.8 GiB. Not after a short pass (its residual stream at most
  SMALL_PASS bytes: up to 455 rows for the default model): its few MiB of freed blocks stay for
  the next, as free() leaves up to TRIM_THRESHOLD at the heap's top (glibc's own 128 KiB, once
  the mmap threshold is set, hands back almost every block as it is freed). The page's pass at 43
  members, silencing a member, took 6,900 page faults, then 200; writing the model view's JSON
  after it, 5,800, then 590 (the cost of a fault is high in a virtual machine).
- malloc_trim after every layer of a long pass (its residual stream over MMAP_THRESHOLD, T >= 3,641
  for the default model): there the large activations are mappings of their own, and the blocks
  under the threshold freed by each layer (keys and values, RoPE's temporaries) pile up in the heap
  instead, ~10 MiB a layer. An 8,191-token pass recording the last rows peaked 530 MiB above the
  loaded model without it, 342 MiB with it, in 87.6 and 84.6 CPU s (bench/layer_trim.py). At
  2,048 tokens, where most blocks are in the heap and each trimmed one is faulted in again, it costs
  ~10% more CPU time (2.5-3x the page faults) and a repeated pass peaks as low without it: not done there.
Elsewhere than glibc this module does nothing.
"""
from __future__ import annotations

import functools

MMAP_THRESHOLD = 8 << 20
TRIM_THRESHOLD = 32 << 20
SMALL_PASS = 1 << 20
M_MMAP_THRESHOLD, M_TRIM_THRESHOLD = -3, -1  # mallopt's parameter numbers in glibc


def _open_libc():
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None
    except OSError:
        return None


_LIBC = _open_libc()


def use_own_mappings_for_large_blocks() -> None:
    """Blocks over MMAP_THRESHOLD get a mapping of their own, and free() hands the heap's top back
    past TRIM_THRESHOLD (both set once, at load)."""
    if _LIBC is not None:
        _LIBC.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        _LIBC.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)


def return_freed_memory() -> None:
    """Hand the heap's free pages back to the system (malloc_trim)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def trims_each_layer(resid_bytes: int) -> bool:
    """Whether a pass whose residual stream takes resid_bytes (B·T·d_model elements) hands the
    heap's free pages back after every layer: when that stream is a mapping of its own.

    >>> trims_each_layer(8191 * 576 * 4), trims_each_layer(2048 * 576 * 4)
    (True, False)
    """
    return resid_bytes > MMAP_THRESHOLD


def then_return_freed_memory(resid_bytes):
    """Decorator for a pass: after it, whatever it raised or returned, trim the heap, unless
    resid_bytes(*args) (the bytes of its residual stream) is at most SMALL_PASS."""
    def decorate(forward):
        @functools.wraps(forward)
        def wrapped(*args, **kwargs):
            try:
                return forward(*args, **kwargs)
            finally:
                if resid_bytes(*args) > SMALL_PASS:
                    return_freed_memory()
        return wrapped
    return decorate
