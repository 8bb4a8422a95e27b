"""Figures (studygroup.views.figures): built from synthetic data and from the tiny model's results, saved as
PNG and SVG, and read back: orientation, masks, labels as literal text, glyphs, errors."""
import dataclasses
import struct
import warnings
import xml.etree.ElementTree as ET

import matplotlib
import numpy as np
import pytest

from studygroup.views import figures
from studygroup.views import figures_grid
from studygroup.views import figures_style
from studygroup.study import head as study_head
from studygroup.errors import InputError
from studygroup.views.figures_grid import CELL
from studygroup.study.model_view import model_view
from conftest import TEXT_B

SVG = "{http://www.w3.org/2000/svg}"


def synthetic_head(tokens, seed=0, notation="paper"):
    """A causal head on `tokens`: random scores, softmax per row, masked cells None / 0 (paper)."""
    T = len(tokens)
    rng = np.random.default_rng(seed)
    scores = rng.normal(0, 2, (T, T))
    mask = np.tril(np.ones((T, T), dtype=bool))
    w = np.exp(np.where(mask, scores, -np.inf))
    w /= w.sum(1, keepdims=True)
    S = [[float(s) if m else None for s, m in zip(sr, mr)] for sr, mr in zip(scores, mask)]
    head = {"tokens": tokens, "notation": "paper", "layer": 3, "head": 7, "kv_head": 2,
            "weights": w.tolist(), "scores": S, "mask": mask.tolist()}
    if notation == "columns":
        head.update(notation="columns", weights=w.T.tolist(), mask=mask.T.tolist(),
                    scores=[list(col) for col in zip(*S)])
    return head


def svg_texts(path) -> list[str]:
    """Every text string in an SVG file (it must parse as XML)."""
    root = ET.parse(path).getroot()
    return ["".join(t.itertext()) for t in root.iter(SVG + "text")]


