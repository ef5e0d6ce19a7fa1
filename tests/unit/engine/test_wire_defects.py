"""Issue 33: wire defects, each reproduced against a loopback server that scripts every byte."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from sse_fakes import SSE_HEAD, normal_events, serve

from bakeoff.core.common.errors import EngineStartupError
from bakeoff.core.config.schema import Arm
from bakeoff.core.engine import client
from bakeoff.core.engine.attach import probe_attached
from bakeoff.core.engine.client import bounded_get, stream_chat

BODY = {"model": "m", "messages": [], "max_tokens": 16, "stream": True}


def _header_trickle() -> Iterator[bytes | float]:
    """The status line, then one header byte every 0.2 s, for a minute (STR-30/38/41)."""
    yield b"HTTP/1.1 200 OK\r\n"
    for _ in range(300):
        yield b"X"
        yield 0.2


def _within(limit_s: float, fn: object) -> tuple[object, float]:
    """Call ``fn`` in a thread; fail the test (instead of hanging it) if it has not returned in ``limit_s``."""
    out: list[object] = []
    t0 = time.monotonic()
    thread = threading.Thread(target=lambda: out.append(_catch(fn)), daemon=True)
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), f"still waiting after {limit_s} s: the deadline does not cover the headers"
    return out[0], time.monotonic() - t0


def _catch(fn: object) -> object:
    try:
        return fn()  # type: ignore[operator]
    except Exception as exc:
        return exc


def test_bounded_get_deadline_covers_trickled_headers() -> None:
    with serve(_header_trickle) as url, httpx.Client(base_url=url) as http:
        result, _ = _within(20, lambda: bounded_get(http, "/props", timeout_s=1.0))
    assert isinstance(result, httpx.ReadTimeout)


def test_attach_probe_deadline_covers_trickled_headers() -> None:
    arm = Arm(name="a", engine="openai", url="http://127.0.0.1:1")
    with serve(_header_trickle) as url, httpx.Client(base_url=url) as http:
        result, _ = _within(20, lambda: probe_attached(arm, http, deadline_s=1.0))
    assert isinstance(result, EngineStartupError) and "within 1 s" in str(result)


def test_setup_get_after_a_healthy_one_is_still_bounded() -> None:
    """/v1/models answers, then /props trickles its headers on the same client (STR-41)."""
    calls = {"n": 0}

    def script() -> Iterator[bytes | float]:
        calls["n"] += 1
        if calls["n"] == 1:
            yield b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
            yield 5.0  # keep the connection open: a client that reused it would not be caught by a new connect
        else:
            yield from _header_trickle()

    with serve(script) as url, httpx.Client(base_url=url) as http:
        assert bounded_get(http, "/v1/models", timeout_s=3).status_code == 200
        result, _ = _within(20, lambda: bounded_get(http, "/props", timeout_s=1.0))
    assert isinstance(result, httpx.ReadTimeout)


def test_chat_through_httpx_deadline_covers_trickled_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTPS and proxies take httpx's path (STR-38); forced here on plain HTTP."""
    monkeypatch.setattr(client, "_direct", lambda _http, _request: False)
    with serve(_header_trickle) as url, httpx.Client(base_url=url) as http:
        result, _ = _within(20, lambda: stream_chat(http, BODY, timeout_s=1.0))
    assert isinstance(result, client.StreamResult) and result.error and "timeout" in result.error


def test_normal_stream_still_reads_through_the_trace_hook() -> None:
    def script() -> Iterator[bytes | float]:
        yield SSE_HEAD
        yield from normal_events(8)

    with serve(script) as url, httpx.Client(base_url=url) as http:
        assert bounded_get(http, "/anything").status_code == 200


def test_url_credentials_are_sent_on_the_direct_socket_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """A basic-auth reverse proxy in front of an engine: ``http://user:pass@host`` (every request got 401)."""
    import socket

    import sse_fakes

    seen: list[bytes] = []

    def keep(conn: socket.socket) -> None:
        seen.append(conn.recv(65536))

    def script() -> Iterator[bytes | float]:
        yield SSE_HEAD
        yield from normal_events(4)

    monkeypatch.setattr(sse_fakes, "_read_request", keep)
    with serve(script) as url, httpx.Client(base_url=url.replace("http://", "http://admin:p%40ss-1234@")) as http:
        result = stream_chat(http, BODY, timeout_s=5)
    assert result.error is None, result.error
    head = seen[0].split(b"\r\n\r\n")[0].lower()
    assert b"authorization: basic ywrtaw46cebzcy0xmjm0" in head  # base64 of admin:p@ss-1234


def _sse_body(n: int = 4) -> bytes:
    return b"".join(normal_events(n))


@pytest.mark.parametrize("framing", ["content-length", "chunked-end-alone"])
def test_a_complete_answer_on_a_kept_open_connection_is_not_a_stall(framing: str) -> None:
    """The server ignores ``Connection: close`` and keeps the socket open after a complete answer."""
    body = _sse_body()

    def script() -> Iterator[bytes | float]:
        if framing == "content-length":
            yield b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body)
            yield body
        else:
            yield b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            for piece in normal_events(4):
                yield b"%x\r\n%s\r\n" % (len(piece), piece)
                yield 0.01
            yield b"0\r\n\r\n"  # the last chunk in a write (and a read) of its own
        yield 20.0  # kept open

    with serve(script) as url, httpx.Client(base_url=url) as http:
        result, _ = _within(30, lambda: stream_chat(http, BODY, timeout_s=4.0))
    assert isinstance(result, client.StreamResult)
    assert result.error is None and not result.flags, (result.error, result.flags)
    assert result.text == "t0 t1 t2 t3 "


def test_openai_model_id_says_why_it_found_none() -> None:
    from bakeoff.core.engine.pieces import openai_model_id

    def refuse() -> Iterator[bytes | float]:
        yield b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 7\r\n\r\nloading"

    problems: list[str] = []
    with serve(refuse) as url, httpx.Client(base_url=url) as http:
        assert openai_model_id(http, problems=problems) is None
    assert problems == ["GET /v1/models: no model id (HTTP 503)"]
    problems.clear()
    with httpx.Client(base_url="http://127.0.0.1:9") as http:  # nothing listens on the discard port
        assert openai_model_id(http, timeout_s=2, problems=problems) is None
    assert len(problems) == 1 and problems[0].startswith("GET /v1/models: no model id (ConnectError")
