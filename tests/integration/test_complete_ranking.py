"""The page's complete ranking through the web API: where explain's default measured only some
heads, /api/explain with measure_heads "all", run as a job, answers what
studygroup.explain(model, text, measure_heads="all") computes, and its progress only grows and
ends at done."""
from __future__ import annotations

import pytest

import studygroup
from conftest import write_tiny_gguf
from tests.integration.test_jobs import in_thread, post, progress, served, until

#: 8 layers × 8 heads: more heads than explain's default measures on a text past HEADS_ALL_MAX_T.
N_LAYERS, N_HEADS = 8, 8
TEXT = " ".join(["the tin can"] * 20)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = write_tiny_gguf(tmp_path_factory.mktemp("heads") / "m.gguf", n_layers=N_LAYERS, n_heads=N_HEADS,
                           n_kv_heads=2, context=600).path
    return studygroup.load(str(path))


@pytest.fixture(scope="module")
def base(model):
    yield from served(model)


def test_the_default_is_quick_and_the_complete_job_measures_every_head(base, model):
    quick = post(base, "explain", {"text": TEXT}).json()
    assert quick["heads_measured"] < N_LAYERS * N_HEADS, "the text must be one where the default is not complete"
    out, t = in_thread(lambda: post(base, "explain", {"text": TEXT, "measure_heads": "all", "job": "all"}))
    seen = [until(base, "all", lambda p: p["state"] in ("running", "done"))]
    while seen[-1]["state"] == "running":
        seen.append(progress(base, "all"))
    t.join(120)
    assert out[0].status_code == 200, out[0].text
    complete = out[0].json()
    fresh = studygroup.explain(model, TEXT, measure_heads="all").to_dict()
    assert_same_explanation(complete, fresh)
    reused = {(h["layer"], h["head"]): h["silence_effect"] for h in quick["heads"] if h["silence_effect"] is not None}
    assert all(h["silence_effect"] == reused[h["layer"], h["head"]] for h in complete["heads"] if (h["layer"], h["head"]) in reused)
    assert complete["heads_measured"] == N_LAYERS * N_HEADS == len(complete["heads"])
    assert complete["heads_silenced"] == f"all {N_LAYERS * N_HEADS}, each silenced at every position"
    assert seen[-1]["state"] == "done"
    steps = [p["steps"] for p in seen]
    assert steps == sorted(steps)
    stage = f"silencing {N_LAYERS * N_HEADS} heads ({len(reused)} measured already), layer by layer"
    heads_stage = [p for p in seen if p["stage"] == stage]
    assert heads_stage, [p["stage"] for p in seen]  # the stage the page shows as a percentage
    done = [p["done"] for p in heads_stage]
    assert done == sorted(done) and all(0 <= p["done"] <= p["total"] for p in heads_stage)


def assert_same_explanation(got: dict, want: dict) -> None:
    """got and want alike, each head's measures (by layer and head) within 1e-5 of want's: the heads
    the default measured are taken from it, measured in other batches than want's (the last bits of
    a float32 pass differ, and a log p of logits near 30 moves by a few 1e-6 with them), so their
    order may differ where two are that close, and the words with them."""
    heads = lambda e: {(h["layer"], h["head"]): h for h in e["heads"]}  # noqa: E731
    assert heads(got).keys() == heads(want).keys()
    for key, h in heads(got).items():
        for name, value in h.items():
            assert value == (pytest.approx(heads(want)[key][name], abs=1e-5) if name in ("silence_effect", "prob_silenced")
                             else heads(want)[key][name]), (key, name)
    words = {"heads", "story", "story_parts", "heads_silenced", "first_head"}
    assert {k: v for k, v in got.items() if k not in words} == {k: v for k, v in want.items() if k not in words}
    assert len(got["story"]) == len(want["story"]) and got["heads_silenced"][:40] == want["heads_silenced"][:40]


def test_measure_heads_is_checked_in_one_line(base):
    r = post(base, "explain", {"text": TEXT, "measure_heads": "some"})
    assert r.status_code == 422 and "measure_heads" in r.json()["error"]
    assert post(base, "explain", {"text": TEXT, "measure_heads": -1}).status_code == 422
    few = post(base, "explain", {"text": TEXT, "measure_heads": 3}).json()
    assert few["heads_measured"] == 3
