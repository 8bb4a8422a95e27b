"""Long computations through the web API (studygroup/web/jobs.py), on a real server in a thread:
an explain named by a job id shows its progress (it only grows, and ends at done), stops soon
after a cancel or after its client leaves, and lets a short request through while it runs."""
from __future__ import annotations

import threading
import time

import httpx
import pytest

import studygroup
from conftest import write_tiny_gguf

#: Texts explained for every question (up to 512 members): seconds of work on the tiny model.
SHORTER = " ".join(["the tin can"] * 20)
LONG = " ".join(["the can tin"] * 70)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    model = studygroup.load(str(write_tiny_gguf(tmp_path_factory.mktemp("jobs") / "m.gguf", context=600).path))
    yield from served(model)


def served(model):
    """A real server of `model` in a thread on a free loopback port: yields its base URL."""
    import uvicorn

    from studygroup.web.app import create_app
    from studygroup.web.serve import bind, url

    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(model), log_level="warning"))
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
    out, t = in_thread(lambda: post(base, "explain", {"text": SHORTER, "job": "grows"}))
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
    assert out[0].json() == post(base, "explain", {"text": SHORTER}).json()


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


def test_an_explain_whose_client_leaves_stops(base):
    """The client sends the request on a socket of its own, and closes it once the work runs."""
    import json
    import socket
    from urllib.parse import urlsplit

    at = urlsplit(base)
    body = json.dumps({"text": LONG + " can", "job": "left"}).encode()
    sock = socket.create_connection((at.hostname, at.port))
    sock.sendall(b"POST /api/explain HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    until(base, "left", lambda p: p["state"] == "running" and p["steps"] > 3)
    sock.close()
    t0 = time.monotonic()
    p = until(base, "left", lambda p: p["state"] != "running", within=10)
    assert p["state"] == "cancelled", p
    assert time.monotonic() - t0 < 2.0


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
    assert r.status_code == 400 and r.json()["error"] == "no computation has the job id 'nobody' (the server keeps the last 64)"
    assert post(base, "progress", {"job": "no spaces"}).status_code == 422
    assert post(base, "explain", {"text": "the tin", "job": "x" * 65}).status_code == 422
