"""Every family read (llama, mistral, gemma3, qwen2, qwen3, phi3, gpt2) through every path: explain
on a short text and past the long-text threshold, silencing members and heads, a head over a window
of its grid, the figures, compare and why; each on a tiny random file of the family, its numbers
against transformers on the same weights, given the silencing as its own attention mask (members)
or as a hook that zeroes a head's output before the output projection (heads).

The independent reference is transformers' eager attention with an additive 4-D mask, which it
takes as it is (Gemma 3: one mask for the global layers and one for the sliding ones); the masks
are built here from the rules: causal, a silenced member unheard (a question left with nothing
hears itself), and a local layer's window of the latest `sliding_window` members.
"""
import math

import matplotlib.image
import pytest
import torch
from transformers import AutoModelForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM

import studygroup
from conftest import write_tiny_gemma3_gguf, write_tiny_gguf
from integration.test_gpt2 import write_gpt2
from integration.test_qwen_mistral import write_tiny
from studygroup.study import explain as study
from studygroup.views.figures import compare_figure, explain_figure, head_view_figure
from studygroup.model.interventions import Interventions

FAMILIES = ("llama", "mistral", "gemma3", "qwen2", "qwen3", "phi3", "gpt2")


def _from_state_dict(cls, config, tiny):
    hf = cls(config)
    missing, unexpected = hf.load_state_dict(tiny.hf_state_dict, strict=False)
    assert not unexpected and all("rotary" in m or m == "lm_head.weight" for m in missing), (missing, unexpected)
    return hf.eval()


def tiny_file(family: str, folder):
    """One tiny random file of `family` in `folder`: (its path, the writer's TinyModel for llama and
    gemma3, whose state dict transformers takes, else None)."""
    path = folder / "tiny.gguf"
    if family in ("llama", "gemma3"):
        tiny = (write_tiny_gguf if family == "llama" else write_tiny_gemma3_gguf)(path)
        return tiny.path, tiny
    if family == "mistral":  # llama.cpp writes Mistral as "llama"; transformers reads it by its name
        return write_tiny_gguf(path, rope_base=1e6, metadata={"general.name": "tiny-random-mistral"}).path, None
    return (write_gpt2(path) if family == "gpt2" else write_tiny(path, family)), None


def _pair(family: str, folder):
    """(our model, transformers' model) from one tiny file of `family`."""
    path, tiny = tiny_file(family, folder)
    if family == "llama":
        return path, _from_state_dict(LlamaForCausalLM, LlamaConfig(**tiny.hf_config, attn_implementation="eager"), tiny)
    if family == "gemma3":
        return path, _from_state_dict(Gemma3ForCausalLM, Gemma3TextConfig(**tiny.hf_config, attn_implementation="eager"), tiny)
    extra = {"qwen3": {"head_dim": 8}, "phi3": {"pad_token_id": 0}}.get(family, {})  # as test_qwen_mistral
    return path, AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32,
                                                      attn_implementation="eager", **extra).eval()


@pytest.fixture(scope="module", params=FAMILIES)
def pair(request, tmp_path_factory):
    path, theirs = _pair(request.param, tmp_path_factory.mktemp(request.param))
    return studygroup.load(path, cache=False), theirs


def ids_of(model, T, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, model.config.vocab_size, (T,), generator=g).tolist()


# ---- the reference: transformers with the silencing as its mask or a hook ----------------------
def visible(T: int, silenced=(), rows=None, window: int | None = None) -> torch.Tensor:
    """(T, T) bool, True where question i hears answer j: causal, the members `silenced` unheard in
    `rows` (None: every row), a question left with nothing hearing itself, within `window`."""
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    mask = j <= i
    if window is not None:
        mask &= i - j < window
    quiet = torch.zeros(T, T, dtype=torch.bool)
    quiet[:, list(silenced)] = True
    if rows is not None:
        quiet[[r for r in range(T) if r not in rows]] = False
    mask &= ~quiet
    return mask | (~mask.any(-1, keepdim=True) & torch.eye(T, dtype=torch.bool))


