"""The stream client: token accounting from real captured streams, and every hostile stream a server can send
(malformed payloads, impossible counts, trickles past the deadline, buffered bursts, empty 200s)."""

from __future__ import annotations

import gc
import gzip
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sse_fakes import SSE_HEAD, chunk, ev, normal_events, paced_client, serve

from bakeoff.core.engine import client
from bakeoff.core.engine.client import Event, StreamResult, bounded_get, record_stream, stream_chat
from bakeoff.core.engine.pieces import openai_model_id
from bakeoff.core.measure.definitions import StreamAccount, account
from bakeoff.engines.exllama import ExllamaAdapter
from bakeoff.engines.llamacpp import LlamaCppAdapter
from bakeoff.engines.vllm import VllmAdapter

FIXTURES = Path(__file__).parents[2] / "fixtures"
VLLM_CAPTURE = FIXTURES / "vllm" / "chat_stream_spec_off_continuous_usage.sse"


def _flags(fields: StreamAccount, prefix: str) -> list[str]:
    return [f for f in fields.flags if f.startswith(prefix)]


def test_llamacpp_capture_without_per_chunk_counts_keeps_its_rate_and_says_why() -> None:
    """AUDIT H2: the real llama.cpp capture carries its count (timings) on the final chunk only, as an older
    build or a proxy delivers it. Streamed through the adapter's real settings it must fall back to the text
    events, keep its decode rate and be flagged, not put all 15 tokens on the last event."""
    adapter = LlamaCppAdapter()
    body = (FIXTURES / "llamacpp" / "chat_stream_sse.txt").read_bytes()
    result = stream_chat(paced_client(body), {"messages": [], "max_tokens": 16}, 5, adapter.reader.chunk_token_count)
    assert result.error is None
    fields = account(result, adapter.capabilities.token_counts)
    assert fields.completion_tokens == 15
    assert fields.token_events == 14  # text events; the stop token is not assumed one-per-event any more
    assert fields.events == 17  # role chunk + 14 text chunks + finish chunk + usage chunk
    assert fields.n_first == 1 and fields.n_first_source == "estimated"
    assert fields.decode_tps is not None and fields.decode_tps > 0
    assert _flags(fields, "chunk-counts-missing") and "n_first-estimated" in fields.flags
    assert fields.cached_tokens == 37 and fields.prompt_tokens == 38
    assert not _flags(fields, "burst-delivery") and not _flags(fields, "no-rate")
    assert result.final is not None and result.final["timings"]["predicted_n"] == 15


def test_vllm_behind_a_proxy_dropping_continuous_usage_falls_back_and_flags() -> None:
    """vLLM declares usage on every chunk; a real include_usage-only capture (usage on the last chunk) must not
    attribute all 48 tokens to one event."""
    adapter = VllmAdapter()
    body = (FIXTURES / "vllm" / "chat_stream_final_usage_only.sse").read_bytes()
    result = stream_chat(paced_client(body), {"max_tokens": 48}, 5, adapter.reader.chunk_token_count)
    fields = account(result, adapter.capabilities.token_counts)
    assert result.error is None and fields.completion_tokens == 48
    assert fields.token_events > 40 and fields.decode_tps is not None
    assert _flags(fields, "chunk-counts-missing")


def _packed_stream() -> bytes:
    """Three events carrying 1, 5 and 2 tokens, with cumulative usage on every chunk (vLLM style)."""
    chunks = [
        '{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}],"usage":{"prompt_tokens":9,"completion_tokens":0}}',
        '{"choices":[{"index":0,"delta":{"content":"a"}}],"usage":{"prompt_tokens":9,"completion_tokens":1}}',
        '{"choices":[{"index":0,"delta":{"content":"bcdef"}}],"usage":{"prompt_tokens":9,"completion_tokens":6}}',
        '{"choices":[{"index":0,"delta":{"content":"gh"},"finish_reason":"length"}],"usage":{"prompt_tokens":9,"completion_tokens":8}}',
        '{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":8}}',
    ]
    return ("".join(f"data: {c}\n\n" for c in chunks) + "data: [DONE]\n\n").encode()