def png_dpi(path) -> float:
    """Dots per inch from the PNG's pHYs chunk (pixels per metre)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    i = data.index(b"pHYs")
    x_per_metre, _, unit = struct.unpack(">IIB", data[i + 4:i + 13])
    assert unit == 1
    return x_per_metre * 0.0254


def grids(fig) -> list:
    """The axes that hold a grid image (colorbars are axes too, without images)."""
    return [ax for ax in fig.axes if ax.images]


def texts(fig) -> list[str]:
    out = [t.get_text() for ax in fig.axes for t in ax.texts]
    out += [ax.get_title(loc) for ax in fig.axes for loc in ("left", "center")]
    out += [lab.get_text() for ax in fig.axes for lab in ax.get_xticklabels() + ax.get_yticklabels()]
    out += [ax.get_xlabel() for ax in fig.axes] + [ax.get_ylabel() for ax in fig.axes]
    return out + [fig.get_suptitle()]


# ---- labels and glyphs -------------------------------------------------------------------------
def test_labels_keep_readable_glyphs_and_substitute_missing_ones():
    assert figures.label("␣have↵⇥") == "␣have↵⇥"
    assert figures.label("a␍") == "a\\r"
    assert figures.label("你🦀") == "<U+4F60><U+1F980>"
    assert figures.label("<script>") == "<script>" and figures.label("$x$") == "$x$"
    assert figures.label("x" * 40) == "x" * 17 + "…"
    known = figures_style._font_chars()
    assert all(ord(c) in known for c in figures.label("␣↵⇥␍你🦀😀é…"))


def test_no_glyph_missing_warnings_when_drawing_any_token():
    tokens = ["␣a", "↵", "⇥x", "␍", "你好", "🦀😀", "<0xE2>", "é"]
    fig = figures.head_figure(synthetic_head(tokens))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig.canvas.draw()
    # the control: unsubstituted, the same character does warn, so the check above can fail
    with figures_style.style(), pytest.warns(UserWarning, match="[Gg]lyph"):
        bare = figures_style.new_figure(2, 1)
        bare.text(0.5, 0.5, "你")
        bare.canvas.draw()


# ---- the head ------------------------------------------------------------------------------------
def test_columns_orientation_draws_the_transpose_of_paper():
    head = synthetic_head(["A", "␣b", "␣c", "↵", "d"])
    paper, columns = figures.head_figure(head, "paper"), figures.head_figure(head, "columns")
    for p_ax, c_ax in zip(grids(paper), grids(columns), strict=True):  # weights, then scores
        P, C = p_ax.images[0].get_array(), c_ax.images[0].get_array()
        assert P.shape == C.shape == (5, 5)
        np.testing.assert_array_equal(np.ma.getmaskarray(C), np.ma.getmaskarray(P).T)
        np.testing.assert_allclose(C.filled(np.nan), P.filled(np.nan).T)
    np.testing.assert_allclose(paper.axes[0].images[0].get_array().sum(1), 1.0)  # rows of weights sum to 1
    np.testing.assert_allclose(columns.axes[0].images[0].get_array().sum(0), 1.0)
    assert "question from" in paper.axes[0].get_ylabel() and "answer from" in paper.axes[0].get_xlabel()
    assert "question from" in columns.axes[0].get_xlabel() and "answer from" in columns.axes[0].get_ylabel()
    assert "each row sums to 1 →" in texts(paper) and "each column sums to 1 ↓" in texts(columns)


def test_data_in_columns_notation_is_read_back_to_paper():
    tokens = ["A", "␣b", "␣c", "d"]
    P, C = figures.paper_grids(synthetic_head(tokens)), figures.paper_grids(synthetic_head(tokens, notation="columns"))
    for a, b in zip(P, C):
        np.testing.assert_array_equal(a, b)


def test_masked_cells_are_hatched_not_white():
    fig = figures.head_figure(synthetic_head(["A", "␣b", "␣c", "d"]))
    assert len(grids(fig)) == 2
    for ax in grids(fig):
        image = ax.images[0]
        masked = np.ma.getmaskarray(image.get_array())
        np.testing.assert_array_equal(masked, np.triu(np.ones((4, 4), dtype=bool), 1))  # the future only
        assert image.cmap.get_bad()[3] == 0  # masked cells transparent ...
        hatched = [p for p in ax.patches if p.get_hatch()]
        assert hatched and hatched[0].get_zorder() < image.get_zorder()  # ... over a hatched patch
    assert any(h.get_hatch() for leg in fig.legends for h in leg.legend_handles)
    no_mask = {"tokens": ["A", "b"], "weights": [[0.5, 0.5], [0.5, 0.5]], "mask": [[True, True], [True, True]]}
    assert not figures.head_figure(no_mask).legends


def test_colour_scales_weights_fixed_scores_centred():
    fig = figures.head_figure(synthetic_head(["A", "␣b", "␣c"]))
    weights, scores = (ax.images[0] for ax in grids(fig))
    assert weights.cmap.name.startswith("viridis") and (weights.norm.vmin, weights.norm.vmax) == (0, 1)
    assert scores.cmap.name.startswith("RdBu_r") and scores.norm.vcenter == 0
    assert scores.norm.vmin == -scores.norm.vmax


def test_figures_and_page_draw_with_the_same_colours():
    """views.colours is the one source: the figures' colormaps, the page script's scales, the hatch."""
    import json

    from studygroup.views import assets, colours

    for cmap, rgb in ((figures_style.WEIGHTS_CMAP, colours.weight_rgb), (figures_style.SCORES_CMAP, lambda t: colours.score_rgb(2 * t - 1, 1))):
        for t in np.linspace(0, 1, 41):
            assert np.abs(np.array(cmap(t)[:3]) * 255 - rgb(t)).max() <= 3, (cmap.name, t)  # (a 256-entry table)
    prefix = assets.page_script().split("\n", 2)[1]
    assert prefix.startswith("window.StudyGroup.colours = ")
    assert json.loads(prefix.removeprefix("window.StudyGroup.colours = ").rstrip(";")) == colours.as_dict()
    fig = figures.head_figure(synthetic_head(["A", "␣b", "␣c"]))
    hatched = [p for ax in grids(fig) for p in ax.patches if p.get_hatch()]
    assert {matplotlib.colors.to_hex(p.get_facecolor()) for p in hatched} == {colours.MASK_FACE}


def test_each_masked_cell_is_hatched_by_its_reason():
    head = {"tokens": ["A", "b", "c"], "weights": [[1, 0, 0], [1, 0, 0], [0.5, 0, 0.5]],
            "mask_reasons": [[0, 1, 1], [0, 2, 1], [0, 2, 0]]}
    fig = figures.head_figure(head)
    ax = grids(fig)[0]
    np.testing.assert_array_equal(np.ma.getmaskarray(ax.images[0].get_array()), np.array(head["mask_reasons"]) != 0)
    future, silenced = figures_style.hatch("future"), figures_style.hatch("silenced")
    assert future != silenced
    assert [p.get_hatch() for p in ax.patches if p.get_hatch()] == [future, silenced, silenced]  # background, then cells
    assert {h.get_hatch() for leg in fig.legends for h in leg.legend_handles} == {future, silenced}


def test_cell_values_only_on_small_grids_and_no_negative_zero():
    small = texts(figures.head_figure(synthetic_head([f"t{i}" for i in range(12)])))
    assert "1.00" in small and not any(t.startswith("-0.0") and not t.strip("-0.") for t in small)
    large = figures.head_figure(synthetic_head([f"t{i}" for i in range(13)]))
    assert not large.axes[0].texts or all("sums to 1" in t.get_text() for t in large.axes[0].texts)


def test_long_texts_show_the_last_question_row():
    tokens = [f"␣w{i}" for i in range(40)]
    head = synthetic_head(tokens)
    fig = figures.head_figure(head)
    W = fig.axes[0].images[0].get_array()
    assert W.shape == (1, 40)
    np.testing.assert_allclose(W, np.array(head["weights"])[-1:])
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["␣w39"]
    assert "the last question of 40 members" in fig.get_suptitle()
    five = figures.head_figure(head, "columns", last_rows=5).axes[0].images[0].get_array()
    assert five.shape == (40, 5)
    np.testing.assert_allclose(five.filled(0), np.array(head["weights"])[-5:].T)


def caption_boxes(fig):
    """{name: window extent} of every caption: titles, axis captions (colour bars' too), the sum notes."""
    fig.canvas.draw()
    texts = {"suptitle": fig._suptitle}
    for k, ax in enumerate(fig.axes):
        texts |= {f"axes {k} title": ax.title, f"axes {k} x caption": ax.xaxis.label, f"axes {k} y caption": ax.yaxis.label}
        texts |= {f"axes {k} note {n}": t for n, t in enumerate(ax.texts) if "sums to 1" in t.get_text()}
    return {name: t.get_window_extent() for name, t in texts.items() if t is not None and t.get_text()}


@pytest.mark.parametrize("notation", ["paper", "columns"])
@pytest.mark.parametrize("tokens", [["I", "␣have", "␣a", "␣lot"], [f"␣w{i}" for i in range(12)],
                                    [f"␣w{i}" for i in range(40)]])
def test_no_caption_runs_into_another(notation, tokens):
    head = synthetic_head(tokens, notation=notation) | {"sinks": [0]}  # a sink: the answers' longest caption
    fig = figures.head_figure(head, notation)
    boxes = caption_boxes(fig)
    assert any("x caption" in name for name in boxes) and any("note" in name for name in boxes)
    names = sorted(boxes)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not boxes[a].overlaps(boxes[b]), f"{a} runs into {b}"
        grids = [ax.get_window_extent() for ax in fig.axes if ax.images and not a.startswith(f"axes {fig.axes.index(ax)} ")]
        assert not any(boxes[a].overlaps(g) for g in grids), f"{a} runs into a grid"


def test_bad_head_data_is_refused():
    with pytest.raises(InputError, match="notation"):
        figures.head_figure(synthetic_head(["A"]), "rows")
    with pytest.raises(InputError, match="2 answers for each question"):
        figures.head_figure({"tokens": ["A", "b"], "weights": [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]]})
    with pytest.raises(InputError, match="rectangular"):
        figures.head_figure({"tokens": ["A", "b"], "weights": [[1.0], [0.5, 0.5]]})
    with pytest.raises(InputError, match="same shape"):
        figures.head_figure({"tokens": ["A", "b"], "weights": [[0.5, 0.5]], "mask": [[True, True], [True, True]]})


