"""Long computations through the web API (studygroup/web/jobs.py), on a real server in a thread:
an explain, and every view that may make a pass of a long text (the conclusion, the model view,
a head, its overview, the lesson, why), named by a job id, shows its progress (it only grows, and
ends at done), stops within a layer of a cancel or of its client leaving, lets a short request
through while it runs, and shares its pass with a request that needs the same one."""
from __future__ import annotations

import threading
import time

import httpx
import pytest

import studygroup
from studygroup.model.interventions import Interventions
from conftest import write_tiny_gguf

#: Texts explained for every question (up to 512 members): seconds of work on the tiny model.
SHORTER = " ".join(["the tin can"] * 20)
LONG = " ".join(["the can tin"] * 70)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    model = studygroup.load(str(write_tiny_gguf(tmp_path_factory.mktemp("jobs") / "m.gguf", context=600).path))
    yield from served(model)


def served(model, app=None):
    """A real server of `model` (the app given, or one made) in a thread on a free loopback port: yields its base URL."""
    import uvicorn

    from studygroup.web.app import create_app
    from studygroup.web.serve import bind, url

    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app or create_app(model), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    yield url(sock).rstrip("/")
    server.should_exit = True
    thread.join(10)


def post(base, path, body, timeout=300):
    return httpx.post(f"{base}/api/{path}", json=body, timeout=timeout)


def in_thread(fn):
    """fn() started in a thread; the returned list holds its result once it ends."""
    out = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    return out, t


def progress(base, job):
    r = post(base, "progress", {"job": job})
    assert r.status_code == 200, r.text
    return r.json()


def until(base, job, ok, within=120):
    deadline = time.monotonic() + within
    p = None
    while time.monotonic() < deadline:
        r = post(base, "progress", {"job": job})
        p = r.json() if r.status_code == 200 else None  # 400 until the request that names it arrives
        if p is not None and ok(p):
            return p
        time.sleep(0.02)
    raise AssertionError(f"job {job} never got there: {p}")


def test_progress_only_grows_and_ends_at_done(base):
    text = LONG + " tin"  # long enough to be seen running, and not the text other tests find in the cache
    out, t = in_thread(lambda: post(base, "explain", {"text": text, "job": "grows"}))
    seen = [until(base, "grows", lambda p: p["state"] in ("running", "done"))]
    while seen[-1]["state"] == "running":
        seen.append(progress(base, "grows"))
        time.sleep(0.02)
    t.join(120)
    assert out[0].status_code == 200, out[0].text
    assert seen[-1]["state"] == "done"
    steps = [p["steps"] for p in seen]
    assert steps == sorted(steps) and steps[-1] > 10
    assert any(p["state"] == "running" and p["stage"] for p in seen), seen
    assert out[0].json() == post(base, "explain", {"text": text}).json()


def test_a_cancelled_explain_stops_at_once(base):
    out, t = in_thread(lambda: post(base, "explain", {"text": LONG, "job": "stop"}))
    until(base, "stop", lambda p: p["steps"] > 5)
    t0 = time.monotonic()
    assert post(base, "cancel", {"job": "stop"}).json()["job"] == "stop"
    t.join(60)
    stopped = time.monotonic() - t0
    r = out[0]
    assert r.status_code == 409 and "cancelled" in r.json()["error"], r.text
    assert stopped < 2.0, f"the explain took {stopped:.2f} s to stop"
    p = progress(base, "stop")
    assert p["state"] == "cancelled"
    time.sleep(0.3)
    assert progress(base, "stop")["steps"] == p["steps"]  # no layer ran after it stopped