def test_packed_events_use_per_chunk_usage() -> None:
    result = stream_chat(paced_client(_packed_stream()), {}, timeout_s=5)
    fields = account(result, "usage_per_chunk")
    assert fields.completion_tokens == 8
    assert fields.token_events == 3
    assert fields.max_tokens_per_event == 5
    assert fields.n_first == 1 and fields.n_first_source == "usage"
    assert fields.flags == []
    # decode counts tokens, an event-counting client counts events: 7 tokens vs 2 events after the first
    assert fields.decode_tps is not None and fields.event_count_decode_tps is not None
    assert fields.decode_tps / fields.event_count_decode_tps == pytest.approx(7 / 2)


def test_real_vllm_capture_counts_usage_per_chunk() -> None:
    result = stream_chat(paced_client(VLLM_CAPTURE.read_bytes()), {}, timeout_s=5)
    fields = account(result, "usage_per_chunk")
    assert fields.completion_tokens == result.usage["completion_tokens"]  # type: ignore[index]
    assert fields.completion_tokens is not None and fields.token_events <= fields.completion_tokens


def test_estimated_first_event_tokens_follow_the_first_events_share_of_the_text() -> None:
    """AUDIT M5: a TabbyAPI stream of 59 tokens in 3 events whose first event carries most of the text;
    N / events (20) would under-count it. The estimate follows the text and stays flagged."""
    body = (FIXTURES / "exllama" / "fp16-draft-self" / "chat_stream_min_tokens.sse").read_bytes()
    result = stream_chat(paced_client(body), {}, 5)
    fields = account(result, ExllamaAdapter().capabilities.token_counts)
    first = result.events[0].content
    share = len(first) / len(result.text)
    assert fields.n_first == round(59 * share) and fields.n_first > 20
    assert fields.n_first_source == "estimated" and "n_first-estimated" in fields.flags


def test_missing_usage_is_flagged_not_recounted() -> None:
    body = (b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
            b'data: {"choices":[{"delta":{"content":"y"}}]}\n\ndata: [DONE]\n\n')
    fields = account(stream_chat(paced_client(body), {}, timeout_s=5), "one_per_event")
    assert fields.completion_tokens is None
    assert "usage-missing" in fields.flags and "no-rate: usage missing" in fields.flags
    assert fields.decode_tps is None  # never silently re-counted from events


def test_usage_disagreeing_with_events_is_flagged() -> None:
    body = (b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
            b'data: {"choices":[],"usage":{"completion_tokens":5,"prompt_tokens":1}}\n\ndata: [DONE]\n\n')
    fields = account(stream_chat(paced_client(body), {}, timeout_s=5), "one_per_event")
    assert any(f.startswith("token-events-mismatch") for f in fields.flags)


def test_http_error_and_malformed_sse_become_errors() -> None:
    result = stream_chat(paced_client(b'{"error": "boom"}', status=500), {}, timeout_s=5)
    assert result.error is not None and result.error.startswith("HTTP 500")
    result = stream_chat(paced_client(b"data: {not json\n\n"), {}, timeout_s=5)
    assert result.error is not None and "malformed-sse" in result.flags


def _with(first: bytes) -> bytes:
    return ev(chunk("a ")) + first + b"".join(normal_events())


def _usage_event(usage: Any) -> bytes:
    return b"".join(normal_events()[:-2]) + ev({"choices": [], "usage": usage}) + ev("[DONE]")


