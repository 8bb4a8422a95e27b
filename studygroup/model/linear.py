"""Multiplying activations by a weight matrix, with the kernel that is fastest for the pass's size.

The model stores every matrix W (in, out) of the paper as (out, in) rows (see `studygroup.model.fusing`), and
multiplies x·W with `project`. MKL's sgemm, torch's default, is slow on the few rows of the
short passes explain makes (tens of rows), where oneDNN's matmul is faster on the same weights.
"""
from __future__ import annotations

import torch

#: Up to this many rows (B·T), a multiply by a weight matrix on the CPU, without autograd, goes
#: through oneDNN's matmul instead of MKL's sgemm: measured here (AMD EPYC, AVX2; a layer's four
#: multiplies, medians): 0.67× the time at 1 row, 0.87-0.91× at 10-128, 0.83-0.96× at 160-224,
#: 1.05-1.08× at 256-384 and 1.06× at 2,048. oneDNN has no `out=`, hence not for large passes,
#: whose MLP reuses its buffers.
ONEDNN_MAX_ROWS = 160
_ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def project(x: torch.Tensor, W: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x·W for a weight matrix W (in, out) stored (out, in) rows. (…, in) -> (…, out)

    out: where to write it (the MKL path only; oneDNN's returns a new tensor).

    >>> x, W = torch.randn(3, 4), torch.randn(5, 4).T   # W (4, 5) over (5, 4) rows
    >>> torch.allclose(project(x, W), x @ W, atol=1e-6)
    True
    """
    if onednn_takes(x, W):
        return _linear(x.contiguous(), W.T, None, "none", [], "")
    return torch.matmul(x, W, out=out)


def onednn_takes(x: torch.Tensor, W: torch.Tensor) -> bool:
    """Whether `project(x, W)` goes through oneDNN (and so ignores `out`)."""
    return (_ONEDNN and x.device.type == "cpu" and x.dtype == torch.float32 and W.dtype == torch.float32
            and not torch.is_grad_enabled() and x.numel() <= ONEDNN_MAX_ROWS * x.shape[-1] and W.T.is_contiguous())


def _linear(*args) -> torch.Tensor:
    """oneDNN's linear: (x (…, in), W (out, in), bias, "none", [], "") -> (…, out)."""
    return torch.ops.mkldnn._linear_pointwise(*args)
