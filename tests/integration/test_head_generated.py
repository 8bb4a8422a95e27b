"""`head --generate N` and head_view(..., generated_from=P) on the tiny random model: the head over the
prompt and the generated words, checked against a plain run on those ids, with the generated members
marked in the JSON, the text and the SVG figure; bad input in one line."""
import html
import json
import re

import numpy as np
import pytest

from integration.test_cli import cli, tiny  # noqa: F401 (tiny: a fixture)
from studygroup.errors import InputError
from studygroup.study.head import head_view
from studygroup.views import colours
from studygroup.views.figures_style import label

PROMPT, N, LAYER, HEAD = "the tin", 5, 1, 2
SAMPLED = ("--temperature", 0.9, "--top-k", 7, "--seed", 3)


@pytest.fixture(scope="module")
def generation(model):
    return model.generate(PROMPT, N, ignore_eos=True)


def _reference_weights(model, ids: list[int]) -> np.ndarray:
    """softmax(q kᵀ/√d_head) causal, in float64, from a plain recorded run on `ids`: (T, T)."""
    vec = model.run(ids).head_vectors(LAYER, HEAD)
    q, k = vec["q"].double().numpy(), vec["k"].double().numpy()  # (T, d_head) each
    s = q @ k.T / np.sqrt(q.shape[1])
    s[np.triu_indices(len(ids), 1)] = -np.inf
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_weights_over_prompt_and_generated_equal_a_run_on_those_ids(model, generation):
    ids = generation.prompt_ids + generation.ids
    v = head_view(model, ids, LAYER, HEAD, generated_from=len(generation.prompt_ids))
    assert len(v.tokens) == len(ids) == len(generation.prompt_ids) + N and v.token_ids == ids
    np.testing.assert_allclose(np.array(v.weights), _reference_weights(model, ids), atol=1e-6)
    recorded = model.run(ids)[f"layers.{LAYER}.weights"][HEAD].numpy()  # (T, T): the pass's own weights
    np.testing.assert_allclose(np.array(v.weights), recorded, atol=1e-6)


def test_json_generated_from_is_the_prompt_length_and_null_for_a_text(capsys, tiny, model):
    code, out, _ = cli(capsys, "head", PROMPT, "--layer", LAYER, "--head", HEAD, "--model", tiny,
                       "--generate", N, *SAMPLED, "--ignore-eos", "--json")
    data = json.loads(out)
    g = model.generate(PROMPT, N, temperature=0.9, top_k=7, seed=3, ignore_eos=True)
    assert code == 0 and data["generated_from"] == len(g.prompt_ids) == len(model.ids(PROMPT))
    assert data["token_ids"] == g.prompt_ids + g.ids
    np.testing.assert_allclose(data["weights"], _reference_weights(model, data["token_ids"]), atol=1e-6)
    code, out, _ = cli(capsys, "head", PROMPT, "--layer", LAYER, "--head", HEAD, "--model", tiny, "--json")
    assert code == 0 and json.loads(out)["generated_from"] is None


def _marked(labels: list[str]) -> list[bool]:
    return [s.endswith(colours.GENERATED_MARK) for s in labels]


def test_text_marks_exactly_the_generated_members(capsys, tiny, model, generation):
    code, out, _ = cli(capsys, "head", PROMPT, "--layer", LAYER, "--head", HEAD, "--model", tiny,
                       "--generate", N, "--ignore-eos", "--full")
    ids = generation.prompt_ids + generation.ids
    tokens, P = model.run(ids).tokens, len(generation.prompt_ids)
    members = out.splitlines()[0].split(": ", 1)[1].split(" | ")
    assert code == 0 and members == [t + colours.generated_mark(i, P) for i, t in enumerate(tokens)]
    assert _marked(members) == [i >= P for i in range(len(ids))] and not any(t.endswith("*") for t in tokens)
    assert f"members {P} to {len(ids) - 1}; the prompt: members 0 to {P - 1}" in out
    detail = re.findall(r"^ +(\d+) (.*?)  \(listens most to", out, flags=re.M)
    assert [(int(i), s.endswith("*")) for i, s in detail] == [(i, i >= P) for i in range(len(ids))]


def test_bounded_text_grids_mark_the_generated_members(capsys, tiny, model, generation):
    """Without --full the grids' margins cut each token to 12 characters; the mark comes after the cut."""
    code, out, _ = cli(capsys, "head", PROMPT, "--layer", LAYER, "--head", HEAD, "--model", tiny,
                       "--generate", N, "--ignore-eos")
    P, T = len(generation.prompt_ids), len(generation.prompt_ids) + N
    weights = _between(out, "weights (each row of weights sums to 1):", "\n\n").splitlines()
    side = [line.split()[0] for line in weights[2:]]  # under the header: each row's question, its label first
    assert code == 0 and len(side) == T and _marked(side) == [i >= P for i in range(T)]


