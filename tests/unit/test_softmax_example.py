"""The article's softmax example: the real float64 weights, and a printout that does not round them away."""
import math

import torch

from studygroup.formulas.attention import paper
from studygroup.formulas.softmax_example import softmax_example, weigh


def test_lot_alone_takes_essentially_all_the_weight():
    alone = softmax_example().alone
    assert alone.members == ("I", "have", "a", "lot") and alone.scores == (1.0, 1.0, 1.0, 100.0)
    other = math.exp(-99) / (1 + 3 * math.exp(-99))  # e^1 / (3 e^1 + e^100)
    for member in ("I", "have", "a"):
        assert math.isclose(alone.weight_of(member), other, rel_tol=1e-12)
    assert alone.weight_of("lot") == 1.0  # 1 - 3.03e-43, which float64 cannot hold
    assert 1e-44 < other < 1e-42


def test_the_earlier_question_takes_the_weight_from_lot():
    alone, after = softmax_example().alone, softmax_example().after_question
    assert after.members[:4] == ("Cash", "or", "credit", "card?") and after.scores[:4] == (1000.0,) * 4
    assert [after.weight_of(m) for m in ("Cash", "or", "credit", "card?")] == [0.25] * 4
    assert after.weight_of("lot") == 0.0 < alone.weight_of("lot")  # underflows in float64
    assert math.isclose(after.log_weights[-1], 100 - 1000 - math.log(4), rel_tol=1e-12)
    assert math.isclose(sum(after.weights), 1.0, rel_tol=1e-15)


def test_the_printout_keeps_tiny_weights_and_says_what_float64_rounded():
    text = str(softmax_example())
    assert "I            1  1.01122e-43" in text
    assert "lot        100  1  (exactly 1 - 3.03366e-43" in text
    assert "lot        100  0  (exactly 3.41119e-392: float64 underflows it to 0)" in text
    assert len(text.splitlines()) == 2 + 4 + 1 + 2 + 8  # two header lines a scene, one blank line


def test_the_weights_are_those_of_the_attention_layer():
    """Scores fed through paper() as Q Kᵀ / √d_k with d_k = 1 give the same weights."""
    for scene in (softmax_example().alone, softmax_example().after_question):
        Q = torch.ones(1, 1, 1, dtype=torch.float64)  # (H=1, T_q=1, d_k=1): the query of "lot"
        K = torch.tensor(scene.scores, dtype=torch.float64).reshape(1, -1, 1)  # (H_kv=1, T_k, d_k=1)
        _, weights = paper(Q, K, torch.zeros_like(K))
        assert weights.flatten().tolist() == list(scene.weights)


def test_weigh_is_softmax():
    assert weigh(["a", "b"], [0.0, 0.0], query="a").weights == (0.5, 0.5)
