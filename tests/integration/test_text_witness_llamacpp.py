"""The second witness on by default (issue 40, item 5): after each request, off the clock, bakeoff counts the
delivered text with llama-server's own tokenizer (``/tokenize``) against ``usage.completion_tokens``.

One llama-server (SmolLM2, started by the test, attached to by both arms): ``direct`` talks to it; ``short`` talks
to it through a loopback proxy that withholds the last 5 content events of every stream and relays the rest,
usage and timings included, so the engine's counters still say the whole answer was delivered. With the default
settings every ``short`` sample is flagged, no ``direct`` one is.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.measure.invariants import TOKENIZE_SOURCE
from bakeoff.core.results.store import RunDir, read_samples
from bakeoff.core.run.plan import plan_run
from bakeoff.core.run.protocol import run_plan

pytestmark = pytest.mark.integration

WITHHELD = 5


def _has_content(line: str) -> bool:
    if not line.startswith("data: ") or line == "data: [DONE]":
        return False
    choices = json.loads(line[6:]).get("choices") or []
    return any((c.get("delta") or {}).get("content") for c in choices)


def _withholding_handler(upstream: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _send(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _forward(self, body: bytes | None) -> None:
            headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")}
            streaming = body is not None and self.path.startswith("/v1/chat/completions") and json.loads(body).get(
                "stream")
            with httpx.Client(timeout=300) as client, client.stream(
                    self.command, upstream + self.path, content=body, headers=headers) as r:
                self.send_response(r.status_code)
                self.send_header("Content-Type", r.headers.get("content-type", "application/json"))
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()
                if not streaming:
                    for chunk in r.iter_raw():
                        if chunk:
                            self._send(chunk)
                else:  # every event relayed as it comes, except the last WITHHELD that carry text
                    held: deque[str] = deque()
                    for line in r.iter_lines():
                        if _has_content(line):
                            held.append(line)
                            if len(held) <= WITHHELD:
                                continue
                            line = held.popleft()
                        if line:
                            self._send(f"{line}\n\n".encode())
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            self.close_connection = True

        def do_GET(self) -> None:
            self._forward(None)

        def do_POST(self) -> None:
            self._forward(self.rfile.read(int(self.headers.get("Content-Length", 0))))

    return Handler


@pytest.fixture
def withholding_proxy(running_llama_server: str) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _withholding_handler(running_llama_server))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_stream_short_of_its_last_tokens_is_flagged_on_every_sample_by_default(
        running_llama_server: str, withholding_proxy: str, tmp_path: Path) -> None:
    cfg = parse_bakeoff(f"""arms:
  - {{name: direct, engine: llamacpp, url: '{running_llama_server}'}}
  - {{name: short, engine: llamacpp, url: '{withholding_proxy}'}}
workload: {{prompts: [code_python, prose], max_tokens: 64, reps: 2, passes: 1, warmup: 0, gates: []}}
""")
    run = RunDir(tmp_path / "run")
    run_plan(plan_run(cfg), run)
    samples = read_samples(run.path)
    direct = [s for s in samples if s.arm == "direct"]
    short = [s for s in samples if s.arm == "short"]
    assert len(direct) == len(short) == 4 and all(s.status == "ok" for s in samples)
    for s in direct:  # the text witness ran and agreed within its slack
        assert s.witness_source == TOKENIZE_SOURCE and s.witness_tokens is not None, s
        assert not any(f.startswith("text-witness-mismatch") for f in s.flags), s.flags
    for s in short:  # usage still says 64 (or the natural stop's count); the text is 5 tokens short
        assert s.completion_tokens == s.server_completion_tokens and s.witness_source == TOKENIZE_SOURCE, s
        [flag] = [f for f in s.flags if f.startswith("text-witness-mismatch")]
        assert f"usage says {s.completion_tokens} completion tokens, the delivered text is" in flag
        assert s.witness_tokens is not None and s.completion_tokens is not None, s
        assert s.completion_tokens - s.witness_tokens >= WITHHELD - 1, s
