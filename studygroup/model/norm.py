"""RMSNorm, the norm every family the model reads puts before attention and the MLP."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm: x / sqrt(mean(x²) + eps) · weight, computed in float32. (…, d_model) -> (…, d_model)

    torch's one operation (a sixth of the time of the six it stands for on one row).

    >>> x, w = torch.randn(3, 8), torch.randn(8)
    >>> torch.allclose(rms_norm(x, w, 1e-5), x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w, atol=1e-6)
    True
    """
    return F.rms_norm(x.float(), x.shape[-1:], weight.float(), eps).to(x.dtype)