@pytest.mark.parametrize("notation", ["paper", "columns"])
def test_svg_figure_marks_exactly_the_generated_labels(capsys, tmp_path, tiny, model, generation, notation):
    path = tmp_path / "head.svg"
    code, _, _ = cli(capsys, "head", PROMPT, "--layer", LAYER, "--head", HEAD, "--model", tiny,
                     "--generate", N, "--ignore-eos", "--svg", path, "--notation", notation)
    svg, P = path.read_text(), len(generation.prompt_ids)
    tokens = model.run(generation.prompt_ids + generation.ids).tokens
    # svg.fonttype none: each tick label is a <text> element with its own style
    texts = [(style, html.unescape(t)) for style, t in re.findall(r'<text[^>]*style="([^"]*)"[^>]*>([^<]*)</text>', svg)]
    generated = [t for style, t in texts if colours.GENERATED.lower() in style.lower()]
    marked = [t for _, t in texts if t.endswith(colours.GENERATED_MARK)]
    expected = sorted(4 * [label(tokens[i]) + "*" for i in range(P, len(tokens))])  # 2 axes × 2 grids
    assert code == 0 and sorted(generated) == sorted(marked) == expected
    assert colours.GENERATED_LEGEND in svg


@pytest.mark.parametrize("bad", [["--generate", "0"], ["--generate", "-1"], ["--generate", "x"],
                                 ["--generate", "100000"], ["--temperature", "0.5"], ["--generate", "2", "--top-p", "0"]])
def test_bad_input_is_one_line_exit_2(capsys, tiny, bad):
    code, out, err = cli(capsys, "head", PROMPT, "--layer", LAYER, "--head", HEAD, "--model", tiny, *bad)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("studygroup: error:")


@pytest.mark.parametrize("bad", [0, -1, 99, True, 1.5])
def test_head_view_refuses_a_generated_from_outside_the_members(model, bad):
    with pytest.raises(InputError, match="generated_from"):
        head_view(model, "the tin", LAYER, HEAD, generated_from=bad)


K = 3  # explain word K of the N generated: its members are the prompt and the K-1 words before it


def _between(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0]


def test_explain_generated_word_marks_the_generated_members(capsys, tmp_path, tiny, model, generation):
    path = tmp_path / "explain.svg"
    argv = ("explain", PROMPT, "--model", tiny, "--generate", N, "--word", K, "--top", 3)
    code, out, _ = cli(capsys, *argv, "--full", "--svg", path)
    P = len(generation.prompt_ids)
    tokens = model.run(generation.prompt_ids + generation.ids[:K - 1]).tokens
    members = out.splitlines()[0].split(": ", 1)[1].split(" | ")
    assert code == 0 and _marked(members) == [i >= P for i in range(P + K - 1)]
    table = re.findall(r"^ +(\d+) +(\S+) +[-+·0-9]", _between(out, "which members decided it:", "the story:"),
                       flags=re.M)
    assert sorted((int(i), s.endswith("*")) for i, s in table) == [(i, i >= P) for i in range(P + K - 1)]
    svg = path.read_text()
    coloured = [html.unescape(t) for style, t in re.findall(r'<text[^>]*style="([^"]*)"[^>]*>([^<]*)</text>', svg)
                if colours.GENERATED.lower() in style.lower()]
    listened = json.loads(cli(capsys, *argv, "--json")[1])
    shown = {m["index"] for m in listened["heads"][0]["listened"][:20]}
    assert listened["generated_from"] == P and any(i >= P for i in shown)
    assert sorted(coloured) == sorted(label(tokens[i]) + "*" for i in shown if i >= P)


def test_repr_names_the_generated_members(model, generation):
    ids, P = generation.prompt_ids + generation.ids, len(generation.prompt_ids)
    assert f"members {P}: generated" in repr(head_view(model, ids, LAYER, HEAD, generated_from=P))
    assert "generated" not in repr(head_view(model, ids, LAYER, HEAD))


def test_gemma3_local_layer_over_prompt_and_generated_equals_the_run(tiny_gemma3):
    """A sliding-window layer of the tiny Gemma 3 (window 4), over more members than its window: the
    head equals the recorded pass on the same ids, and exactly the cells outside the window are so marked."""
    import studygroup
    from studygroup.study.mask_reasons import REASONS

    gemma = studygroup.load(tiny_gemma3.path, cache=False)
    g = gemma.generate(PROMPT, 6, ignore_eos=True)
    ids, P, layer = g.prompt_ids + g.ids, len(g.prompt_ids), 0
    size = gemma.config.window_of(layer)
    v = head_view(gemma, ids, layer, 1, generated_from=P)
    recorded = gemma.run(ids)[f"layers.{layer}.weights"][1].numpy()  # (T, T)
    np.testing.assert_allclose(np.array(v.weights), recorded, atol=1e-6)
    i, j = np.indices((len(ids), len(ids)))
    outside = (j <= i) & (j <= i - size)  # heard by a global layer, not by this one
    assert size is not None and len(ids) > size and outside.any()
    assert ((np.array(v.mask_reasons) == REASONS.index("outside_window")) == outside).all()
    assert v.generated_from == P and v.to_dict()["generated_from"] == P
