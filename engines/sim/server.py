"""A misbehaving OpenAI-compatible streaming server, for testing how bakeoff copes with broken engines.

It runs as a real process, started by bakeoff's launcher like any engine, so kills, crashes, stalls and
orphans are real. It uses the standard library only and starts in well under a second. Behaviour comes
from one JSON object (``--behaviour``), validated beforehand by ``SimOptions`` in ``engines/sim/adapter.py``:

- ``tokens_per_event``, ``ttft_ms``, ``itl_ms``: how tokens are packed and paced;
- ``usage``: ``ok``, ``missing`` (no usage at all) or ``wrong`` (final usage off by ``usage_offset``);
- ``fault`` on the chat requests listed in ``fault_on_requests`` (1-based, warm-up included; all when
  unset), after ``fault_after_tokens`` tokens: ``stall`` (stop sending for ``stall_s``), ``reset`` (TCP
  RST), ``kill`` (SIGKILL itself mid-stream), ``malformed`` (a truncated JSON data line) or ``http``
  (answer ``http_status`` instead of a stream);
- ``boot_delay_s`` (answer 503 "Loading model" until then), ``crash_on_start`` (log this line and exit);
- ``itl_ms_per_stream``: added to ``itl_ms`` per other chat request in flight (slower under concurrency);
- the planted capacity model (``capacity.py``): ``ttft_ms_per_stream`` added to ``ttft_ms`` per other request in
  flight, times ``capacity_cliff`` above ``capacity_streams`` (``structured_capacity_streams`` for a request under a
  grammar, where set), read after ``admission_ms`` (so a batch released
  together counts itself);
- ``launch_speed``: this launch's speed for its whole life (0.5: token gaps doubled); with ``--launch-speeds``
  the server draws it per launch, counting its launches in the ``--launch-counter`` file (an engine with a
  fast and a slow launch state).
- ``speculative`` (set by the adapter for a speculative arm): report ``draft_per_event`` drafted tokens per
  token event, half of them accepted (at most the tokens after the first), beside the generated count; with
  ``drafts_under_grammar`` false a request carrying ``response_format`` or ``tools`` drafts nothing, as an engine
  that switches speculation off under a grammar does;
- ``grammar_answer``: a request carrying ``response_format`` or ``tools`` is answered with this text, a character
  a token, finishing ``stop`` (a valid answer where the test's schema accepts it); unset, it gets words.

The response body is HTTP/1.1 chunked, as real engines send it, so a process that dies mid-stream is
seen by the client as an incomplete body rather than as a clean end of stream. The API key, when one is
required, is read from the environment variable named by ``--api-key-env`` and never printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

try:  # imported as part of the package, or run as a script by the launcher (its directory on sys.path)
    from .capacity import ttft_s
except ImportError:
    from capacity import ttft_s  # type: ignore[import-not-found,no-redef,unused-ignore]

__all__ = ["DEFAULTS", "Action", "launch_speed", "stream_actions", "main"]

DEFAULTS: dict[str, Any] = {
    "tokens_per_event": 1,
    "ttft_ms": 0.0,
    "itl_ms": 0.0,
    "usage": "ok",
    "usage_offset": 3,
    "fault": "none",
    "fault_after_tokens": 0,
    "fault_on_requests": None,
    "stall_s": 3600.0,
    "http_status": 500,
    "boot_delay_s": 0.0,
    "crash_on_start": None,
    "crash_exit_code": 1,
    "require_api_key": False,
    "model_id": "sim",
    "prompt_tokens": 20,
    "slow_requests": 0,
    "itl_ms_per_stream": 0.0,
    "launch_speed": 1.0,
    "draft_per_event": 2,
    "drafts_under_grammar": True,
    "ttft_ms_per_stream": 0.0,
    "capacity_streams": None,
    "structured_capacity_streams": None,
    "capacity_cliff": 1.0,
    "admission_ms": 0.0,
    "grammar_answer": None,
}

WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")

# An action is (kind, value): ("sleep", seconds), ("send", bytes), ("stall", seconds), ("reset", None),
# ("kill", None). A stream is a list of them, computed without any socket so it can be unit-tested.
Action = tuple[str, Any]


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def is_faulty(behaviour: dict[str, Any], request_no: int) -> bool:
    """Whether chat request number ``request_no`` (1-based, warm-up included) gets the fault."""
    if behaviour["fault"] == "none":
        return False
    chosen = behaviour["fault_on_requests"]
    return chosen is None or request_no in chosen


def stream_actions(behaviour: dict[str, Any], request_no: int, max_tokens: int, *,
                   include_usage: bool = True, chunk_usage: bool = False, grammar: bool = False,
                   in_flight: Callable[[], int] = lambda: 1) -> Iterator[Action]:
    """What the server does, step by step, for one streaming chat request.

    :param include_usage: the client asked ``stream_options.include_usage``.
    :param chunk_usage: the client asked ``stream_options.continuous_usage_stats`` (cumulative usage on
        every chunk, as vLLM sends it).
    :param grammar: the request carries ``response_format`` or ``tools``.
    :param in_flight: chat requests streaming now, this one included (read before each token gap).
    """
    b = {**DEFAULTS, **behaviour}
    speculative = bool(b.get("speculative"))  # set by the adapter from the arm, not an option
    drafting = speculative and (b["drafts_under_grammar"] or not grammar)
    events = 0
    faulty = is_faulty(b, request_no)
    fault = b["fault"] if faulty else "none"
    model, prompt_tokens = b["model_id"], b["prompt_tokens"]
    base = {"id": f"chatcmpl-sim-{request_no}", "object": "chat.completion.chunk", "created": 0, "model": model}

    def own_counts() -> dict[str, int]:
        out = {"generated_tokens": sent}
        if speculative:
            drafted = b["draft_per_event"] * events if drafting else 0
            # never more accepted than the tokens after the first (which the prompt's forward pass yields, undrafted):
            # an engine reporting more breaks the counter invariant, and bakeoff leaves the sample out
            accepted = min(drafted // 2, max(sent - 1, 0))
            out.update(drafted=drafted, accepted=accepted, drafts=events if drafting else 0)
        return out

    def chunk(delta: dict[str, Any], finish: str | None, sent: int) -> bytes:
        payload: dict[str, Any] = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        if finish:  # the server's own count rides on the finish event, as llama.cpp's timings do
            payload["sim"] = own_counts()
        if chunk_usage and b["usage"] != "missing":
            payload["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": sent,
                                "total_tokens": prompt_tokens + sent}
        return _event(payload)

    yield ("send", chunk({"role": "assistant", "content": None}, None, 0))
    if b["admission_ms"]:
        yield ("sleep", b["admission_ms"] / 1000)
    if b["ttft_ms"] or b["ttft_ms_per_stream"]:
        yield ("sleep", ttft_s(b, in_flight(), grammar))
    sent = 0
    answer = b["grammar_answer"] if grammar else None  # the grammar's text, a character a token
    limit = max_tokens if answer is None else min(max_tokens, len(answer))
    while sent < limit:
        if fault != "none" and sent >= b["fault_after_tokens"]:
            if fault == "stall":
                yield ("stall", b["stall_s"])
                fault = "none"  # after the stall the stream carries on, as a recovered engine would
            elif fault == "malformed":
                yield ("send", b'data: {"choices": [{"index": 0, "delta": {"content": "trunc\n\n')
                fault = "none"
            else:  # reset, kill: the stream ends here
                yield (fault, None)
                return
        # the first slow_requests stream at half speed: an engine still warming up
        if sent and (b["itl_ms"] or b["itl_ms_per_stream"]):
            # launch_speed: this launch's state (0.5: an engine that came up in a slow state, all its life)
            itl_ms = b["itl_ms"] + b["itl_ms_per_stream"] * max(0, in_flight() - 1)
            yield ("sleep", itl_ms / 1000 * (2 if request_no <= b["slow_requests"] else 1) / b["launch_speed"])
        n = min(b["tokens_per_event"], limit - sent)
        text = answer[sent:sent + n] if answer is not None else \
            "".join(WORDS[(sent + i) % len(WORDS)] + " " for i in range(n))
        sent += n
        events += 1
        yield ("send", chunk({"content": text}, None, sent))
    yield ("send", chunk({}, "stop" if answer is not None and sent == len(answer) else "length", sent))
    if include_usage and b["usage"] != "missing":
        reported = sent + (b["usage_offset"] if b["usage"] == "wrong" else 0)
        yield ("send", _event({**base, "choices": [],
                               "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": reported,
                                         "total_tokens": prompt_tokens + reported},
                               "sim": own_counts()}))
    yield ("send", b"data: [DONE]\n\n")


def _log(message: str) -> None:
    print(message, flush=True)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    behaviour: dict[str, Any]
    api_key: str | None
    ready_at: float
    requests = 0
    streaming = 0  # chat requests streaming now (itl_ms_per_stream)
    lock = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hung up mid-stream (timeout, test over) is routine here, not a traceback.
        exc = sys.exc_info()[1]
        if isinstance(exc, (BrokenPipeError, ConnectionResetError, OSError)):
            _log(f"W sim: connection from {client_address[0]} ended: {type(exc).__name__}")
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return  # one line per chat request is logged by do_POST instead; headers are never logged

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _authorized(self) -> bool:
        key = self.server.api_key
        if key is None:
            return True
        if self.headers.get("Authorization", "") == f"Bearer {key}":
            return True
        self._json(401, {"error": {"message": "invalid or missing API key", "type": "authentication_error",
                                   "code": 401}})
        return False

    def do_GET(self) -> None:
        if self.path == "/health":
            if time.monotonic() < self.server.ready_at:
                self._json(503, {"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}})
            else:
                self._json(200, {"status": "ok"})
        elif self.path == "/v1/models":
            if self._authorized():
                self._json(200, {"object": "list", "data": [{"id": self.server.behaviour["model_id"],
                                                              "object": "model", "owned_by": "sim"}]})
        else:
            self._json(404, {"error": {"message": f"no route {self.path}", "code": 404}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path != "/v1/chat/completions":
            self._json(404, {"error": {"message": f"no route {self.path}", "code": 404}})
            return
        if not self._authorized():
            return
        if time.monotonic() < self.server.ready_at:
            self._json(503, {"error": {"message": "Loading model", "code": 503}})
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self._json(400, {"error": {"message": "request body is not JSON", "code": 400}})
            return
        with self.server.lock:
            self.server.requests += 1
            request_no = self.server.requests
        b = self.server.behaviour
        max_tokens = int(body.get("max_tokens") or 16)
        faulty = is_faulty(b, request_no)
        _log(f"I sim: request {request_no} max_tokens={max_tokens} stream={bool(body.get('stream'))} "
             f"fault={b['fault'] if faulty else 'none'}")
        if faulty and b["fault"] == "http":
            status = b["http_status"]
            self._json(status, {"error": {"message": f"sim: injected HTTP {status}", "code": status}})
            return
        if not body.get("stream"):
            self._complete(b, request_no, max_tokens)
            return
        opts = body.get("stream_options") or {}
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with self.server.lock:
            self.server.streaming += 1
        try:
            self._stream(b, request_no, max_tokens, opts, bool(body.get("response_format") or body.get("tools")))
        finally:
            with self.server.lock:
                self.server.streaming -= 1

    def _stream(self, b: dict[str, Any], request_no: int, max_tokens: int, opts: dict[str, Any],
                grammar: bool) -> None:
        for kind, value in stream_actions(b, request_no, max_tokens, include_usage=bool(opts.get("include_usage")),
                                          chunk_usage=bool(opts.get("continuous_usage_stats")),
                                          grammar=grammar, in_flight=lambda: self.server.streaming):
            if kind == "send":
                self.wfile.write(f"{len(value):X}\r\n".encode() + value + b"\r\n")
            elif kind in ("sleep", "stall"):
                if kind == "stall":
                    _log(f"W sim: request {request_no} stalls for {value:g} s")
                time.sleep(value)
            elif kind == "reset":
                _log(f"W sim: request {request_no}: resetting the connection")
                # SO_LINGER 0 makes close() send RST instead of FIN.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.rfile.close()
                self.connection.close()
                self.close_connection = True
                return
            elif kind == "kill":
                _log(f"E sim: request {request_no}: killing myself with SIGKILL mid-stream")
                os.kill(os.getpid(), signal.SIGKILL)
        self.wfile.write(b"0\r\n\r\n")

    def _complete(self, b: dict[str, Any], request_no: int, max_tokens: int) -> None:
        text = "".join(WORDS[i % len(WORDS)] + " " for i in range(max_tokens))
        reported = max_tokens + (b["usage_offset"] if b["usage"] == "wrong" else 0)
        payload: dict[str, Any] = {"id": f"chatcmpl-sim-{request_no}", "object": "chat.completion",
                                   "model": b["model_id"],
                                   "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                                "finish_reason": "length"}]}
        if b["usage"] != "missing":
            payload["usage"] = {"prompt_tokens": b["prompt_tokens"], "completion_tokens": reported,
                                "total_tokens": b["prompt_tokens"] + reported}
        self._json(200, payload)


def launch_speed(speeds: list[float], seed: int, launch: int) -> float:
    """The speed the ``launch``-th launch (0 first) of an arm draws."""
    return random.Random(f"{seed}:{launch}").choice(speeds)


def _next_launch(counter: Path) -> int:
    """How many launches this arm had before this one (a counter in its directory, bumped once per start)."""
    try:
        done = int(counter.read_text() or 0)
    except (OSError, ValueError):
        done = 0
    with contextlib.suppress(OSError):
        counter.write_text(str(done + 1))
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sim_server", description="bakeoff's misbehaving test engine")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--behaviour", default="{}", help="JSON object of behaviour keys (see module docstring)")
    parser.add_argument("--api-key-env", default=None, help="name of the environment variable holding the key")
    parser.add_argument("--launch-speeds", default=None, help="comma-separated speeds one launch draws from")
    parser.add_argument("--launch-seed", type=int, default=0)
    parser.add_argument("--launch-counter", default="sim-launches", help="file counting this arm's launches")
    args = parser.parse_args(argv)
    behaviour = {**DEFAULTS, **json.loads(args.behaviour)}
    if args.launch_speeds:
        speeds = [float(x) for x in args.launch_speeds.split(",")]
        behaviour["launch_speed"] = launch_speed(speeds, args.launch_seed, _next_launch(Path(args.launch_counter)))
    _log(f"I sim: starting on {args.host}:{args.port} (pid {os.getpid()})")
    if behaviour["crash_on_start"]:
        _log(f"E sim: {behaviour['crash_on_start']}")
        return int(behaviour["crash_exit_code"])
    api_key = None
    if behaviour["require_api_key"]:
        api_key = os.environ.get(args.api_key_env or "")
        if not api_key:
            _log(f"E sim: an API key is required but ${args.api_key_env} is not set")
            return 1
    try:
        server = _Server((args.host, args.port), _Handler)
    except OSError as exc:
        _log(f"E sim: couldn't bind {args.host}:{args.port}: {exc.strerror}")
        return 1
    server.behaviour, server.api_key = behaviour, api_key
    server.ready_at = time.monotonic() + behaviour["boot_delay_s"]
    _log(f"I sim: listening on http://{args.host}:{args.port}")
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
