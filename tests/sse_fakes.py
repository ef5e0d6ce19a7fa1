"""Fake SSE servers for client tests: an in-process transport that streams event by event, and a hostile
loopback server that writes a scripted sequence of raw bytes and pauses (trickles, bursts, bad framing).

The loopback server speaks raw sockets, so every byte and every pause is under the test's control.
It binds 127.0.0.1 only.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

__all__ = ["paced_client", "split_events", "ev", "chunk", "normal_events", "SSE_HEAD", "serve", "Script"]

Script = Callable[[], Iterable["bytes | float"]]  # bytes are written, floats are pauses in seconds


def split_events(body: bytes) -> list[bytes]:
    """An SSE body cut after every blank line (LF or CRLF framing: TabbyAPI writes CRLF): one piece per event,
    as a streaming server flushes them."""
    pieces, start = [], 0
    while match := re.compile(rb"\r?\n\r?\n").search(body, start):
        pieces.append(body[start:match.end()])
        start = match.end()
    if start < len(body):
        pieces.append(body[start:])
    return pieces


def paced_client(body: bytes, status: int = 200, on_request: Callable[[httpx.Request], None] | None = None
                 ) -> httpx.Client:
    """An httpx client whose server streams ``body`` one SSE event per read (a MockTransport would hand the
    whole body to the client in one read, which bakeoff rightly flags as a burst)."""

    def handler(request: httpx.Request) -> httpx.Response:
        if on_request:
            on_request(request)
        return httpx.Response(status, content=iter(split_events(body)), headers={"content-type": "text/event-stream"})

    return httpx.Client(transport=httpx.MockTransport(handler), base_url="http://engine")


def ev(obj: Any) -> bytes:
    data = obj if isinstance(obj, (bytes, str)) else json.dumps(obj)
    return b"data: " + (data.encode() if isinstance(data, str) else data) + b"\n\n"


def chunk(content: Any = None, finish: Any = None, usage: Any = None) -> dict[str, Any]:
    c: dict[str, Any] = {"id": "x", "object": "chat.completion.chunk",
                         "choices": [{"index": 0, "delta": {} if content is None else {"content": content},
                                      "finish_reason": finish}]}
    if usage is not None:
        c["usage"] = usage
    return c


def normal_events(n: int = 16, n_usage: Any = None, prompt: int = 20) -> list[bytes]:
    """``n`` one-token text events, a finish event, a usage-only event and [DONE]."""
    out = [ev(chunk(f"t{i} ")) for i in range(n)]
    out.append(ev(chunk(None, "length")))
    out.append(ev({"id": "x", "choices": [], "usage": {"prompt_tokens": prompt,
                                                       "completion_tokens": n if n_usage is None else n_usage}}))
    out.append(ev("[DONE]"))
    return out


SSE_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Connection: close\r\n\r\n")


def _read_request(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        part = conn.recv(65536)
        if not part:
            return
        data += part
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        part = conn.recv(65536)
        if not part:
            return
        body += part


def _answer(conn: socket.socket, script: Script, stop: threading.Event) -> None:
    with conn:
        try:
            _read_request(conn)
            for step in script():
                if stop.is_set():
                    return
                if isinstance(step, float):
                    time.sleep(step)
                else:
                    conn.sendall(step)
        except OSError:
            return  # the client hung up (or shut the socket at its deadline)


@contextmanager
def serve(script: Script) -> Iterator[str]:
    """A loopback server answering every request with ``script``; yields its base URL."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.2)
    stop = threading.Event()

    def accept_loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=_answer, args=(conn, script, stop), daemon=True).start()

    thread = threading.Thread(target=accept_loop, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        listener.close()