MALFORMED = {  # FAULTS D1: valid JSON of the wrong shape, each once crashed the run with a traceback
    "data: null": _with(ev("null")),
    "a list": _with(ev([1, 2, 3])),
    "choices a dict": _with(ev({"choices": {"index": 0}})),
    "choices holding a number": _with(ev({"choices": [3]})),
    "delta a string": _with(ev({"choices": [{"delta": "hi"}]})),
    "content an int": _with(ev({"choices": [{"index": 0, "delta": {"content": 5}}]})),
    "finish_reason 7": _with(ev(chunk(None, 7))),
    "usage 7": _usage_event(7),
    "completion_tokens 16.5": _usage_event({"prompt_tokens": 20, "completion_tokens": 16.5}),
    "completion_tokens '16'": _usage_event({"prompt_tokens": 20, "completion_tokens": "16"}),
    "completion_tokens 10**30": _usage_event({"prompt_tokens": 20, "completion_tokens": 10 ** 30}),
    "completion_tokens true": _usage_event({"prompt_tokens": 20, "completion_tokens": True}),
    "prompt_tokens_details a list": _usage_event({"prompt_tokens": 20, "completion_tokens": 16,
                                                  "prompt_tokens_details": [1]}),
    "cached_tokens a string": _usage_event({"prompt_tokens": 20, "completion_tokens": 16,
                                            "prompt_tokens_details": {"cached_tokens": "x"}}),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_payloads_become_flagged_error_samples(name: str) -> None:
    result = stream_chat(paced_client(MALFORMED[name]), {"max_tokens": 16}, 5)
    assert result.error is not None and result.error.startswith("malformed-payload: ")
    assert "malformed-payload" in result.flags
    fields = account(result, "final_usage_only")  # the accounting of an error sample must not raise either
    assert fields.completion_tokens is None or abs(fields.completion_tokens) < 2 ** 53


def test_an_unreadable_engine_count_is_a_malformed_payload() -> None:
    """llama.cpp per-chunk timings with predicted_n 'n/a' (FAULTS D1 timings_str) once raised ValueError."""
    body = b"".join(ev({**chunk(f"t{i} "), "timings": {"predicted_n": "n/a"}}) for i in range(4)) + ev("[DONE]")
    result = stream_chat(paced_client(body), {}, 5, LlamaCppAdapter().reader.chunk_token_count)
    assert result.error is not None and "per-chunk token count" in result.error
    assert "malformed-payload" in result.flags


IMPOSSIBLE = {  # FAULTS D7, with max_tokens 16 and 16 text events; fixed length plays no part
    "1600 for max_tokens 16": ({"prompt_tokens": 20, "completion_tokens": 1600}, "> max_tokens 16"),
    "negative": ({"prompt_tokens": 20, "completion_tokens": -5}, "negative"),
    "zero with text": ({"prompt_tokens": 20, "completion_tokens": 0}, "0 with 16 text event"),
    "cached above prompt": ({"prompt_tokens": 20, "completion_tokens": 16,
                             "prompt_tokens_details": {"cached_tokens": 1000}}, "cached_tokens 1000"),
    "negative prompt": ({"prompt_tokens": -1, "completion_tokens": 16}, "prompt_tokens -1"),
}


@pytest.mark.parametrize("name", sorted(IMPOSSIBLE))
def test_impossible_usage_is_an_error_whatever_fixed_length_says(name: str) -> None:
    usage, says = IMPOSSIBLE[name]
    result = stream_chat(paced_client(_usage_event(usage)), {"max_tokens": 16}, 5)
    assert "usage-impossible" in result.flags
    assert result.error is not None and says in result.error


def test_valid_usage_at_the_limit_is_not_impossible() -> None:
    result = stream_chat(paced_client(b"".join(normal_events(16))), {"max_tokens": 16}, 5)
    assert result.error is None and result.flags == []


def test_ids_comments_and_keepalives_are_valid_sse() -> None:
    """FAULTS D20: id: on every event plus keep-alive comments (sse-starlette style) once failed every request."""
    body = b"".join(b"id: %d\n" % i + e + b": keep-alive\n\n" for i, e in enumerate(normal_events()))
    body = b"retry: 10\nevent: message\n\n" + body.replace(b"\n\n", b"\r\n\r\n", 3)
    result = stream_chat(paced_client(body), {"max_tokens": 16}, 5)
    fields = account(result, "one_per_event")
    assert result.error is None and fields.completion_tokens == 16 and fields.token_events == 16
    assert fields.decode_tps is not None


@pytest.mark.parametrize("body, kept", [(b"", "''"), (b'{"detail": "model not loaded"}\n\n', "model not loaded")])
def test_a_200_without_events_is_an_error_keeping_the_servers_words(body: bytes, kept: str) -> None:
    """FAULTS D6: headers then close, or an event-stream without data: lines, was stored as status ok."""
    result = stream_chat(paced_client(body), {}, 5)
    assert result.error is not None and "no-events" in result.flags and kept in result.error


# -- against a hostile loopback server: deadlines and bursts -------------------------------------------------

def _finishes(fn: Any, limit_s: float = 60.0) -> Any:
    """Run ``fn`` on a thread; fail (instead of hanging the suite) if it never returns; re-raise what it raised."""
    out: list[tuple[Any, BaseException | None]] = []

    def call() -> None:
        try:
            out.append((fn(), None))
        except Exception as exc:
            out.append((None, exc))

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(limit_s)
    assert out, "the client never returned: no deadline was enforced"
    value, exc = out[0]
    if exc is not None:
        raise exc
    return value


def _trickle(prefix: list[bytes], drip: bytes) -> Iterator[bytes | float]:
    yield SSE_HEAD
    yield from prefix
    while True:
        yield drip
        yield 0.1


@pytest.mark.parametrize("prefix, drip", [([], b":"), (normal_events()[:3], b"\n")], ids=["colon", "newline"])
def test_a_trickling_server_ends_at_the_request_deadline(prefix: list[bytes], drip: bytes) -> None:
    """FAULTS D2: a byte every 0.1 s, never completing an event, once held bakeoff forever (the read timeout
    restarted with each byte). Ending there, with no event progress, is a stall: the arm is stopped."""
    with serve(lambda: _trickle(prefix, drip)) as url, httpx.Client(base_url=url) as http:
        result: StreamResult = _finishes(lambda: stream_chat(http, {"max_tokens": 16}, 1.0))
    assert result.error is not None and "timeout" in result.flags and "stalled" in result.error


def test_a_flowing_stream_past_the_deadline_is_not_a_stall() -> None:
    """AUDIT L12: tokens keep coming (max_tokens 10**9); the request ends at its deadline as
    deadline-exceeded, and is not reported as a stalled engine."""
    def endless() -> Iterator[bytes | float]:
        yield SSE_HEAD
        while True:
            yield ev(chunk("t "))
            yield 0.02

    with serve(endless) as url, httpx.Client(base_url=url) as http:
        result: StreamResult = _finishes(lambda: stream_chat(http, {"max_tokens": 10 ** 9}, 1.0))
    assert "deadline-exceeded" in result.flags and "timeout" not in result.flags
    assert len(result.events) > 1


def test_setup_calls_have_an_overall_deadline() -> None:
    """FAULTS D2 models_slowloris: GET /v1/models answered 200 then a space a second hung the arm's setup."""
    def trickle_json() -> Iterator[bytes | float]:
        yield b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
        while True:
            yield b" "
            yield 0.1

    with serve(trickle_json) as url, httpx.Client(base_url=url) as http:
        with pytest.raises(httpx.TimeoutException):
            _finishes(lambda: bounded_get(http, "/v1/models", timeout_s=1.0))
        assert _finishes(lambda: openai_model_id(http, timeout_s=1.0)) is None


def test_bounded_get_returns_a_whole_answer() -> None:
    def models() -> Iterator[bytes | float]:
        body = b'{"data": [{"id": "m"}]}'
        yield b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        yield body[:5]
        yield 0.05
        yield body[5:]

    with serve(models) as url, httpx.Client(base_url=url) as http:
        assert bounded_get(http, "/v1/models").json() == {"data": [{"id": "m"}]}
        assert openai_model_id(http) == "m"


def _burst() -> Iterator[bytes | float]:
    yield 0.2
    yield SSE_HEAD + b"".join(normal_events())


def _gzipped() -> Iterator[bytes | float]:
    body = gzip.compress(b"".join(normal_events()))
    yield (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\n"
           b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)) + body


