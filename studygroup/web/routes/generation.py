"""The group keeps talking: /api/generate's words streamed, from the generations kept to go on from
(studygroup.web.generation)."""
from __future__ import annotations

from fastapi import APIRouter

from studygroup.errors import InputError
from studygroup.views import payloads
from studygroup.web import generation
from studygroup.web.bodies import GenerateBody
from studygroup.web.service import Served, deprecation

router = APIRouter()


@router.post("/api/generate")
async def generate(b: GenerateBody, s: Served):
    ids, i = s.checked(b, generation.prompt(s, b))
    T = len(ids)
    if (b.layer is None) != (b.head is None):
        raise InputError("give both layer and head (what each word's question heard there), or neither")
    head = None if b.layer is None else s.model.check_head(b.layer, b.head)
    kw = generation.settings(b, i)
    if T + len(b.words) + b.n > s.max_tokens:
        raise InputError(f"the text ({T} tokens), the {len(b.words)} words so far and {b.n} more exceed "
                         f"the {s.max_tokens} members this app takes")
    payloads.checked_ids(s.model, ids + list(b.words))  # the words are ids of the vocabulary
    return deprecation(b, await generation.stream(s, b, ids, b.continuation_key(ids, kw["sampling"], i), kw, head))
