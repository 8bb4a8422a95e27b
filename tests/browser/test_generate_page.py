"""Generation in the page (chromium): Continue streams generated members, marked as generated; the
slider shows a word's conclusion; silencing a member shows both continuations. The words shown are
the server's Model.generate on the same tiny model."""
from __future__ import annotations

import studygroup
from studygroup.study.continuations import continuations
from studygroup.model.interventions import Interventions


def percent(p: float) -> str:
    """As the page writes a probability: one decimal under 10%, none above."""
    return f"{100 * p:.1f}%" if p < 0.1 else f"{100 * p:.0f}%"


def prob_in(top, i: int, exact: float) -> str:
    """What the page says of word i's probability among a word's candidates `top` [(id, prob,
    logit)]: its percentage (checked against `exact`), or the bound the last candidate gives."""
    listed = {j: p for j, p, _ in top}
    if i not in listed:
        assert exact <= top[-1][1] + 1e-6
        return f"below {percent(top[-1][1])} (not among its {len(top)} most likely)"
    assert abs(listed[i] - exact) < 1e-5
    return percent(listed[i])

from .test_page import assert_no_markup_ran, explain, wait_idle


def test_continue_slider_and_silenced_continuation(page, server_url, markup_model, screenshots):
    page.goto(server_url)
    wait_idle(page)
    explain(page, "I have a lot")
    page.click(".sg-continue")
    chips = page.locator(".sg-gen-chips .sg-genchip")
    chips.nth(3).wait_for(timeout=60_000)
    assert chips.count() == 4
    assert all(t.startswith("GENERATED") or t.lower().startswith("generated") for t in chips.all_inner_texts())
    model = studygroup.load(markup_model.path)
    g = model.generate("I have a lot", 4)
    shown = [c.locator(".sg-tok").inner_text() for c in chips.all()]
    assert shown == [model.tokenizer.readable(i) for i in g.ids]

    page.locator(".sg-gen-slider").fill("2")  # the slider moved to word 2
    word = page.locator(".sg-gen-word")
    assert "Word 2:" in word.inner_text()
    assert word.locator(".sg-gen-cand").count() == len(g.words[1].top)
    assert word.locator(".sg-gen-cand.sg-chosen .sg-tok").inner_text() == model.tokenizer.readable(g.ids[1])

    page.locator(".sg-chip .sg-mute").nth(1).click()  # silence member 1
    page.locator(".sg-gen-both .sg-gen-part").wait_for(timeout=60_000)
    other = model.generate("I have a lot", 4, silence_members=[1])
    silenced = page.locator(".sg-gen-both .sg-gen-silenced .sg-tok").all_inner_texts()
    assert silenced == [model.tokenizer.readable(i) for i in other.ids]
    assert page.locator(".sg-gen-both .sg-gen-whole .sg-tok").count() == 4
    part = next((k for k, (a, b) in enumerate(zip(g.ids, other.ids)) if a != b), None)
    said = page.locator(".sg-gen-part").inner_text()
    assert (f"They part at word {part + 1}" in said) if part is not None else ("the same" in said)
    assert part is not None  # silencing member 1 of this tiny model changes word 3: the cross figures are checked
    if part is not None:  # each word's probability in both groups, the CLI's continuations' numbers
        c = continuations(model, "I have a lot", g, {"n": 4}, Interventions(silenced_members=(1,))).parting
        assert (c.whole_id, c.silenced_id) == (g.ids[part], other.ids[part])
        cross = page.locator(".sg-gen-cross").inner_text()
        for group, word, exact in (("whole", g.words[part], (c.prob_whole_in_whole, c.prob_silenced_in_whole)),
                                   ("silenced", other.words[part], (c.prob_whole_in_silenced, c.prob_silenced_in_silenced))):
            shown = [prob_in(word.top, i, p) for i, p in zip((c.whole_id, c.silenced_id), exact)]
            assert (f"In the {group} group: \u201c{c.whole_token}\u201d {shown[0]}, "
                    f"\u201c{c.silenced_token}\u201d {shown[1]}.") in cross
    page.screenshot(path=str(screenshots / "generate.png"), full_page=True)
    assert_no_markup_ran(page)


def test_continue_sits_under_the_members_and_a_word_heard_in_the_head_now_open(page, server_url, markup_model):
    page.goto(server_url)
    wait_idle(page)
    explain(page, "I have a lot")
    box = lambda sel: page.locator(sel).bounding_box()  # noqa: E731
    assert box(".sg-input")["y"] + box(".sg-input")["height"] <= box(".sg-generate")["y"] < box(".sg-conclusion")["y"]
    page.click(".sg-continue")
    page.locator(".sg-gen-chips .sg-genchip").nth(3).wait_for(timeout=60_000)
    page.locator(".sg-status[data-kind='']").wait_for(state="attached", timeout=60_000)
    page.locator(".sg-gen-slider").fill("3")
    opened = page.locator(".sg-thumb.sg-open")
    was = (int(opened.get_attribute("data-layer")), int(opened.get_attribute("data-head")))
    layer, head = (1, 3) if was != (1, 3) else (0, 2)
    page.click(f".sg-thumb[data-layer='{layer}'][data-head='{head}']")
    word = page.locator(".sg-gen-word")
    page.wait_for_function("s => document.querySelector('.sg-gen-word').textContent.includes(s)",
                           arg=f"in layer {layer} head {head}", timeout=60_000)
    g = studygroup.load(markup_model.path).generate("I have a lot", 4)
    record = g.words[2]  # word 3's: what the question that chose it heard
    heard = word.locator(".sg-gen-heard li").all_inner_texts()
    members = [int(t.split("(member ")[1].split(")")[0].split(",")[0]) for t in heard]
    assert members == record.members[layer, head][:6].tolist()