@pytest.mark.parametrize("script", [_burst, _gzipped], ids=["buffering-proxy", "gzip"])
def test_a_stream_delivered_at_once_is_flagged_burst(script: Any) -> None:
    """FAULTS D3: every event in one read gave ~70,000 tok/s and a confident verdict, unflagged."""
    with serve(script) as url, httpx.Client(base_url=url) as http:
        result = stream_chat(http, {"max_tokens": 16}, 5)
    fields = account(result, "final_usage_only")
    assert result.error is None and fields.completion_tokens == 16
    assert _flags(fields, "burst-delivery")


def test_a_paced_stream_is_not_a_burst() -> None:
    def paced() -> Iterator[bytes | float]:
        yield SSE_HEAD
        for e in normal_events():
            yield e
            yield 0.005

    with serve(paced) as url, httpx.Client(base_url=url) as http:
        result = stream_chat(http, {"max_tokens": 16}, 5)
    fields = account(result, "one_per_event")
    assert result.error is None and not _flags(fields, "burst-delivery")
    assert fields.decode_tps is not None and fields.decode_tps > 0
    assert fields.reads >= 16


def test_a_silent_server_times_out_as_a_stall() -> None:
    def silent() -> Iterator[bytes | float]:
        yield 30.0

    with serve(silent) as url, httpx.Client(base_url=url) as http:
        result: StreamResult = _finishes(lambda: stream_chat(http, {}, 0.5))
    assert "timeout" in result.flags and result.error is not None


