"""Unfinished connections cannot starve the server: a deadline for headers, a cap on connections,
and a flood of one error logged once with a count. A real uvicorn server with our protocol, in a
thread of the test, on a loopback port."""
from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time

import pytest
import uvicorn

from studygroup.web import connections


async def hello(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain"), (b"content-length", b"5")]})
    await send({"type": "http.response.body", "body": b"hello"})


@pytest.fixture
def server(monkeypatch):
    """(host, port, the server) with a 0.5 s deadline for headers and a cap of 20 connections."""
    monkeypatch.setattr(connections, "HEADERS_DEADLINE_S", 0.5)
    monkeypatch.setattr(connections, "connection_cap", lambda: 20)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(hello, http=connections.BoundedH11, log_level="warning", lifespan="off")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(srv.serve(sockets=[sock])), daemon=True)
    thread.start()
    while not srv.started:
        time.sleep(0.01)
    yield sock.getsockname(), srv
    srv.should_exit = True
    thread.join(5)


def get(address, timeout=5.0) -> tuple[bytes, float]:
    start = time.perf_counter()
    with socket.create_connection(address, timeout=timeout) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(4096):
            data += chunk
    return data, time.perf_counter() - start


def closed_by_server(s: socket.socket, within: float) -> bool:
    s.settimeout(within)
    try:
        return s.recv(1) == b""
    except (TimeoutError, socket.timeout):
        return False
    except ConnectionResetError:
        return True


def test_a_request_is_answered(server):
    address, _ = server
    assert get(address)[0].endswith(b"hello")


def test_headers_that_never_finish_are_closed_at_the_deadline(server):
    address, _ = server
    s = socket.create_connection(address)
    s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n")  # no blank line: the headers never end
    assert closed_by_server(s, within=3.0)
    s.close()


def test_a_byte_at_a_time_does_not_restart_the_deadline(server):
    address, _ = server
    s = socket.create_connection(address)
    start = time.perf_counter()
    closed = False
    for byte in b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 100:
        try:
            s.sendall(bytes([byte]))
        except OSError:
            closed = True
            break
        if closed_by_server(s, within=0.1):
            closed = True
            break
    assert closed and time.perf_counter() - start < 3.0
    s.close()


def test_idle_connections_past_the_cap_make_room_and_requests_are_answered(server):
    address, srv = server
    idle = []
    for _ in range(60):  # three times the cap, none finishing its headers
        s = socket.create_connection(address)
        s.sendall(b"GET / HTT")
        idle.append(s)
    time.sleep(0.1)
    body, seconds = get(address)
    assert body.endswith(b"hello") and seconds < 2.0
    assert len(srv.server_state.connections) <= 21
    for s in idle:
        s.close()


def test_keep_alive_connections_get_a_deadline_for_their_next_request(server):
    address, _ = server
    s = socket.create_connection(address)
    s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
    s.settimeout(2)
    answer = b""
    while not answer.endswith(b"hello"):
        answer += s.recv(4096)
    s.sendall(b"GET / HTTP/1.1\r\nHost: loc")  # the next request's headers never end
    assert closed_by_server(s, within=3.0)
    s.close()


def test_a_repeated_message_is_said_once_then_counted(monkeypatch):
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger = logging.getLogger("studygroup-test-say-once")
    logger.propagate = False
    logger.addHandler(Keep())
    f = connections.SayOnce(window_s=0.2)
    logger.addFilter(f)
    for _ in range(1000):
        try:
            raise OSError(24, "Too many open files")
        except OSError:
            logger.error("socket.accept() out of system resource", exc_info=True)
    assert records == ["socket.accept() out of system resource"]
    time.sleep(0.25)
    logger.error("socket.accept() out of system resource")
    assert len(records) == 2 and "repeated 1000 times" in records[1]
    logger.error("another message")
    assert records[-1] == "another message"
