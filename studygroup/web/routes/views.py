"""The page's views of a text, each a followed computation answered from the cache where it can be:
the conclusion, the explanation, the comparison, the model view, a head (whole, overview), the
lesson, why, the logit lens and activation patching."""
from __future__ import annotations

from fastapi import APIRouter, Request

from studygroup.errors import InputError
from studygroup.model.interventions import Interventions
from studygroup.views import payloads
from studygroup.web import generation
from studygroup.web.bodies import (CompareBody, ConclusionBody, ExplainBody, HeadBody, LensBody, LessonBody,
                                   ModelViewBody, OverviewBody, PatchBody, PatchTexts, WhyBody)
from studygroup.web.service import Served, Service

router = APIRouter()


@router.post("/api/conclusion")
async def conclusion(b: ConclusionBody, request: Request, s: Served):
    _, i = s.checked(b)
    silencing = bool(i.silenced_members or i.silenced_heads)
    return await s.followed(request, b, b.cache_key(i), lambda: payloads.conclusion(
        s.model, b.text, b.top, i, base=s.run(b.text), after=s.run(b.text, i) if silencing else None))


@router.post("/api/explain")
async def explain(b: ExplainBody, request: Request, s: Served):
    if b.chat or b.system is not None:  # the chat's ids, explained as they are (never the text's own explanation)
        ids, i = s.checked(b, generation.prompt(s, b))
        return await s.followed(request, b, b.cache_key(i), lambda: payloads.explanation(
            s.model, ids, b.top, i, b.measure_heads).to_dict())
    _, i = s.checked(b)
    if i != Interventions() or b.measure_heads is not None:  # not the text's own default explanation: not remembered
        # more heads measured than the default's (the page's complete ranking): the default's heads taken as measured
        known = s.explanations.get((b.text, None)) if i == Interventions() else None
        return await s.followed(request, b, b.cache_key(i), lambda: payloads.explanation(
            s.model, b.text, b.top, i, b.measure_heads, reuse=known).to_dict())
    return await s.followed(request, b, b.cache_key(i), lambda: s.explanation(b.text, b.top).to_dict())


@router.post("/api/compare")
async def compare(b: CompareBody, request: Request, s: Served):
    _, i = s.checked(b)

    def work():
        c = payloads.comparison(s.model, b.text_a, b.text_b, b.top, i)
        if i == Interventions():  # the texts' own explanations
            s.remember(b.text_a, b.top, c.a), s.remember(b.text_b, b.top, c.b)
        return c.to_dict()

    return await s.followed(request, b, b.cache_key(i), work)


@router.post("/api/model_view")
async def model_view(b: ModelViewBody, request: Request, s: Served):
    _, i = s.checked(b)
    e = s.explanations.get((b.text, None))  # its decisive heads rank the view's heads
    return await s.followed(request, b, b.cache_key(i, e is not None), lambda: payloads.model_view_json(
        s.model, b.text, e, i, run=s.run(b.text, i), packed=b.packed))


@router.post("/api/head")
async def head(b: HeadBody, request: Request, s: Served):
    ids, i = s.checked(b)
    s.model.check_head(b.layer, b.head)
    rows, keys = (tuple(x) if isinstance(x, list) else x for x in (b.rows, b.keys))
    # the kept run: its recorded vectors (short texts) or the layer's vectors it keeps (long ones)
    return await s.followed(request, b, b.cache_key(i), lambda: payloads.head(
        s.model, b.text, b.layer, b.head, b.notation, rows, keys, i, run=s.head_run(b.text, len(ids), i), packed=b.packed))


@router.post("/api/overview")
async def overview(b: OverviewBody, request: Request, s: Served):
    ids, i = s.checked(b)
    s.model.check_head(b.layer, b.head)
    rows, keys = (slice(*x) if isinstance(x, list) else None for x in (b.rows, b.keys))
    return await s.followed(request, b, b.cache_key(i), lambda: payloads.overview(
        s.head_run(b.text, len(ids), i), b.layer, b.head, rows, keys, b.side))


@router.post("/api/lesson")
async def lesson(b: LessonBody, request: Request, s: Served):
    _, i = s.checked(b)
    if (b.layer is None) != (b.head is None):
        raise InputError("give both layer and head, or neither (the most decisive head not resting on a sink)")
    if b.layer is not None:
        s.model.check_head(b.layer, b.head)

    def work():  # no head given: explain's order (kept for the page's other views), then the sink rule
        ranked = [] if b.layer is not None else [(e.layer, e.head) for e in s.explanation(b.text, 10).heads]
        return payloads.lesson(s.model, b.text, b.layer, b.head, b.query, b.key, i, ranked)

    return await s.followed(request, b, b.cache_key(i), work)


@router.post("/api/why")
async def why(b: WhyBody, request: Request, s: Served):
    _, i = s.checked(b)
    s.model.check_head(b.layer, b.head)
    return await s.followed(request, b, b.cache_key(i), lambda: payloads.why(
        s.model, b.text, b.layer, b.head, b.query, b.key, i))


@router.post("/api/lens")
async def lens(b: LensBody, request: Request, s: Served):
    rows = payloads.lens_rows(b.rows, s.check_text(b.text))
    if rows is not None and b.all_positions:
        raise InputError("give rows or all_positions, not both: rows are the members shown")
    return await s.followed(request, b, b.cache_key(), lambda: payloads.lens(s.model, b.text, b.top, rows, b.all_positions))


@router.post("/api/patch_cost")
async def patch_cost(b: PatchTexts, s: Served):
    return payloads.patch_cost(s.model, _patch_checked(s, b))


@router.post("/api/patch")
async def patch(b: PatchBody, request: Request, s: Served):
    _patch_checked(s, b)
    return await s.followed(request, b, b.cache_key(), lambda: payloads.patch(
        s.model, b.clean, b.corrupted, b.answer, b.wrong))


def _patch_checked(s: Service, b: PatchTexts) -> int:
    """The members of each of the two texts, checked before any pass (the app's limit, then
    patching's own checks: the same length, metric words of one token)."""
    s.check_text(b.clean, "clean"), s.check_text(b.corrupted, "corrupted")
    return payloads.patch_members(s.model, b.clean, b.corrupted, b.answer, b.wrong)