# -- record now, parse later -----------------------------------------------------------------------------------

def _chunked(pieces: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def test_chunked_framing_is_undone_after_the_stream_and_events_keep_their_arrival_read() -> None:
    """uvicorn and llama-server send chunked bodies; here one event is split over two chunks written 0.2 s apart.
    The event is stamped when its second half arrived, not when its first did (nor when the stream ended)."""
    events = normal_events(4)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

    def script() -> Iterator[bytes | float]:
        yield head + _chunked([events[0]])[:-5]
        yield 0.05
        yield _chunked([events[1][:10]])[:-5]
        yield 0.2
        yield _chunked([events[1][10:], *events[2:]])

    with serve(script) as url, httpx.Client(base_url=url) as http:
        result = stream_chat(http, {"max_tokens": 4}, 5)
    fields = account(result, "one_per_event")
    assert result.error is None and fields.completion_tokens == 4 and fields.token_events == 4
    first, second = result.events[0].t_ns, result.events[1].t_ns
    assert second - first >= 0.2e9  # stamped by the read that completed it
    assert result.events[2].read == result.events[1].read  # the rest arrived in that same read
    assert fields.client_cpu_s is not None and fields.client_lag_s is not None


def test_the_garbage_collector_is_paused_while_any_stream_is_timed() -> None:
    from bakeoff.core.engine.client import _GcPause

    pause = _GcPause()
    assert gc.isenabled()
    with pause:
        assert not gc.isenabled()
        with pause:  # a second concurrent stream
            assert not gc.isenabled()
        assert not gc.isenabled()  # still one stream being timed
    assert gc.isenabled()
    with serve(lambda: iter([SSE_HEAD, *normal_events(4)])) as url, httpx.Client(base_url=url) as http:
        assert stream_chat(http, {"max_tokens": 4}, 5).error is None
    assert gc.isenabled()


def test_a_reader_kept_away_from_the_socket_flags_the_sample() -> None:
    """Harness self-cost: when the reader was away longer than 1 % of the decode window, the figure may have
    moved, and the sample says so."""
    t0 = 1_000_000_000
    events = [Event(t0 + i * 1_000_000, i, "x", None) for i in range(11)]  # 10 ms decode window
    result = StreamResult(t_send_ns=0, t_done_ns=t0 + 20_000_000, events=events, text="x" * 11,
                          usage={"completion_tokens": 11}, client_lag_s=0.0005)
    fields = account(result, "one_per_event")
    assert any(f.startswith("harness-lag: ") for f in fields.flags) and fields.decode_tps is not None
    result.client_lag_s = 0.00005
    assert not any(f.startswith("harness-lag") for f in account(result, "one_per_event").flags)


def test_a_speculative_engine_writing_accepted_drafts_back_to_back_is_not_a_burst() -> None:
    """Real llama-server n-gram run: 64 tokens, one per event, accepted drafts written together (16 reads).
    Several events per read is speculative decoding, not a buffering proxy; the rate matched the server's."""
    t0 = 1_000_000_000
    sizes = [1, 1, 6, 2, 8, 1, 5, 3, 7, 2, 9, 4, 1, 6, 5, 3]  # token events per read, 64 in all
    events, read = [], 0
    for read, size in enumerate(sizes):
        events += [Event(t0 + read * 20_000_000, read, "x", None) for _ in range(size)]
    result = StreamResult(t_send_ns=0, t_done_ns=t0 + 400_000_000, events=events, text="x" * 64,
                          usage={"completion_tokens": 64})
    fields = account(result, "one_per_event")
    assert not _flags(fields, "burst-delivery") and fields.decode_tps == pytest.approx(63 / 0.3)


def test_a_long_accepted_draft_arriving_in_one_read_is_not_a_burst() -> None:
    """Real llama-server n-gram, second rep (the speculator reuses the first answer): 64 tokens in 13 reads,
    34 token events in one read, over a 3 s decode window; the rate matched the server's own (20.91 tok/s)."""
    sizes = [1, 2, 3, 2, 34, 3, 4, 2, 3, 2, 3, 3, 2]
    events = [Event(1_000_000_000 + read * 250_000_000, read, "x", None)
              for read, size in enumerate(sizes) for _ in range(size)]
    result = StreamResult(t_send_ns=900_000_000, t_done_ns=4_100_000_000, events=events, text="x" * 64,
                          usage={"completion_tokens": 64})
    fields = account(result, "one_per_event")
    assert not _flags(fields, "burst-delivery") and fields.decode_tps == pytest.approx(63 / 3.0)


def test_tokens_that_came_in_the_first_read_are_before_the_decode_window() -> None:
    """A reader late for its first read gets several events at once, stamped with the newest packet's time: the
    window opens then, so those events' tokens are not in it (issue 33 item 6: counting only the first event's
    over-read a paced 8k tok/s stream by up to 38 % on a 2-core box)."""
    t0, gap = 1_000_000_000, 1_000_000  # one 5-token event every 1 ms: 5000 tok/s
    events = [Event(t0 + 3 * gap, 0, "x", 5 * (i + 1)) for i in range(4)]  # events 0-3 in one late read
    events += [Event(t0 + i * gap, i - 3, "x", 5 * (i + 1)) for i in range(4, 20)]
    result = StreamResult(t_send_ns=0, t_done_ns=t0 + 20 * gap, events=events, text="x" * 20,
                          usage={"completion_tokens": 100})
    fields = account(result, "usage_per_chunk")
    assert fields.n_first == 20 and fields.decode_tps == pytest.approx(5000)
    # the same stream, one token per event: the first read's events are counted out the same way
    for e in events:
        e.count = None
    result.usage = {"completion_tokens": 20}
    fields = account(result, "one_per_event")
    assert fields.n_first == 4 and fields.decode_tps == pytest.approx(1000)


class _LateReader:
    """A socket whose first read starts ``delay_s`` late, as a reader held up by the scheduler would."""

    def __init__(self, sock: Any, delay_s: float) -> None:
        self._sock, self._delay_s = sock, delay_s

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)

    def __enter__(self) -> _LateReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self._sock.close()

    def recvmsg(self, *args: Any) -> Any:
        if self._delay_s:
            time.sleep(self._delay_s)
            self._delay_s = 0.0
        return self._sock.recvmsg(*args)