def sent_then_left(base, path, body, job):
    """`body` POSTed to /api/`path` as job `job` on a socket of its own, closed once the work runs:
    the progress then, and the moment the client left."""
    import json
    import socket
    from urllib.parse import urlsplit

    at = urlsplit(base)
    data = json.dumps({**body, "job": job}).encode()
    sock = socket.create_connection((at.hostname, at.port))
    sock.sendall(f"POST /api/{path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n".encode()
                 + b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    before = until(base, job, lambda p: p["state"] == "running" and p["steps"] > 2)
    sock.close()
    return before, time.monotonic()


def stopped_soon(base, job, before, left):
    """The job left by its client at `left` ends cancelled, within the client check and a layer or
    two of the pace it ran at (its own seconds per step: a loaded machine is slower at both), and
    runs no layer after that."""
    from studygroup.web.jobs import CLIENT_CHECK_S

    p = until(base, job, lambda p: p["state"] != "running", within=60)
    took = time.monotonic() - left
    assert p["state"] == "cancelled", p
    per_step = before["elapsed_s"] / before["steps"]
    assert took < max(2.0, 2 * CLIENT_CHECK_S + 4 * per_step), f"{took:.2f} s to stop at {per_step:.3f} s a step"
    time.sleep(max(0.3, 2 * per_step))
    assert progress(base, job)["steps"] == p["steps"]  # no layer ran after it stopped


def test_an_explain_whose_client_leaves_stops(base):
    """The client sends the request on a socket of its own, and closes it once the work runs."""
    before, left = sent_then_left(base, "explain", {"text": LONG + " can"}, "left")
    stopped_soon(base, "left", before, left)


def test_a_short_request_is_answered_while_a_long_one_runs(base):
    out, t = in_thread(lambda: post(base, "explain", {"text": LONG + " the", "job": "long"}))
    until(base, "long", lambda p: p["state"] == "running" and p["steps"] > 3)
    t0 = time.monotonic()
    r = post(base, "conclusion", {"text": "the tin the can"})
    took = time.monotonic() - t0
    assert r.status_code == 200 and r.json()["tokens"]
    assert progress(base, "long")["state"] == "running", "the short request waited for the whole explain"
    assert took < 5.0
    post(base, "cancel", {"job": "long"})
    t.join(60)
    assert out[0].status_code in (200, 409)  # cancelled, or done just before


def test_jobs_refuse_bad_ids_in_one_line(base):
    r = post(base, "progress", {"job": "nobody"})
    assert r.status_code == 400 and r.json()["error"] == ("no computation has the job id 'nobody' (the server keeps every "
                                                          "one that waits or runs, and the last 64 that ended)")
    assert post(base, "progress", {"job": "no spaces"}).status_code == 422
    assert post(base, "explain", {"text": "the tin", "job": "x" * 65}).status_code == 422


@pytest.fixture
def followed(model):
    """A client of an app that follows at most 2 live jobs, and its job table."""
    from fastapi.testclient import TestClient

    from studygroup.web.app import create_app
    from studygroup.web.jobs import Jobs

    app = create_app(model)
    service = app.state.service
    service.jobs = Jobs(service.gate, kept=64, live=2)
    with TestClient(app) as client:
        yield client, service.jobs


def test_a_running_job_outlives_any_number_of_newer_ones(followed):
    """The fault sweep: after 70 newer ids a running explain answered 400 to progress and cancel."""
    client, jobs = followed
    jobs.start("running").state = "running"  # an explain between two of its layers
    for i in range(70):
        assert client.post("/api/conclusion", json={"text": "the tin", "job": f"newer{i}"}).status_code == 200
    assert client.post("/api/progress", json={"job": "running"}).json()["state"] == "running"
    assert client.post("/api/cancel", json={"job": "running"}).status_code == 200
    assert jobs.get("running").cancelled  # it stops at its next layer
    assert client.post("/api/progress", json={"job": "newer5"}).status_code == 400  # ended ones: the last 64


def test_jobs_past_the_live_ones_followed_are_429(followed):
    client, jobs = followed
    first = jobs.start("first")
    jobs.start("second")
    r = client.post("/api/conclusion", json={"text": "the tin", "job": "third"})
    assert r.status_code == 429 and r.headers["retry-after"] == "5"
    assert r.json() == {"error": "2 computations with a job id already wait or run, the most this server follows: "
                                 "try again once one has ended, or cancel one (/api/cancel)"}
    assert client.post("/api/progress", json={"job": "first"}).json()["state"] == "waiting"
    assert client.post("/api/conclusion", json={"text": "the tin"}).status_code == 200  # no job id: not followed
    first.state = "cancelled"
    assert client.post("/api/conclusion", json={"text": "the tin", "job": "third"}).status_code == 200


# ---- the views of a long text: each may make a pass (Service.run) -------------------------------
#: Layers of the model whose passes the views' tests follow: a pass of PASS_TEXT lasts seconds.
VIEW_LAYERS = 24


def pass_text(n: int) -> str:
    """A text of about 3,000 members, a different one for each n (nothing cached from another test)."""
    return " ".join(["the can tin"] * 430 + ["can"] * n)


@pytest.fixture(scope="module")
def views(tmp_path_factory):
    """A server of a model of VIEW_LAYERS layers, wide enough that a pass of pass_text lasts seconds:
    its base URL, its Service, and the passes made (payloads.page_run's texts, in order)."""
    from studygroup.views import payloads
    from studygroup.web.app import create_app

    path = write_tiny_gguf(tmp_path_factory.mktemp("views") / "m.gguf", n_layers=VIEW_LAYERS, n_heads=8, n_kv_heads=2,
                           d_head=32, d_mlp=512, context=4096).path
    app = create_app(studygroup.load(str(path)))
    made, page_run = [], payloads.page_run

    def counted(model, text, *args, **kw):
        made.append(text)
        return page_run(model, text, *args, **kw)

    payloads.page_run = counted
    try:
        for url in served(None, app):
            yield url, app.state.service, made
    finally:
        payloads.page_run = page_run


#: Each endpoint that may make a pass, with a body for a text (a head of the last layer: the longest partial pass).
VIEWS = {
    "conclusion": lambda t: {"text": t},
    "model_view": lambda t: {"text": t, "packed": True},
    "head": lambda t: {"text": t, "layer": VIEW_LAYERS - 1, "head": 0},
    "overview": lambda t: {"text": t, "layer": VIEW_LAYERS - 1, "head": 0},
    "lesson": lambda t: {"text": t, "layer": VIEW_LAYERS - 1, "head": 0},
    "why": lambda t: {"text": t, "layer": VIEW_LAYERS - 1, "head": 0, "query": 650, "key": 3},
}


@pytest.mark.parametrize("n, path", list(enumerate(VIEWS)))
def test_every_view_of_a_long_text_stops_within_a_layer_of_a_cancel(views, n, path):
    base, service, _ = views
    text, job = pass_text(n), f"cancel-{path}"
    out, t = in_thread(lambda: post(base, path, {**VIEWS[path](text), "job": job}))
    until(base, job, lambda p: p["state"] == "running" and p["steps"] > 2)
    at_cancel = post(base, "cancel", {"job": job}).json()
    t.join(60)
    r = out[0]
    assert r.status_code == 409 and "cancelled" in r.json()["error"], r.text
    p = progress(base, job)
    assert p["state"] == "cancelled" and p["steps"] <= at_cancel["steps"] + 1, (at_cancel, p)  # within a layer
    time.sleep(0.3)
    assert progress(base, job)["steps"] == p["steps"]  # no layer ran after it stopped
    assert service.runs.get((text, Interventions())) is None or path not in ("conclusion", "model_view")  # nothing half made


@pytest.mark.parametrize("n, path", list(enumerate(VIEWS)))
def test_every_view_of_a_long_text_stops_when_its_client_leaves(views, n, path):
    base, _, _ = views
    before, left = sent_then_left(base, path, VIEWS[path](pass_text(10 + n)), f"left-{path}")
    stopped_soon(base, f"left-{path}", before, left)


def test_a_lesson_without_a_head_is_followed_and_cancelled(views):
    """Its default head needs the text's explanation: a long computation, followed as explain's is."""
    base, service, _ = views
    text = pass_text(20)
    out, t = in_thread(lambda: post(base, "lesson", {"text": text, "job": "lesson-any"}))
    until(base, "lesson-any", lambda p: p["state"] == "running" and p["steps"] > 2)
    post(base, "cancel", {"job": "lesson-any"})
    t.join(60)
    assert out[0].status_code == 409, out[0].text
    assert service.explanations.get((text, None)) is None


def test_a_cancelled_pass_is_made_again_whole_by_the_next_request(views):
    base, service, made = views
    text = pass_text(30)
    out, t = in_thread(lambda: post(base, "conclusion", {"text": text, "job": "half"}))
    until(base, "half", lambda p: p["state"] == "running" and p["steps"] > 2)
    post(base, "cancel", {"job": "half"})
    t.join(60)
    assert out[0].status_code == 409 and service.runs.get((text, Interventions())) is None
    r = post(base, "conclusion", {"text": text, "job": "whole"})
    assert r.status_code == 200 and len(r.json()["tokens"]) > 2900
    assert made.count(text) == 2 and service.runs.get((text, Interventions())) is not None
    assert progress(base, "whole")["steps"] == VIEW_LAYERS


def test_a_short_request_is_answered_within_a_layer_or_two_of_a_long_view(views):
    base, _, _ = views
    assert post(base, "conclusion", {"text": "the can the tin"}).status_code == 200  # the short pass's first time
    out, t = in_thread(lambda: post(base, "conclusion", {"text": pass_text(40), "job": "long-view"}))
    before = until(base, "long-view", lambda p: p["state"] == "running" and p["steps"] > 2)
    per_step = before["elapsed_s"] / before["steps"]
    t0 = time.monotonic()
    r = post(base, "conclusion", {"text": "the tin the can"})
    took = time.monotonic() - t0
    assert r.status_code == 200 and r.json()["tokens"]
    assert progress(base, "long-view")["state"] == "running", "the short request waited for the whole pass"
    assert took < max(1.0, 3 * per_step), f"{took:.2f} s at {per_step:.3f} s a layer"
    post(base, "cancel", {"job": "long-view"})
    t.join(60)


def test_requests_that_need_the_same_pass_make_it_once(views):
    """The model view and a head asked while the conclusion's pass runs take their turns between its
    layers, find the pass being made, and wait for it instead of making it again."""
    base, _, made = views
    text = pass_text(50)
    first, t = in_thread(lambda: post(base, "conclusion", {"text": text, "job": "shared"}))
    until(base, "shared", lambda p: p["state"] == "running" and p["steps"] > 2)
    others = [in_thread(lambda b=VIEWS[path](text): post(base, path, b)) for path in ("model_view", "head")]
    time.sleep(0.3)
    assert progress(base, "shared")["state"] == "running"  # they came while the pass ran
    for out, thread in [(first, t), *others]:
        thread.join(120)
        assert out[0].status_code == 200, out[0].text
    assert made.count(text) == 1
