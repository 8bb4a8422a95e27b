"""Every command on Gemma 3 270M (`--model gemma-3-270m`), checked against numbers recomputed here:
head weights from the recorded q and k in float64 numpy, the sliding window's mask past 512
members, `why`'s parts, roles from the recorded weights, compare against the probabilities
transformers gives (issue 18), the figures as files."""
import json
import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import studygroup
from studygroup.cli import main

TEXT = "Cash or credit card? I have a lot"
WINDOW = 512
LOCAL, GLOBAL = 0, 5  # layer 0 sees the last 512 members, layer 5 every member


@pytest.fixture(scope="module")
def gemma():
    return studygroup.load("gemma-3-270m")


def cli_json(capsys, *argv):
    code = main([*map(str, argv), "--model", "gemma-3-270m", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def numpy_weights(q, k, window=None) -> np.ndarray:
    """softmax(q·kᵀ/√d_head) over the causal (and windowed) keys, float64: q (R, d), k (T, d), the
    R questions being the last R members -> (R, T)."""
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    R, T = len(q), len(k)
    i, j = np.arange(T - R, T)[:, None], np.arange(T)[None, :]
    visible = (j <= i) & ((i - j < window) if window else True)
    scores = np.where(visible, q @ k.T / math.sqrt(q.shape[1]), -np.inf)
    e = np.exp(scores - scores.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


@pytest.mark.parametrize("layer, head", [(LOCAL, 1), (GLOBAL, 3)])
def test_head_weights_sum_to_one_and_equal_numpy_from_the_recorded_q_and_k(capsys, gemma, layer, head):
    v = cli_json(capsys, "head", TEXT, "--layer", layer, "--head", head)
    run = gemma.run(TEXT, record=["q", "k"])
    q, k = run[f"layers.{layer}.q"][head].numpy(), run[f"layers.{layer}.k"][0].numpy()  # one kv head
    w = np.array(v["weights"])  # (T, T)
    assert np.allclose(w.sum(1), 1, atol=1e-5)
    assert np.abs(w - numpy_weights(q, k)).max() < 1e-5
    assert np.allclose(v["q"], q, atol=1e-5) and np.allclose(v["k"], k, atol=1e-5)


def long_text(gemma) -> str:
    """A text of more than 512 members: the long reference prompt."""
    from tests.model.test_gemma_reference import PROMPTS

    text = max(PROMPTS, key=lambda p: len(p["token_ids"]))["text"]
    assert len(gemma.tokenize(text)) > WINDOW + 20
    return text


def test_a_local_layer_masks_members_outside_the_window_and_says_so(capsys, gemma):
    text = long_text(gemma)
    T = len(gemma.tokenize(text))
    run = gemma.run(text, record=studygroup.Record(steps=("q", "k"), rows="last"))
    for layer, window in ((LOCAL, WINDOW), (GLOBAL, None)):
        v = cli_json(capsys, "head", text, "--layer", layer, "--head", 0, "--rows", "-1:")
        w, reasons = np.array(v["weights"][0]), v["mask_reasons"][0]  # the last question: (T,)
        q, k = run[f"layers.{layer}.q"][0].numpy(), run[f"layers.{layer}.k"][0].numpy()
        assert np.abs(w - numpy_weights(q[-1:], k, window)[0]).max() < 1e-5
        outside = [j for j, r in enumerate(reasons) if r == 3]  # 3: outside_window (docs/json.md)
        assert outside == (list(range(T - WINDOW)) if window else [])
        assert (w[outside] == 0).all() and abs(w.sum() - 1) < 1e-5
    code = main(["head", text, "--layer", str(LOCAL), "--head", "0", "--model", "gemma-3-270m"])
    out = capsys.readouterr().out
    assert code == 0 and "masked as outside the window (weight 0)" in out and "DISAGREE" not in out


def test_explain_adds_up_and_says_silencing_a_head_rescales_the_others(capsys, gemma):
    e = cli_json(capsys, "explain", TEXT, "--measure-heads", 2)
    p = e["logit_parts"]
    assert abs(p["total"] - p["logit"]) < 1e-3 * abs(p["logit"]) and e["predicted"]["token"] == "␣of"
    assert abs(p["heads"] - np.sum(e["contributions"])) < 1e-3
    top = e["heads"][0]
    lp = lambda r: float(r.logits[-1].log_softmax(-1)[e["predicted"]["id"]])  # noqa: E731
    alone = lp(gemma.run(TEXT, record="none", silence_heads=[(top["layer"], top["head"])])) - lp(gemma.run(TEXT, record="none"))
    assert abs(top["silence_effect"] - alone) < 1e-4
    assert any("silencing one head also rescales what the other heads of its layer write" in s for s in e["story"])


def test_the_default_model_has_no_such_sentence(capsys):
    code = main(["explain", "I have a lot", "--json", "--measure-heads", "1", "--measure-members", "0"])
    assert code == 0 and not any("rescales" in s for s in json.loads(capsys.readouterr().out)["story"])


def test_compare_gives_the_probabilities_transformers_gives(capsys):
    c = cli_json(capsys, "compare", "I have a lot", TEXT, "--measure-heads", 1, "--measure-members", 2)
    shift = {s["token"]: s for s in c["shift"]}
    # transformers float32 eager on the same file (issue 18): " of" 0.854 -> 0.903, " to" 0.109 -> 0.053
    assert (round(shift["␣of"]["prob_a"], 3), round(shift["␣of"]["prob_b"], 3)) == (0.854, 0.903)
    assert (round(shift["␣to"]["prob_a"], 3), round(shift["␣to"]["prob_b"], 3)) == (0.109, 0.053)
    assert c["word"] == "␣of"


def test_why_parts_add_up_to_the_score_recomputed_from_q_and_k(capsys, gemma):
    layer, head, key = 3, 2, 4
    w = cli_json(capsys, "why", TEXT, "--layer", layer, "--head", head, "--key", key)
    run = gemma.run(TEXT, record=["q", "k"])
    q, k = run[f"layers.{layer}.q"][head].numpy(), run[f"layers.{layer}.k"][0].numpy()
    i = len(q) - 1
    assert w["query"] == i and abs(w["score"] - float(np.dot(q[i], k[key])) / 16) < 1e-4  # √256
    assert abs(w["parts_total"] - w["score"]) <= 1e-5 * max(1, abs(w["score"]))
    assert abs(w["weight"] - numpy_weights(q[i:], k)[0, key]) < 1e-5
    assert abs(w["content"] + w["position"] - w["score"]) < 1e-5


def test_roles_equal_the_recorded_weights(capsys, gemma):
    text = "one two three four five six seven eight one two three four five six seven eight"
    r = cli_json(capsys, "roles", text)
    first, last = r["questions"]
    run = gemma.run(text, record=["weights"])
    assert len(r["heads"]) == 18 * 4
    for h in r["heads"]:
        W = run[f"layers.{h['layer']}.weights"][h["head"]].double().numpy()  # (T, T)
        previous = np.mean([W[i, i - 1] for i in range(first, last + 1)])
        assert abs(h["roles"]["previous"] - previous) < 1e-5, h


def test_lesson_follows_a_decisive_head_not_resting_on_a_sink(capsys, gemma):
    """`lesson` alone: the article's text, the first of explain's heads whose sinks (recomputed here
    from numpy weights) take < half of the last question's weight, its row equal to numpy's."""
    from studygroup.study.explain import explain

    l = cli_json(capsys, "lesson")
    run = gemma.run(TEXT, record=["q", "k"])
    c = gemma.config

    def weights(layer, head):  # (T, T); layer 5 is global, the others see 512 members: all of these 10
        return numpy_weights(run[f"layers.{layer}.q"][head].numpy(),
                             run[f"layers.{layer}.k"][head // (c.n_heads // c.n_kv_heads)].numpy())

    def rests(w):
        heavy = (w[1:] >= 0.3).mean(0) >= 0.8  # >= 0.3 of the weight of >= 80 % of the questions after the first
        return w[-1, heavy].sum() >= 0.5  # the rule: sinks take at least half the weight

    ranked = [(h.layer, h.head) for h in explain(gemma, TEXT).heads]
    expected = next((lh for lh in ranked if not rests(weights(*lh))), ranked[0])
    assert (l["text"], l["layer"], l["head"]) == (TEXT, *expected)
    softmax = next(s for s in l["sections"] if s["name"] == "softmax")
    assert np.abs(np.array(softmax["weights"]) - weights(*expected)[-1]).max() < 1e-5
    assert next(s for s in l["sections"] if s["name"] == "conclusion")["shorter_text"] == "I have a lot"


def test_figures_are_written(capsys, tmp_path):
    png, svg = tmp_path / "e.png", tmp_path / "e.svg"
    code = main(["explain", TEXT, "--model", "gemma-3-270m", "--measure-heads", "1", "--png", str(png), "--svg", str(svg)])
    assert code == 0, capsys.readouterr().err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    words = "".join(t.text or "" for t in ET.parse(svg).iter() if t.tag.endswith("text"))
    assert "of" in words
    code = main(["head", TEXT, "--model", "gemma-3-270m", "--layer", "0", "--head", "0", "--png", str(tmp_path / "h.png")])
    assert code == 0 and (tmp_path / "h.png").read_bytes()[:4] == b"\x89PNG"