def additive(mask: torch.Tensor) -> torch.Tensor:
    """(T, T) bool -> (1, 1, T, T) float: 0 where heard, the most negative float where not."""
    return torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)[None, None]


def head_inputs(theirs):
    """Per layer, the module whose input is the heads' outputs side by side, (B, T, n_heads·d_head)."""
    if hasattr(theirs, "transformer"):  # GPT-2
        return [block.attn.c_proj for block in theirs.transformer.h]
    return [layer.self_attn.o_proj for layer in theirs.model.layers]


def reference(ours, theirs, ids, silenced=(), rows=None, zero_heads=(), last_only=False, attentions=False):
    """transformers' output on `ids`: members `silenced` (in `rows`) masked, heads `zero_heads`
    ((layer, head) pairs) zeroed before the output projection (only at the last position if last_only)."""
    c, T = ours.config, len(ids)
    mask = additive(visible(T, silenced, rows))
    if c.sliding_window:  # Gemma 3: the global layers' mask and the local layers'
        mask = {"full_attention": mask, "sliding_attention": additive(visible(T, silenced, rows, c.sliding_window))}
    hooks = []
    for l, module in enumerate(head_inputs(theirs)):
        heads = [h for m, h in zero_heads if m == l]
        if heads:
            def zero(module, args, heads=heads):
                z = args[0].clone()  # (1, T, n_heads·d_head)
                for h in heads:
                    z[:, -1 if last_only else slice(None), h * c.d_head:(h + 1) * c.d_head] = 0
                return (z,)
            hooks.append(module.register_forward_pre_hook(zero))
    try:
        with torch.no_grad():
            return theirs(torch.tensor([ids]), attention_mask=mask, output_attentions=attentions)
    finally:
        for h in hooks:
            h.remove()


def lp(out) -> torch.Tensor:
    """The last position's log-probabilities (vocab,), float64."""
    return torch.log_softmax(out.logits[0, -1].double(), -1)


# ---- the paths --------------------------------------------------------------------------------
def test_the_reference_is_transformers_own_pass_when_nothing_is_silenced(pair):
    ours, theirs = pair
    ids = ids_of(ours, 12)
    with torch.no_grad():
        plain = theirs(torch.tensor([ids])).logits[0]
    assert (reference(ours, theirs, ids).logits[0] - plain).abs().max() < 1e-5  # the masks say what transformers does
    assert (ours.run(ids, record="none", logits="all").logits - plain).abs().max() < 1e-4


def test_explain_short_text_effects_equal_transformers_with_the_silencing(pair):
    ours, theirs = pair
    ids = ids_of(ours, 10, seed=1)
    e = studygroup.explain(ours, ids, measure_heads="all", measure_members="all")
    base = lp(reference(ours, theirs, ids))
    t = int(base.argmax())
    assert e.scope == study.EVERY_QUESTION and e.predicted.id == t
    assert e.predicted.prob == pytest.approx(math.exp(base[t]), abs=1e-5)
    for m in e.members:
        assert m.effect == pytest.approx(float(lp(reference(ours, theirs, ids, [m.index]))[t] - base[t]), abs=1e-4), m.index
    assert len(e.heads) == ours.config.n_layers * ours.config.n_heads
    for h in e.heads[:6]:
        every = lp(reference(ours, theirs, ids, zero_heads=[(h.layer, h.head)]))[t] - base[t]
        last = lp(reference(ours, theirs, ids, zero_heads=[(h.layer, h.head)], last_only=True))[t] - base[t]
        assert (h.silence_effect, h.silence_effect_last_position) == (
            pytest.approx(float(every), abs=1e-4), pytest.approx(float(last), abs=1e-4)), (h.layer, h.head)
    assert abs(e.logit_parts.total - e.logit_parts.logit) < 1e-3


