"""Token accounting from real captured SSE streams (llama.cpp: one token per event; vLLM: packed events)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from bakeoff.core.client import account, stream_chat

FIXTURES = Path(__file__).parent.parent / "fixtures"
VLLM_CAPTURE = Path("/work/shared/engines/captures/vllm/chat_stream_continuous_usage.sse")


def _client(body: bytes, status: int = 200) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers={"content-type": "text/event-stream"})

    return httpx.Client(transport=httpx.MockTransport(handler), base_url="http://engine")


def test_llamacpp_capture_counts_tokens_from_usage() -> None:
    body = (FIXTURES / "llamacpp" / "chat_stream_sse.txt").read_bytes()
    result = stream_chat(_client(body), {"messages": []}, timeout_s=5)
    assert result.error is None
    fields = account(result, usage_per_chunk=False, one_token_per_event=True)
    assert fields["completion_tokens"] == 15
    # 14 text events + the finish event, which carries the stop token usage counts but streams no text
    assert fields["token_events"] == 15
    assert fields["events"] == 17  # role chunk + 14 text chunks + finish chunk + usage chunk
    assert fields["n_first"] == 1 and fields["n_first_source"] == "one-per-event"
    assert fields["cached_tokens"] == 37 and fields["prompt_tokens"] == 38
    assert fields["finish_reason"] == "stop"
    assert fields["flags"] == []
    assert result.final is not None and result.final["timings"]["predicted_n"] == 15


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
    result = stream_chat(_client(_packed_stream()), {}, timeout_s=5)
    fields = account(result, usage_per_chunk=True, one_token_per_event=False)
    assert fields["completion_tokens"] == 8
    assert fields["token_events"] == 3
    assert fields["max_tokens_per_event"] == 5
    assert fields["n_first"] == 1 and fields["n_first_source"] == "usage"
    assert fields["flags"] == []
    # decode counts tokens, an event-counting client counts events: 7 tokens vs 2 events after the first
    assert fields["decode_tps"] / fields["event_count_decode_tps"] == pytest.approx(7 / 2)


def test_real_vllm_capture_if_present() -> None:
    if not VLLM_CAPTURE.exists():
        return
    result = stream_chat(_client(VLLM_CAPTURE.read_bytes()), {}, timeout_s=5)
    fields = account(result, usage_per_chunk=True, one_token_per_event=False)
    assert fields["completion_tokens"] == result.usage["completion_tokens"]  # type: ignore[index]
    assert fields["token_events"] <= fields["completion_tokens"]


def test_missing_usage_is_flagged_not_recounted() -> None:
    body = b'data: {"choices":[{"delta":{"content":"x"}}]}\n\ndata: {"choices":[{"delta":{"content":"y"}}]}\n\ndata: [DONE]\n\n'
    fields = account(stream_chat(_client(body), {}, timeout_s=5), usage_per_chunk=False, one_token_per_event=True)
    assert fields["completion_tokens"] is None
    assert "usage-missing" in fields["flags"]
    assert "decode_tps" not in fields  # never silently re-counted from events


def test_usage_disagreeing_with_events_is_flagged() -> None:
    body = (b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
            b'data: {"choices":[],"usage":{"completion_tokens":5,"prompt_tokens":1}}\n\ndata: [DONE]\n\n')
    fields = account(stream_chat(_client(body), {}, timeout_s=5), usage_per_chunk=False, one_token_per_event=True)
    assert any(f.startswith("token-events-mismatch") for f in fields["flags"])


def test_http_error_and_malformed_sse_become_errors() -> None:
    result = stream_chat(_client(b'{"error": "boom"}', status=500), {}, timeout_s=5)
    assert result.error is not None and result.error.startswith("HTTP 500")
    result = stream_chat(_client(b"data: {not json\n\n"), {}, timeout_s=5)
    assert result.error is not None and "malformed-sse" in result.flags