def test_head_view_of_the_tiny_model(model):
    paper = study_head.head_view(model, TEXT_B, 1, 3, "paper").to_dict()
    columns = study_head.head_view(model, TEXT_B, 1, 3, "columns").to_dict()
    paper_fig = figures.head_view_figure(paper)
    P = paper_fig.axes[0].images[0].get_array()
    C = figures.head_view_figure(columns).axes[0].images[0].get_array()
    np.testing.assert_allclose(P.filled(0), np.array(paper["weights"]), atol=1e-6)
    np.testing.assert_allclose(C.filled(0), P.filled(0).T, atol=1e-6)
    assert [t.get_text() for t in paper_fig.axes[0].get_yticklabels()] == [figures.label(t) for t in paper["tokens"]]


def rule_sinks(W):
    """The sink rule written out from a (T, T) map: the members taking >= 0.3 of the weight of
    >= 80 % of the questions 1 … T-1."""
    rows = W[1:]
    return sorted({j for j in range(W.shape[1]) if len(rows) and np.mean(rows[:, j] >= 0.3) >= 0.8})


def answer_labels(ax, notation):
    return [t.get_text() for t in (ax.get_xticklabels() if notation == "paper" else ax.get_yticklabels())]


@pytest.mark.parametrize("layer, head, notation", [(0, 1, "paper"), (1, 3, "columns"), (1, 0, "paper")])
def test_the_head_figure_and_text_name_its_attention_sinks(model, layer, head, notation):
    from studygroup.views import text as render
    v = study_head.head_view(model, TEXT_B, layer, head, notation)
    W = model.run(TEXT_B, record="all")["weights", layer][head].double().numpy()  # (T, T)
    assert v.sinks == rule_sinks(W) and v.sink_weight == pytest.approx(W[-1, v.sinks].sum(), abs=1e-6)
    ax = figures.head_view_figure(v.to_dict()).axes[0]
    assert not any("sink" in t for t in answer_labels(ax, notation)) or v.sinks  # the random model's heads have none
    v = dataclasses.replace(v, sinks=[0], sink_weight=float(W[-1, 0]))  # one with a sink, to see it named
    ax = figures.head_view_figure(v.to_dict()).axes[0]
    labels = answer_labels(ax, notation)
    assert labels == [figures.label(t) + (" (attention sink)" if j in v.sinks else "") for j, t in enumerate(v.tokens)]
    axis = " ".join((ax.get_xlabel() if notation == "paper" else ax.get_ylabel()).split())  # wrapped to the grid
    assert "an attention sink takes weight the head does not need" in axis
    out = " ".join(render.head_view(v).split())
    assert "attention sinks of this head: " + figures.label(v.tokens[0]) in out and "does not need" in out
    assert f"gives them {render.percent(v.sink_weight)} of its weight" in out