def test_continue_with_a_head_and_a_member_silenced_shows_the_silenced_run_throughout(page, server_url, markup_model):
    """Silenced first, then Continue: the chips, the slider's candidates and what each word's question
    heard are the silenced group's; the whole group's words are only the comparison below."""
    page.goto(server_url)
    wait_idle(page)
    explain(page, "I have a lot")
    page.click(".sg-thumb[data-layer='1'][data-head='3']")
    page.locator(".sg-thumb.sg-open[data-layer='1'][data-head='3']").wait_for()
    page.click(".sg-silence-head")
    page.locator(".sg-bars[data-silenced='true']").wait_for(timeout=60_000)
    page.locator(".sg-chip .sg-mute").nth(1).click()  # and member 1
    page.wait_for_function("() => JSON.stringify(document.querySelector('.sg-root').studygroup.d.conclusion.silenced_members) === '[1]'",
                           timeout=60_000)
    page.click(".sg-continue")
    page.locator(".sg-gen-both .sg-gen-part").wait_for(timeout=60_000)
    model = studygroup.load(markup_model.path)
    chosen = model.generate("I have a lot", 4, silence_members=[1], silence_heads=[(1, 3)])
    whole = model.generate("I have a lot", 4)
    readable = lambda ids: [model.tokenizer.readable(i) for i in ids]  # noqa: E731
    assert page.locator(".sg-gen-chips .sg-genchip .sg-tok").all_inner_texts() == readable(chosen.ids)
    assert page.locator(".sg-gen-both .sg-gen-silenced .sg-tok").all_inner_texts() == readable(chosen.ids)
    assert page.locator(".sg-gen-both .sg-gen-whole .sg-tok").all_inner_texts() == readable(whole.ids)
    assert chosen.ids != whole.ids  # the check below tells the two runs apart
    for k in range(1, 5):
        page.locator(".sg-gen-slider").fill(str(k))
        word = page.locator(".sg-gen-word")
        record = chosen.words[k - 1]
        cands = word.locator(".sg-gen-cand .sg-tok").all_inner_texts()
        assert cands == readable([i for i, _, _ in record.top]), k
        page.wait_for_function("s => document.querySelector('.sg-gen-word').textContent.includes(s)", arg="in layer 1 head 3", timeout=60_000)
        heard = word.locator(".sg-gen-heard li").all_inner_texts()
        members = [int(t.split("(member ")[1].split(")")[0].split(",")[0]) for t in heard]
        assert members == record.members[1, 3][:6].tolist(), k
    assert "silenced group" in page.locator(".sg-gen-word").inner_text()
    assert_no_markup_ran(page)


def test_continue_under_mean_ablation_shows_the_mean_ablated_generation_and_says_so(page, server_url, markup_model):
    """A head and a member silenced, the ⊘ control set to mean ablation, then Continue: the chips are
    Model.generate's words under that mean ablation (the mean over the text's members, taken before
    the first word; checked against transformers in test_generation_ablation.py), and the word's
    conclusion and the comparison name the ablation and its rule."""
    from studygroup.model.ablation import Ablation

    from .test_page import ABLATE, SILENCE

    page.goto(server_url)
    wait_idle(page)
    explain(page, "I have a lot")
    page.evaluate(SILENCE, {"head": [1, 3]})
    page.evaluate(SILENCE, {"member": 1})
    page.evaluate(ABLATE, {"kind": "mean"})
    page.click(".sg-continue")
    page.locator(".sg-gen-both .sg-gen-part").wait_for(timeout=60_000)
    model = studygroup.load(markup_model.path)
    chosen = model.generate("I have a lot", 4, interventions=Interventions((1,), None, frozenset({(1, 3)}), ablation=Ablation("mean")))
    readable = lambda ids: [model.tokenizer.readable(i) for i in ids]  # noqa: E731
    assert page.locator(".sg-gen-chips .sg-genchip .sg-tok").all_inner_texts() == readable(chosen.ids)
    assert page.locator(".sg-gen-both .sg-gen-silenced .sg-tok").all_inner_texts() == readable(chosen.ids)
    rule = "taken out by mean ablation: the mean over the text's members, taken before the first word"
    assert rule in page.locator(".sg-gen-word").inner_text() and rule in page.locator(".sg-gen-both").inner_text()
    assert_no_markup_ran(page)