def _gap_script() -> Iterator[bytes | float]:
    """The first event, then the rest 0.4 s later: its decode window is at least 0.4 s."""
    events = normal_events(3)
    yield SSE_HEAD + events[0]
    yield 0.4
    yield from events[1:]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="kernel receive timestamps are Linux's")
def test_a_reader_late_to_the_socket_keeps_the_kernels_arrival_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first token event arrives while the reader is held up for 0.2 s. Stamped when the read returned,
    the decode window shrinks by those 0.2 s; stamped by the kernel on arrival, it stays the server's 0.4 s."""
    real = socket.create_connection
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: _LateReader(real(*a, **k), 0.2))
    with serve(_gap_script) as url, httpx.Client(base_url=url) as http:
        result = stream_chat(http, {"max_tokens": 3}, 10)
    assert result.error is None and result.arrival_clock == "kernel"
    token_events = [e for e in result.events if e.content]
    window_s = (token_events[-1].t_ns - token_events[0].t_ns) / 1e9
    assert window_s >= 0.39  # the server's pause; a user-clock stamp would give about 0.2 s
    assert account(result, "one_per_event").arrival_clock == "kernel"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="kernel receive timestamps are Linux's")
def test_kernel_stamps_fall_between_the_send_and_each_reads_return() -> None:
    with serve(lambda: iter([SSE_HEAD, *[e for step in normal_events(8) for e in (step, 0.005)]])) as url, \
            httpx.Client(base_url=url) as http:
        rec = record_stream(http, {"max_tokens": 8}, 10)
    assert rec.arrival_clock == "kernel" and rec.network_reads >= 8
    body_stamps = [t for t, _ in rec.reads]
    assert all(rec.t_send_ns <= t for t in body_stamps) and body_stamps == sorted(body_stamps)
    assert max(body_stamps) <= max(rec.arrived_ns)


