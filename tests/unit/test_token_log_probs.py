"""effects.token_log_probs: each row's log p(token) as torch's log-softmax in float64 gives it,
holding one chunk of float64 log-probabilities at a time (as torch's allocator records it)."""
import torch
from conftest import allocation_peak

from studygroup.study import effects


def test_each_rows_log_probability_is_torchs_float64_log_softmax(monkeypatch):
    monkeypatch.setattr(effects, "LOG_PROB_ROWS", 16)
    logits = torch.randn(200, 5000, generator=torch.Generator().manual_seed(0)) * 8  # (B, vocab)
    got = effects.token_log_probs(logits, 7)
    assert got.dtype == torch.float64 and torch.equal(got, torch.log_softmax(logits.double(), dim=-1)[:, 7])


def test_one_chunk_of_float64_log_probabilities_is_held_at_a_time(monkeypatch):
    monkeypatch.setattr(effects, "LOG_PROB_ROWS", 16)
    logits = torch.randn(200, 5000)  # (B, vocab)
    _, peak = allocation_peak(lambda: effects.token_log_probs(logits, 7))
    chunk = 16 * 5000 * 8  # one chunk's float64 logits, and as many log-probabilities
    assert peak <= 2 * chunk + 200 * 8 + 4096  # and the (B,) result; 200 rows at once would be 16 MB
