"""The recorded names are a public contract: this test pins them."""
import pytest

from studygroup.model import record


def test_layer_step_names_are_pinned():
    assert list(record.LAYER_STEPS) == [
        "resid_pre", "E", "q_pre_rope", "k_pre_rope", "q", "k", "v", "scores", "weights",
        "output", "write", "attn_out", "resid_mid", "mlp_out", "resid_post",
    ]
    assert list(record.RUN_STEPS) == ["embed", "resid_final", "final"]


def test_full_names_for_two_layers():
    names = record.names(2)
    assert names[0] == "embed" and names[-2:] == ["resid_final", "final"]
    assert names[1:16] == [f"layers.0.{s}" for s in record.LAYER_STEPS]
    assert len(names) == 3 + 2 * 15


def test_record_matches_steps_patterns_and_layers():
    r = record.Record(steps=("weights", "layers.1.*"), layers=(1, 2))
    assert r.wants("layers.1.weights") and r.wants("layers.1.v") and r.wants("layers.2.weights")
    assert not r.wants("layers.0.weights") and not r.wants("layers.2.v")
    assert not record.NOTHING.wants("embed")


def test_default_is_bounded_for_long_texts():
    long = record.default_for(8192)
    assert long.rows == "last" and not long.wants("layers.0.q") and long.wants("layers.29.weights")
    assert record.default_for(10).wants("layers.0.q")


def test_resolve_rejects_bad_rows():
    with pytest.raises(ValueError, match="rows"):
        record.Record(rows="first")