def test_the_explain_figure_tags_the_sinks_of_the_head_it_shows(analysis):
    e = analysis.explanation.to_dict()
    h = e["heads"][0]
    h["listened"][0]["is_sink"] = True  # the random model's heads have no sink: one marked, to see it tagged
    fig = figures.explain_figure(e)
    ax = next(a for a in fig.axes if a.get_title(loc="left").startswith(f"Layer {h['layer']}, head {h['head']}"))
    shown = sorted(h["listened"][:20], key=lambda x: x["index"])  # ranked by effect_in_head, drawn in reading order
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        figures.label(m["token"]) + (" (attention sink)" if m["is_sink"] else "") for m in shown]
    assert any(m["is_sink"] for m in shown) and "does not need" in ax.get_xlabel()


# ---- bars ----------------------------------------------------------------------------------------
def test_conclusion_bars_in_percent():
    fig = figures.conclusion_figure([{"token": "␣of", "prob": 0.9581}, {"token": "␣on", "prob": 0.0174}])
    ax = fig.axes[0]
    assert [p.get_width() for p in ax.patches] == pytest.approx([95.81, 1.74])
    assert {"96%", "1.7%"} <= set(texts(fig))
    assert [t.get_text() for t in ax.get_yticklabels()] == ["␣of", "␣on"]


