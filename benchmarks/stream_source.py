"""A fast, exactly paced OpenAI-compatible SSE source: the ground truth for the harness benchmark.

Run it in its own process (``python benchmarks/stream_source.py PORT [TRUTH.jsonl]``) so it never
shares an interpreter lock with the client it measures. The URL path picks the pace:
``/r/<tok_per_s>/<tokens_per_event>/v1/chat/completions`` streams ``max_tokens`` tokens (capped at
4096), ``tokens_per_event`` per event, event ``k`` due ``k × tokens_per_event / tok_per_s`` after the
first. The truth is what the source really did: the monotonic time after each token event's bytes
were handed to the kernel (``perf_counter_ns``: CLOCK_MONOTONIC, the same clock in every process on
Linux). It rides on the final usage chunk as ``truth`` and, when a file is given, is appended to it.

Events are pre-built bytes, one ``sendall`` each, TCP_NODELAY on; waits longer than a millisecond
sleep, shorter ones spin, so pacing holds at 50k tok/s. Binds 127.0.0.1 only.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from pathlib import Path

__all__ = ["serve_forever", "TTFT_S"]

TTFT_S = 0.005  # from request to the first token event
MAX_TOKENS = 4096
_lock = threading.Lock()


SPIN = True  # spin the last half millisecond before each event (exact pacing); False: sleep only


def _wait_until(t_ns: int) -> None:
    while (left := t_ns - time.perf_counter_ns()) > 0:
        if not SPIN:
            time.sleep(left / 1e9)  # looser pacing, same truth: it records when each event really left
        elif left > 1_000_000:
            time.sleep((left - 500_000) / 1e9)


def _event(obj: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _chunk(content: str | None, finish: str | None = None, usage: dict[str, int] | None = None) -> bytes:
    delta = {"content": content} if content is not None else {"role": "assistant"}
    obj: dict[str, object] = {"id": "src", "object": "chat.completion.chunk", "model": "source",
                              "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        obj["usage"] = usage
    return _event(obj)


def _stream(conn: socket.socket, rate: float, per_event: int, n: int, truth_file: Path | None) -> None:
    events = max(1, -(-n // per_event))
    gap_ns = int(per_event / rate * 1e9)
    # every token is the same text, so a client estimating tokens from the text share is exact too
    bodies = [_chunk("tok " * min(per_event, n - k * per_event),
                     usage={"prompt_tokens": 10, "completion_tokens": min(n, (k + 1) * per_event)})
              for k in range(events)]
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                 b"Connection: close\r\n\r\n" + _chunk(None))
    t_start = time.perf_counter_ns() + int(TTFT_S * 1e9)
    sent: list[int] = []
    for k, body in enumerate(bodies):
        _wait_until(t_start + k * gap_ns)
        conn.sendall(body)
        sent.append(time.perf_counter_ns())
    truth = {"n": n, "n_first": min(per_event, n), "events": events, "t_first_ns": sent[0], "t_last_ns": sent[-1],
             "decode_s": (sent[-1] - sent[0]) / 1e9, "rate": rate, "tokens_per_event": per_event,
             "max_late_s": max(t - (t_start + k * gap_ns) for k, t in enumerate(sent)) / 1e9}
    usage = {"prompt_tokens": 10, "completion_tokens": n}
    conn.sendall(_chunk(None, "length") + _event({"id": "src", "object": "chat.completion.chunk", "choices": [],
                                                  "usage": usage, "truth": truth}) + b"data: [DONE]\n\n")
    if truth_file is not None:
        with _lock, truth_file.open("a") as f:
            f.write(json.dumps(truth) + "\n")


def _handle(conn: socket.socket, truth_file: Path | None) -> None:
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = b""
        while b"\r\n\r\n" not in data:
            part = conn.recv(65536)
            if not part:
                return
            data += part
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = (ln.partition(":") for ln in lines[1:])
        length = next((int(v) for k, _, v in headers if k.lower() == "content-length"), 0)
        while len(body) < length:
            body += conn.recv(65536)
        parts = path.strip("/").split("/")
        if method == "GET" and path.endswith("/v1/models"):
            answer = b'{"object":"list","data":[{"id":"source"}]}'
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n" % len(answer) + answer)
            return
        if method != "POST" or len(parts) < 5 or parts[0] != "r":
            conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        request = json.loads(body or b"{}")
        n = max(1, min(int(request.get("max_tokens") or 256), MAX_TOKENS))
        try:
            _stream(conn, float(parts[1]), int(parts[2]), n, truth_file)
        except OSError:
            return  # the client hung up


def serve_forever(port: int, truth_file: Path | None = None, ready: threading.Event | None = None) -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    if ready is not None:
        ready.set()
    print(f"stream source on http://127.0.0.1:{listener.getsockname()[1]}/r/<tok_per_s>/<tokens_per_event>",
          flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_handle, args=(conn, truth_file), daemon=True).start()


if __name__ == "__main__":
    # a third argument "sleep": no spinning (64 streams spinning would take more cores than a small box has)
    SPIN = not (len(sys.argv) > 3 and sys.argv[3] == "sleep")
    serve_forever(int(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2] else None)
