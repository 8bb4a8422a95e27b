"""The Python API at a glance: short reprs that say what a thing is and how to get the rest,
`run["weights", 5]` beside `run["layers.5.weights"]`, and one-line errors for what `run` cannot take."""
import re
from dataclasses import replace

import pytest
import torch

import studygroup
from studygroup.errors import InputError
from studygroup.model.record import Record
from studygroup.study.compare import compare
from studygroup.study.explain import explain
from studygroup.study.head import head_view
from studygroup.study.lesson_sections import lesson_sections
from studygroup.study.model_view import model_view

TEXT = "an ear then the tin"
SHORT = 300  # characters: a repr is read at a glance, never a dump of tensors or lists


@pytest.fixture(scope="module")
def model(tiny_model):
    return studygroup.load(tiny_model.path)


@pytest.fixture(scope="module")
def run(model):
    return model.run(TEXT)


def test_model_repr_says_what_the_model_is(model, tiny_model):
    text = repr(model)
    c = model.config
    for part in (f"{c.n_layers} layers × {c.n_heads} heads ({c.n_kv_heads} kv heads)", f"d_model {c.d_model}",
                 f"d_head {c.d_head}", f"vocab {c.vocab_size}", f"context {c.context_length}", "float32 on cpu",
                 tiny_model.path.name, "llama"):
        assert part in text
    assert len(text) < SHORT


def test_run_repr_says_what_it_holds_and_how_to_read_it(run):
    text = repr(run)
    assert text.startswith(f"<Run of {run.T} tokens [{run.tokens[0]!r}")
    assert "(rows: all)" in text and f"logits {tuple(run.logits.shape)}" in text
    assert "run['weights', 1]" in text and "run.head(" in text  # the tiny model has 2 layers
    assert len(text) < SHORT


def test_run_repr_names_interventions_and_maps_on_demand(model):
    silenced = model.run(TEXT, record="none", silence_members=[1], silence_heads=[(1, 2)])
    assert "nothing recorded" in repr(silenced)
    assert "silenced members [1]" in repr(silenced) and "silenced heads [(1, 2)]" in repr(silenced)
    on_demand = model.run(TEXT, record=Record(steps=("weights",), maps="on_demand"))
    assert "maps on demand" in repr(on_demand) and "run['weights', 1]" in repr(on_demand)


def test_head_repr_is_its_address_and_sizes_not_its_tensors(run, model):
    head = run.head(1, 3)
    assert repr(head).startswith(f"Head(layer=1, head=3, kv_head=1, T={run.T}, d_head={model.config.d_head};")
    assert "tensor(" not in repr(head) and len(repr(head)) < SHORT
    assert head == head and replace(head) is not head  # still a frozen dataclass


def test_weights_by_step_and_layer(run, model):
    assert torch.equal(run["weights", 1], run["layers.1.weights"])
    assert ("weights", 1) in run and ("weights", 9) not in run and ("wieghts", 1) not in run
    on_demand = model.run(TEXT, record=Record(steps=("weights",), maps="on_demand"))
    assert torch.equal(on_demand["weights", 0], on_demand["layers.0.weights"])


@pytest.mark.parametrize("key, message", [
    (("weights", 2), "layer 2 does not exist: the model has 2 layers"),
    (("weights", 1.5), "1.5 is not a layer"),
    (("wieghts", 1), r"give a layer's step and the layer, as run\[\"weights\", 5\]"),
    (("weights",), "give a layer's step and the layer"),
    (("weights", 1, 2), "give a layer's step and the layer"),
])
def test_a_bad_step_and_layer_says_what_to_give(run, key, message):
    with pytest.raises(InputError, match=message):
        run[key]


def test_a_step_not_recorded_is_still_a_key_error(model):
    with pytest.raises(KeyError, match="was not recorded"):
        model.run(TEXT, record=["weights"])["scores", 1]


@pytest.mark.parametrize("given, kind", [(["an ear", "the tin"], "strings"), ([1, "tin"], "strings"),
                                         ([b"an"], "strings"), ([[1, 2], [3]], "lists")])
def test_run_takes_one_text(model, given, kind):
    with pytest.raises(InputError, match=f"takes one text \\(a str\\) or a list of token ids, not a list of {kind}: "
                                         "run each text on its own"):
        model.run(given)


def test_run_refuses_a_number_and_a_table_of_ids(model):
    with pytest.raises(InputError, match="not int"):
        model.run(5)
    with pytest.raises(InputError, match=r"one row, not an array of shape \(2, 2\)"):
        model.run(torch.tensor([[1, 2], [3, 4]]))


def test_a_list_of_ids_is_still_ids(model):
    ids = model.tokenize(TEXT)
    assert model.run(ids).token_ids == ids and model.run(torch.tensor(ids)).token_ids == ids


def one_line(result) -> str:
    text = repr(result)
    assert "\n" not in text and len(text) < SHORT, text
    return text


def test_result_reprs_are_short_summaries_and_their_json_is_unchanged(model, run):
    e = explain(model, TEXT, top=3, measure_heads=2, measure_members=2)
    assert re.fullmatch(rf"<Explanation of “{TEXT}” \(\d+ members\): next word “.+” \(\d+(\.\d)?%\); most decisive "
                        r"head \d+ of layer \d+ \(silenced: log p [+-]\d+\.\d{3}\); \.story, .*\.to_dict\(\)>", one_line(e))
    assert "contributions" not in repr(e) and e == replace(e)  # the dataclass's == stays
    assert set(e.to_dict()) >= {"text", "tokens", "predicted", "heads", "story"}
    c = compare(model, "the tin", TEXT, top=3, measure_heads=2, measure_members=2)
    assert one_line(c).startswith("<Comparison of “the tin” with “an ear then the tin”: “")
    T, d = run.T, model.config.d_head
    v = head_view(model, TEXT, 1, 3)
    assert one_line(v).startswith(f"<HeadView of head 3 of layer 1 (kv head 1) on {T} members, paper notation: "
                                  f"scores and weights {T}×{T}, q k v {T}×{d};")
    assert f"q k v {T}×{d};" in one_line(head_view(model, TEXT, 1, 3, notation="columns"))
    assert one_line(model_view(run)).startswith(f"<ModelView of 2 layers × 4 heads (2 kv heads) on {T} members, rows: all")
    assert one_line(lesson_sections(model, TEXT, 1, 3)).startswith(f"<LessonSections of 8 sections on head 3 of layer 1, "
                                                                  f"“{TEXT}”, question {T - 1};")
