"""The head's check that both notations give the same result: float32 rounding over many keys is
agreement, a real difference is not."""
import torch

from studygroup.formulas import attention
from studygroup.study.head import _Grids


def grids(q, k, v, cols_weights=None):
    """Both notations' weights and outputs for one head, as head_view compares them."""
    out, w = (t[0] for t in attention.paper(q[None], k[None], v[None]))  # (R, d) outputs, (R, K) weights
    cw = w.T if cols_weights is None else cols_weights
    cols_out = (v.T @ cw)  # (d, R)
    return _Grids(w, w, torch.zeros_like(w, dtype=torch.bool), out, w.argmax(-1), cw, cols_out,
                  float((cw.T - w).abs().max()), float((cols_out.T - out).abs().max()))


def test_float32_rounding_over_8191_keys_agrees_and_another_axis_does_not():
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(4, 64, generator=g), torch.randn(8191, 64, generator=g), torch.randn(8191, 64, generator=g)
    rounded = grids(q, k, v)
    # what the default model's head 24.6 shows at 8,191 members (float32 against float32, two orders)
    rounded.weights_difference, rounded.output_difference = 5.6e-6, 1.8e-5
    assert rounded.check().agree and "the same result" in rounded.check().statement
    scores = attention.scores(q[None], k[None])[0]  # (R, K)
    wrong_axis = torch.softmax(scores, 0).T  # softmax over the questions: not a distribution per question
    assert not grids(q, k, v, wrong_axis).check().agree
