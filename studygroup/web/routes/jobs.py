"""A followed computation's progress (/api/progress) and its cancelling (/api/cancel), by job id."""
from __future__ import annotations

from fastapi import APIRouter

from studygroup.web.bodies import JobBody
from studygroup.web.service import Served

router = APIRouter()


@router.post("/api/progress")
async def job_progress(b: JobBody, s: Served):
    return {"job": b.job, **s.jobs.get(b.job).as_dict()}


@router.post("/api/cancel")
async def cancel(b: JobBody, s: Served):
    w = s.jobs.get(b.job)
    if w.state in ("waiting", "running"):
        w.cancel()
    return {"job": b.job, **w.as_dict()}