def test_explain_with_members_and_heads_silenced_equals_transformers(pair):
    ours, theirs = pair
    ids = ids_of(ours, 9, seed=2)
    silenced_heads = [(0, 1), (ours.config.n_layers - 1, 2)]
    e = studygroup.explain(ours, ids, interventions=Interventions((2, 6), None, frozenset(silenced_heads)), measure_heads=2,
                           measure_members=3)
    expected = lp(reference(ours, theirs, ids, [2, 6], zero_heads=silenced_heads))
    assert e.predicted.id == int(expected.argmax())
    assert e.predicted.prob == pytest.approx(math.exp(expected.max()), abs=1e-5)


def test_explain_past_the_long_text_threshold_equals_transformers_on_the_last_question(pair, monkeypatch):
    ours, theirs = pair
    monkeypatch.setattr(study, "LONG_T", 12)  # the long-text path (study.last_question) from 13 members
    ids = ids_of(ours, 30, seed=3)
    e = studygroup.explain(ours, ids, measure_heads=4, measure_members=5)
    base = lp(reference(ours, theirs, ids))
    t = int(base.argmax())
    assert e.scope == study.LAST_QUESTIONS and e.predicted.id == t
    last = [len(ids) - 1]
    measured = [m for m in e.members if m.effect_last_question is not None]
    assert len(measured) == 5
    for m in measured:
        expected = lp(reference(ours, theirs, ids, [m.index], rows=last))[t] - base[t]
        assert m.effect_last_question == pytest.approx(float(expected), abs=1e-4), m.index
    for h in e.heads:
        expected = lp(reference(ours, theirs, ids, zero_heads=[(h.layer, h.head)], last_only=True))[t] - base[t]
        assert h.silence_effect_last_position == pytest.approx(float(expected), abs=1e-4), (h.layer, h.head)


@pytest.mark.parametrize("layer", [0, -1])
def test_a_head_over_a_window_of_its_grid_equals_transformers_weights(pair, layer):
    ours, theirs = pair
    layer = layer % ours.config.n_layers
    ids = ids_of(ours, 14, seed=4)
    attentions = reference(ours, theirs, ids, attentions=True).attentions[layer][0]  # (H, T, T)
    for head in range(ours.config.n_heads):
        v = studygroup.head_view(ours, ids, layer, head, rows=slice(6, 11), keys=slice(2, None))
        assert (v.rows_shown, v.keys_shown) == ([6, 11], [2, 14])
        assert (torch.tensor(v.weights) - attentions[head, 6:11, 2:]).abs().max() < 1e-5, head
        columns = studygroup.head_view(ours, ids, layer, head, notation="columns", rows=slice(6, 11), keys=slice(2, None))
        assert (torch.tensor(columns.weights) - torch.tensor(v.weights).T).abs().max() < 1e-6  # the transpose


def test_the_model_view_holds_every_heads_map_as_transformers_weights(pair):
    ours, theirs = pair
    ids = ids_of(ours, 12, seed=9)
    attentions = reference(ours, theirs, ids, attentions=True).attentions  # n_layers × (1, H, T, T)
    view = studygroup.model_view(ours.run(ids))
    assert (view.rows, len(view.heads), len(view.heads[0])) == ("all", ours.config.n_layers, ours.config.n_heads)
    for l, layer in enumerate(view.heads):
        for h, head in enumerate(layer):
            assert (torch.tensor(head.weights) - attentions[l][0, h]).abs().max() < 1e-5, (l, h)


def test_a_member_silenced_from_a_kept_runs_rows_equals_transformers(pair, monkeypatch):
    """The page's run silencing a member, from its kept run without the silencing, computes only
    the rows from that member on (over the kept keys and values of those before it; Gemma 3's
    windows then start inside the kept rows), and its logits and every head's weights are
    transformers' with that member masked."""
    from studygroup.model.model import Model
    from studygroup.study.page_run import page_run

    ours, theirs = pair
    T, j = 14, 9
    ids = ids_of(ours, T, seed=5)
    base = page_run(ours, ids)
    rows, real = [], Model._mlp
    monkeypatch.setattr(Model, "_mlp", lambda self, l, x, *a: rows.append(x.shape[1]) or real(self, l, x, *a))
    quiet = page_run(ours, ids, Interventions((j,)), base=base)
    assert rows == [T - j] * ours.config.n_layers
    out = reference(ours, theirs, ids, [j], attentions=True)
    assert (quiet.last_logits - out.logits[0, -1]).abs().max() < 1e-4
    for l in range(ours.config.n_layers):
        assert (quiet["weights", l] - out.attentions[l][0]).abs().max() < 1e-5, l


