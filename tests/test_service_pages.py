"""The service's pages a person opens: /docs renders Swagger UI from the installed package (no
CDN, so it works offline), and a gate-only server answers /answer with a 404 that says why."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from retrieval_gate.gates.trivial import always_gate
from retrieval_gate.rag.service import create_app


def test_docs_page_loads_every_asset_from_the_server_itself():
    with TestClient(create_app(always_gate())) as client:
        page = client.get("/docs")
        assert page.status_code == 200 and "swagger-ui" in page.text
        urls = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text)
        urls += re.findall(r"""url: ?["']([^"']+)["']""", page.text)
        assert urls and not [u for u in urls if "://" in u or u.startswith("//")], urls
        for url in urls:  # relative to /docs, as a browser resolves them
            asset = client.get("/" + url.lstrip("/"))
            assert asset.status_code == 200 and asset.content, url
        assert client.get("/openapi.json").json()["paths"]
        assert client.get("/redoc").status_code == 404  # its page would need a CDN too


def test_gate_mode_answer_is_404_with_a_reason():
    with TestClient(create_app(always_gate())) as client:
        r = client.post("/answer", json={"questions": ["Who wrote Hamlet?"]})
    assert r.status_code == 404
    assert "--mode gate" in r.json()["detail"] and "/score" in r.json()["detail"]
    assert "/answer" not in create_app(always_gate()).openapi()["paths"]


def _parser(name: str) -> type:
    if name == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        return HttpToolsProtocol
    from uvicorn.protocols.http.h11_impl import H11Protocol

    return H11Protocol


@contextlib.contextmanager
def _serving(protocol: type) -> Iterator[int]:
    """A gate-only server on a real socket with `protocol`, in a thread; yields its port."""
    import uvicorn

    from pg_server import free_port

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(always_gate()), host="127.0.0.1",
                                           port=port, log_level="warning", http=protocol))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(10)


HEALTH = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"


def _wait_closed(sock: socket.socket) -> None:
    """Until the server closes `sock` (reading what it sends meanwhile); 5 s at most."""
    sock.settimeout(5)
    while sock.recv(65536):
        pass


@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_a_client_that_never_finishes_its_request_is_cut_off(monkeypatch, parser):
    """uvicorn times only idle keep-alive connections: a client that connected and sent nothing,
    or half a request head (a first one, or a second on a kept-alive connection), or a head and
    half its body, held its socket for good, and enough of them left the server no files to
    accept real clients with."""
    from retrieval_gate.rag import slow_clients

    monkeypatch.setattr(slow_clients, "HEAD_TIMEOUT", 0.5)
    monkeypatch.setattr(slow_clients, "BODY_TIMEOUT", 0.5)
    with _serving(slow_clients.head_deadline_protocol(_parser(parser))) as port:
        silent, half, kept = (socket.create_connection(("127.0.0.1", port)) for _ in range(3))
        start = time.monotonic()
        half.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # the blank line never comes
        kept.sendall(HEALTH)
        assert b"200 OK" in kept.recv(65536)
        kept.sendall(b"GET /health HTTP/1.1\r\n")  # uvicorn's 5 s keep-alive stops here
        slow = socket.create_connection(("127.0.0.1", port))  # a whole request, slowly
        for part in (b"GET /health HTTP/1.1\r\n", b"Host: x\r\n", b"\r\n"):
            slow.sendall(part)
            time.sleep(0.1)
        assert b"200 OK" in slow.recv(65536)
        for sock in (silent, half, kept):
            _wait_closed(sock)
        assert time.monotonic() - start < 2.5  # each cut off about 0.5 s after it went quiet
        with socket.create_connection(("127.0.0.1", port)) as fresh:  # still serving
            fresh.sendall(HEALTH)
            assert b"200 OK" in fresh.recv(65536)
        body = b'{"questions": ["Who wrote Hamlet?"]}'
        post = (b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body))  # fmt: skip
        with socket.create_connection(("127.0.0.1", port)) as late:  # headers, half the body
            late.sendall(post + body[:10])
            late.settimeout(5)
            reply = late.recv(65536)
            assert reply.startswith(b"HTTP/1.1 408") and b"did not all arrive within 0.5 s" in reply
            _wait_closed(late)
        with socket.create_connection(("127.0.0.1", port)) as slow_body:  # in time, in parts
            slow_body.sendall(post)
            for part in (body[:10], body[10:20], body[20:]):
                time.sleep(0.1)
                slow_body.sendall(part)
            assert b"200 OK" in slow_body.recv(65536)


@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_a_closed_connection_is_freed_at_once_not_at_its_deadline(monkeypatch, parser):
    """The deadline's timer held each closed connection (its protocol and buffers) for 30 s:
    at a thousand short connections a second, thirty thousand of them."""
    import gc
    import weakref

    from retrieval_gate.rag import slow_clients

    monkeypatch.setattr(slow_clients, "HEAD_TIMEOUT", 60.0)
    made: list[weakref.ref] = []

    class Counted(slow_clients.head_deadline_protocol(_parser(parser))):
        def connection_made(self, transport: object) -> None:
            made.append(weakref.ref(self))
            super().connection_made(transport)

    with _serving(Counted) as port:
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(HEALTH.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
                _wait_closed(sock)
        deadline = time.monotonic() + 5  # the server's side of the closes, on a busy machine
        while [r for r in made if r() is not None] and time.monotonic() < deadline:
            time.sleep(0.05)
            gc.collect()
        assert len(made) == 5 and not [r for r in made if r() is not None]


def test_a_client_gone_before_its_body_came_is_no_server_error(caplog):
    """A client that sent a request head and half its body, then closed: an ERROR traceback
    (ClientDisconnect) in the server's log and a 500 in its metrics, each time."""
    head = (b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n")  # fmt: skip
    with _serving(_parser("h11")) as port:
        for part in (b"", b'{"questions": ["Who wr'):
            with socket.create_connection(("127.0.0.1", port)) as gone:
                gone.sendall(head + part)
                time.sleep(0.1)
        time.sleep(0.3)
        with socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            client.settimeout(5)
            metrics = b"".join(iter(lambda: client.recv(65536), b"")).decode()
    assert 'endpoint="/score",status="499"} 2.0' in metrics
    assert 'status="500"' not in metrics and "Exception in ASGI" not in caplog.text
