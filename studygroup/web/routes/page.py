"""The page, its style and script, the model's facts (/api/info) and the survey's marks (/api/survey)."""
from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import Response
from starlette.exceptions import HTTPException

from studygroup.views import assets
from studygroup.views import payloads
from studygroup.web.bodies import MAX_TOP
from studygroup.web.guard import error_response
from studygroup.web.service import Served

#: What /static/ serves: the style, and the script joined from its files (views/assets.py).
STATIC_FILES = {"page.css": "text/css; charset=utf-8", "page.js": "text/javascript; charset=utf-8"}

router = APIRouter()


def _static(name: str) -> bytes:
    """A file of the page (views/static/), or the joined script for page.js."""
    return (assets.page_script() if name == "page.js" else assets.static_text(name)).encode("utf-8")


@router.head("/", include_in_schema=False)  # HEAD wherever GET works (uvicorn sends no body)
@router.get("/", include_in_schema=False)
async def page():
    return Response(_static("page.html"), media_type="text/html; charset=utf-8")


@router.head("/static/{name}", include_in_schema=False)
@router.get("/static/{name}", include_in_schema=False)
async def static(name: str):
    if name not in STATIC_FILES:
        raise HTTPException(404)
    return Response(_static(name), media_type=STATIC_FILES[name])


@router.head("/api/info", include_in_schema=False)
@router.get("/api/info")
async def info(s: Served):
    limits = {"max_tokens": s.max_tokens, "context_length": s.model.config.context_length, "max_top": MAX_TOP,
              "max_body_bytes": s.limits.max_body, "max_waiting": s.limits.max_waiting}
    return {**payloads.info(s.model, limits), "survey": s.survey is not None}  # whether /api/survey has one


@router.get("/api/survey")
async def survey_marks(s: Served):
    if s.survey is None:
        return error_response(404, "this server shows no survey: start it with `studygroup serve --survey DIR`")
    return await asyncio.to_thread(s.survey_marks)