def test_without_kernel_stamps_events_carry_the_readers_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client, "_ask_kernel_stamps", lambda sock: False)
    with serve(lambda: iter([SSE_HEAD, *normal_events(4)])) as url, httpx.Client(base_url=url) as http:
        result = stream_chat(http, {"max_tokens": 4}, 5)
    assert result.error is None and result.arrival_clock == "user"


def _anc(wall_ns: int) -> list[tuple[int, int, bytes]]:
    return [(socket.SOL_SOCKET, client._SO_TIMESTAMPNS, struct.pack("qq", *divmod(wall_ns, 1_000_000_000)))]


def test_kernel_stamps_are_moved_onto_the_perf_counter_clock_or_refused() -> None:
    """Wall − perf_counter is 5 s here. A stamp 30 µs before its read's return is kept; a missing stamp, one
    after its read returned, one before the request and a wall-clock step each fall back to the user clock."""
    off = 5_000_000_000
    returned, sent = [1_000_100_000, 1_000_200_000], 1_000_000_000
    before, after = (sent - 1000, off), (returned[-1] + 1000, off)
    good = [_anc(t - 30_000 + off) for t in returned]
    assert client._kernel_stamps(good, returned, sent, before, after) == [t - 30_000 for t in returned]
    assert client._kernel_stamps([good[0], []], returned, sent, before, after) is None
    late = [good[0], _anc(returned[1] + 1_000_000 + off)]
    assert client._kernel_stamps(late, returned, sent, before, after) is None
    early = [_anc(sent - 1_000_000 + off), good[1]]
    assert client._kernel_stamps(early, returned, sent, before, after) is None
    stepped = (after[0], off + 50_000_000)
    assert client._kernel_stamps(good, returned, sent, before, stepped) is None
