"""The hostile server does what each mode says on the wire (the fault tests lean on it)."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest
from hostile_server import CHAT_MODES, TRICKLE_S, HostileServer


def _chat(srv: HostileServer, mode: str, max_tokens: int = 4, timeout: float = 5) -> httpx.Response:
    return httpx.post(f"{srv.url(mode)}/v1/chat/completions", timeout=timeout,
                      json={"model": "x", "max_tokens": max_tokens, "stream": True, "messages": []})


def _data_lines(text: str) -> list[str]:
    return [ln[6:] for ln in text.splitlines() if ln.startswith("data: ")]


def test_ok_streams_max_tokens_events_then_usage_then_done(hostile_server: HostileServer) -> None:
    r = _chat(hostile_server, "ok", max_tokens=5)
    data = _data_lines(r.text)
    assert r.headers["content-type"] == "text/event-stream" and data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert sum(bool(c["choices"] and c["choices"][0]["delta"].get("content")) for c in chunks) == 5
    assert chunks[-1]["usage"]["completion_tokens"] == 5
    assert hostile_server.requests[-1].body["max_tokens"] == 5  # type: ignore[index]


@pytest.mark.parametrize("mode, value", [("usage_neg", -5), ("usage_huge", 10 ** 30), ("usage_str", "3"),
                                         ("usage_over_max", 300)])
def test_usage_lies_as_the_mode_says(hostile_server: HostileServer, mode: str, value: object) -> None:
    usage = json.loads(_data_lines(_chat(hostile_server, mode, max_tokens=3).text)[-2])["usage"]
    assert usage["completion_tokens"] == value


def test_bad_shape_and_error_modes(hostile_server: HostileServer) -> None:
    assert _data_lines(_chat(hostile_server, "json_null").text)[0] == "null"
    assert _chat(hostile_server, "http429").status_code == 429
    assert _chat(hostile_server, "echo_key").status_code == 401
    assert _chat(hostile_server, "no_such_mode").status_code == 404
    assert httpx.get(f"{hostile_server.url('forbidden')}/v1/models").status_code == 403
    ids = [m["id"] for m in httpx.get(f"{hostile_server.url('two_models')}/v1/models").json()["data"]]
    assert ids == ["other-model", "wanted-model"]


def test_ids_keepalive_is_valid_sse_with_ids_and_comments(hostile_server: HostileServer) -> None:
    text = _chat(hostile_server, "ids_keepalive").text
    assert "id: 0\n" in text and ": ping" in text


def test_burst_arrives_in_one_read(hostile_server: HostileServer) -> None:
    with httpx.stream("POST", f"{hostile_server.url('burst')}/v1/chat/completions",
                      json={"max_tokens": 8, "stream": True}) as r:
        reads = list(r.iter_raw())
    assert len(reads) <= 2 and b"[DONE]" in b"".join(reads)


def test_gzip_body_is_decoded_by_the_client(hostile_server: HostileServer) -> None:
    r = _chat(hostile_server, "gzip")
    assert r.headers["content-encoding"] == "gzip" and _data_lines(r.text)[-1] == "[DONE]"


def test_slowloris_never_completes_an_event_but_keeps_sending(hostile_server: HostileServer) -> None:
    got = b""
    with httpx.stream("POST", f"{hostile_server.url('slowloris')}/v1/chat/completions", json={},
                      timeout=TRICKLE_S * 5) as r:
        t0 = time.monotonic()
        for piece in r.iter_raw():
            got += piece
            if time.monotonic() - t0 > TRICKLE_S * 6:
                break
    assert got.startswith(b":z") and b"\n" not in got


def test_reset_ends_with_a_connection_error(hostile_server: HostileServer) -> None:
    with pytest.raises(httpx.HTTPError):
        _chat(hostile_server, "reset")


def test_every_chat_mode_answers_or_trickles(hostile_server: HostileServer) -> None:
    """No mode crashes the server: each answers, or keeps the connection busy until the client leaves."""
    for mode in sorted(CHAT_MODES.keys() - {"header_trickle"}):  # httpx's timeout restarts on each header byte
        deadline = time.monotonic() + 0.5  # a wall-clock deadline: the slowloris modes defeat read timeouts
        try:
            with httpx.stream("POST", f"{hostile_server.url(mode)}/v1/chat/completions",
                              json={"max_tokens": 4, "stream": True}, timeout=1) as r:
                for _ in r.iter_raw():
                    if time.monotonic() > deadline:
                        break
        except (httpx.TimeoutException, httpx.RemoteProtocolError, httpx.ReadError):
            pass
    assert _chat(hostile_server, "ok").status_code == 200
    with socket.create_connection(("127.0.0.1", hostile_server.port), timeout=2):
        pass