def test_the_figures_are_drawn(pair, tmp_path):
    ours, _ = pair
    ids = ids_of(ours, 8, seed=5)
    e = studygroup.explain(ours, ids, measure_heads=2, measure_members=2)
    h = studygroup.head_view(ours, ids, ours.config.n_layers - 1, 0)
    c = studygroup.compare(ours, ids[4:], ids, measure_heads=1, measure_members=1)
    for name, figure in (("e", explain_figure(e.to_dict())), ("h", head_view_figure(h.to_dict())),
                         ("c", compare_figure(c.to_dict()))):
        figure.savefig(tmp_path / f"{name}.png", format="png")
        pixels = matplotlib.image.imread(tmp_path / f"{name}.png")  # (height, width, channels)
        assert pixels.shape[0] > 200 and pixels.shape[1] > 200 and pixels.std() > 0, name
    words = {t.get_text() for ax in explain_figure(e.to_dict()).axes for t in ax.get_yticklabels()}
    assert e.predicted.token in words or any(w.token in words for w in e.top)


def test_compare_probabilities_equal_transformers(pair):
    ours, theirs = pair
    ids = ids_of(ours, 11, seed=6)
    c = studygroup.compare(ours, ids[5:], ids, measure_heads=2, measure_members=2)
    short, long = lp(reference(ours, theirs, ids[5:])), lp(reference(ours, theirs, ids))
    assert c.longer == "b" and c.word_id == int(long.argmax())
    for s in c.shift:
        assert (s.prob_a, s.prob_b) == (pytest.approx(math.exp(short[s.id]), abs=1e-5),
                                        pytest.approx(math.exp(long[s.id]), abs=1e-5)), s.token
    assert c.logit.logit_b - c.logit.logit_a == pytest.approx(
        c.logit.embed + c.logit.heads + c.logit.mlps + c.logit.position + c.logit.biases, abs=1e-3)


@pytest.fixture(params=FAMILIES)
def why_pair(request, tmp_path_factory):
    path, theirs = _pair(request.param, tmp_path_factory.mktemp(request.param + "-why"))
    return studygroup.load(path, cache=False), theirs


def test_why_adds_up_and_its_scores_differ_as_transformers_weights_do(why_pair):
    """Softmax keeps differences: score_ij − score_ij' = log(w_ij / w_ij') for transformers' w."""
    ours, theirs = why_pair
    ids = ids_of(ours, 9, seed=7)
    layer, i = ours.config.n_layers - 1, 8
    weights = reference(ours, theirs, ids, attentions=True).attentions[layer][0]  # (H, T, T)
    for head in range(ours.config.n_heads):
        a, b = studygroup.why(ours, ids, layer, head, i, 3), studygroup.why(ours, ids, layer, head, i, 7)
        for w, j in ((a, 3), (b, 7)):
            assert w.parts_total == pytest.approx(w.score, abs=1e-4) and w.content + w.position == pytest.approx(w.score, abs=1e-6)
            assert w.weight == pytest.approx(float(weights[head, i, j]), abs=1e-5)
        assert a.score - b.score == pytest.approx(float(torch.log(weights[head, i, 3] / weights[head, i, 7])), abs=1e-3)
        # the biases on q and k (Qwen 2, GPT-2) are one more part on each side, so the parts still add up
        assert any(p.query_part == "q/k bias" for p in a.pairs) == (ours.config.architecture in ("qwen2", "gpt2"))
