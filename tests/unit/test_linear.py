"""Multiplying by a weight matrix (studygroup.model.linear): oneDNN for small passes without autograd, MKL otherwise, the same numbers."""
import pytest
import torch

from studygroup.model import linear


@pytest.mark.parametrize("rows", [1, 7, linear.ONEDNN_MAX_ROWS, linear.ONEDNN_MAX_ROWS + 1, 600])
def test_project_equals_the_plain_product(rows):
    g = torch.Generator().manual_seed(rows)
    x, W = torch.randn(1, rows, 96, generator=g), torch.randn(160, 96, generator=g).T  # W (96, 160) over (160, 96) rows
    with torch.inference_mode():
        y = linear.project(x, W)
    assert y.shape == (1, rows, 160)
    assert torch.allclose(y, (x.double() @ W.double()).float(), rtol=1e-5, atol=1e-4)


def test_project_takes_the_fast_path_only_where_it_is_faster(monkeypatch):
    calls = []
    real = torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(linear, "_linear", lambda *a: calls.append(a[0].shape) or real(*a), raising=False)
    g = torch.Generator().manual_seed(0)
    x, W = torch.randn(4, 32, generator=g), torch.randn(48, 32, generator=g).T
    with torch.inference_mode():
        linear.project(x, W)  # small, no autograd: oneDNN (where this torch has it)
        linear.project(torch.randn(linear.ONEDNN_MAX_ROWS + 1, 32), W)  # large: MKL
        linear.project(x, W.contiguous())  # a matrix not stored (out, in): MKL
    x.requires_grad_(True)
    y = linear.project(x, W)  # autograd: MKL, which can differentiate it
    y.sum().backward()
    assert torch.allclose(x.grad, W.sum(1).expand(4, -1), atol=1e-5)  # float32 sums of 48 terms, in MKL's order
    assert calls == ([torch.Size([4, 32])] if linear._ONEDNN else [])


def test_project_writes_into_out_on_the_plain_path():
    x, W = torch.randn(linear.ONEDNN_MAX_ROWS + 5, 16), torch.randn(8, 16).T
    out = torch.empty(linear.ONEDNN_MAX_ROWS + 5, 8)
    with torch.inference_mode():
        y = linear.project(x, W, out=out)
    assert y.data_ptr() == out.data_ptr() and torch.allclose(out, x @ W, atol=1e-5)


@pytest.mark.parametrize("shape", [(16,), (0, 16), (2, 0, 16), (3, 2, 5, 16)])
def test_project_takes_any_leading_shape(shape):
    x, W = torch.randn(*shape), torch.randn(8, 16).T
    with torch.inference_mode():
        y = linear.project(x, W)
    assert y.shape == (*shape[:-1], 8) and torch.allclose(y, x @ W, atol=1e-5)