def test_compare_bars_before_after_and_signed_shift(comparison):
    comparison = comparison.to_dict()
    shift = [{"token": "␣of", "prob_a": 0.5, "prob_b": 0.9}, {"token": "␣on", "prob_a": 0.04, "prob_b": 0.035}]
    fig = figures.conclusion_figure(None, shift, names=("a", "b"))
    assert [p.get_width() for p in fig.axes[0].patches] == pytest.approx([50, 4, 90, 3.5])
    assert {"+40 pts", "−0.5 pts", "50%", "90%", "4.0%", "3.5%"} <= set(texts(fig))
    fig = figures.compare_figure(comparison)
    assert len(fig.axes[0].patches) == 2 * min(len(comparison["shift"]), figures.SHIFT_SHOWN)
    assert comparison["word"] in fig.get_suptitle()


# ---- layer × head grids --------------------------------------------------------------------------
def test_model_view_places_every_head_and_ranks_the_decisive(model, analysis):
    view = model_view(analysis.run, analysis.explanation).to_dict()
    fig = figures.model_view_figure(view)
    ax = fig.axes[0]
    image = ax.images[0]
    mosaic, (x0, x1, y1, y0) = image.get_array(), image.get_extent()
    rows, cols = mosaic.shape
    T, group = len(view["tokens"]), view["n_heads"] // view["n_kv_heads"]
    for layer in view["heads"]:
        for h in layer:
            for i, j in [(T - 1, 0), (T - 1, T - 1), (T // 2, 1)]:  # cells inside head (l, h)'s thumbnail
                x = figures_grid._x(h["head"], group) + (j + 0.5) * CELL / T
                y = h["layer"] + (i + 0.5) * CELL / T
                r, c = int((y - y0) / (y1 - y0) * rows), int((x - x0) / (x1 - x0) * cols)
                assert mosaic[r, c] == pytest.approx(h["weights"][i][j], abs=1e-6)
    ranked = sorted((h for layer in view["heads"] for h in layer if h["rank"]), key=lambda h: h["rank"])
    boxes = [p for p in ax.patches if not p.get_fill()]
    assert len(boxes) == min(figures_grid.DECISIVE_BOXED, len(ranked))
    assert {"1", "kv head 0", "kv head 1"} <= set(texts(fig))
    assert any(p.get_hatch() for p in ax.patches)  # the future in each full map


def test_explain_figure_from_the_tiny_model(analysis):
    e = analysis.explanation.to_dict()
    fig = figures.explain_figure(e)
    strings = texts(fig)
    assert figures.label(e["predicted"]["token"]) in [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert f"Layer {e['heads'][0]['layer']}, head {e['heads'][0]['head']}" in " ".join(strings)
    grid = next(ax for ax in fig.axes if ax.get_ylabel() == "layer")
    L, H = np.array(e["contributions"]).shape
    assert np.count_nonzero(~np.ma.getmaskarray(grid.images[0].get_array())) == L * H * 40 * 40
    view = model_view(analysis.run, analysis.explanation).to_dict()
    assert figures.explain_figure(e, view).axes  # the thumbnail variant builds too


# ---- files ---------------------------------------------------------------------------------------
def test_png_and_svg_files(analysis, tmp_path):
    e = analysis.explanation.to_dict()
    fig = figures.explain_figure(e)
    png, svg = figures.save(fig, tmp_path / "explain.png"), figures.save(fig, tmp_path / "explain.SVG")
    assert png.stat().st_size > 50_000 and png_dpi(png) >= 150
    strings = svg_texts(svg)  # svg.fonttype "none": labels stay <text>, not glyph outlines
    for token in e["tokens"]:
        assert any(figures.label(token) in s for s in strings), token


def test_user_text_appears_literally_in_svg(tmp_path):
    tokens = ["<script>", "$x$", "{{7*7}}", "a & b", "␣$", "'\""]
    head = synthetic_head(tokens)
    fig = figures.head_figure({**head, "scores": None})  # the weights alone: half the drawing
    path = figures.save(fig, tmp_path / "head.svg")
    strings = svg_texts(path)
    for token in tokens:
        assert token in strings, token
    assert not list(ET.parse(path).getroot().iter(SVG + "script"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        figures.save(fig, tmp_path / "head.png")


def test_save_refuses_bad_paths(tmp_path):
    fig = figures.conclusion_figure([{"token": "a", "prob": 1.0}])
    cases = [(tmp_path / "f.jpg", r"\.png or \.svg"), (tmp_path / "missing" / "f.png", "does not exist"),
             (tmp_path, "must end in"), (tmp_path / "f.png" / "g.svg", "does not exist")]
    (tmp_path / "f.png").write_bytes(b"")
    for path, message in cases:
        with pytest.raises(InputError, match=message) as err:
            figures.save(fig, path)
        assert "\n" not in str(err.value)
    with pytest.raises(InputError, match=r"must end in \.png"):
        figures.check_path(tmp_path / "f.svg", "png")  # --png f.svg
    assert figures.check_path(tmp_path / "F.PNG", "png") == "png"
    folder = tmp_path / "x.png"
    folder.mkdir()
    with pytest.raises(InputError, match="folder"):
        figures.check_path(folder)


def test_figures_leave_matplotlib_settings_alone(tmp_path):
    before = dict(matplotlib.rcParams)
    figures.save(figures.head_figure(synthetic_head(["$a$", "b"])), tmp_path / "h.svg")
    assert dict(matplotlib.rcParams) == before


def test_the_explain_figure_draws_the_residual_stream_layer_by_layer(analysis, model):
    """Its bars are each layer's heads (summed) and MLP along the conclusion's direction, and its line
    ends at the logit the direct parts add up to (embedding + every head + every MLP)."""
    e = analysis.explanation.to_dict()
    ax = next(a for a in figures.explain_figure(e).axes if a.get_title(loc="left").startswith("The residual stream"))
    heads, mlps = ax.containers[0], ax.containers[1]
    np.testing.assert_allclose([b.get_height() for b in heads], np.array(e["contributions"]).sum(1), rtol=1e-6)
    np.testing.assert_allclose([b.get_height() for b in mlps], e["mlp_contributions"], rtol=1e-6)
    line = ax.lines[0].get_ydata()
    parts = e["logit_parts"]
    assert abs(line[-1] - (parts["embed"] + parts["heads"] + parts["mlps"])) < 1e-3
    assert len(e["mlp_contributions"]) == model.config.n_layers
    assert abs(sum(e["mlp_contributions"]) - parts["mlps"]) < 1e-4
