"""Streaming chat client: timestamps every SSE event and turns a stream into a Sample's accounting.

Tokens are counted from ``usage`` (``stream_options.include_usage``), never from events: vLLM packs
every accepted draft token into one event, so event counts read speculative gains as losses. The raw
event timeline is kept in memory only for the accounting below.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any

import httpx
from httpx_sse import SSEError, connect_sse

__all__ = ["Event", "StreamResult", "stream_chat", "account"]


@dataclass
class Event:
    t_ns: int
    content: str
    usage_completion: int | None  # cumulative usage.completion_tokens on this event, if any


@dataclass
class StreamResult:
    t_send_ns: int
    t_done_ns: int | None = None
    events: list[Event] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    final: dict[str, Any] | None = None  # last payload carrying usage or finish_reason (engine extras ride here)
    finish_reason: str | None = None
    finish_t_ns: int | None = None  # arrival of the event that carried finish_reason
    text: str = ""
    error: str | None = None
    flags: list[str] = field(default_factory=list)
    http_status: int | None = None


def _delta_text(choice: dict[str, Any]) -> str:
    delta = choice.get("delta") or {}
    return (delta.get("content") or "") + (delta.get("reasoning_content") or delta.get("reasoning") or "")


def _usage_count(payload: dict[str, Any]) -> int | None:
    usage = payload.get("usage")
    return usage.get("completion_tokens") if isinstance(usage, dict) else None


def stream_chat(http: httpx.Client, body: dict[str, Any], timeout_s: float,
                chunk_count: Callable[[dict[str, Any]], int | None] = _usage_count) -> StreamResult:
    """POST a streaming chat completion and record the arrival time of every event.

    Never raises for request failures: errors (HTTP status, reset, stall, malformed SSE) land in
    ``StreamResult.error`` so the caller stores them as an error sample.

    :param chunk_count: reads the cumulative generated-token count a payload carries (the adapter's
        ``chunk_token_count``: usage, or engine timings such as llama.cpp's ``timings_per_token``).
    """
    timeout = httpx.Timeout(timeout_s, connect=10.0)
    result = StreamResult(t_send_ns=time.perf_counter_ns())
    deadline = result.t_send_ns + int(timeout_s * 1e9)
    try:
        with connect_sse(http, "POST", "/v1/chat/completions", json=body, timeout=timeout) as source:
            result.http_status = source.response.status_code
            if source.response.status_code != 200:
                source.response.read()
                result.error = f"HTTP {source.response.status_code}: {source.response.text[:300]}"
                return result
            for sse in source.iter_sse():
                t = time.perf_counter_ns()
                if sse.data.strip() == "[DONE]":
                    break  # OpenAI's terminator; llama.cpp's native endpoint has none, chat does
                try:
                    payload = json.loads(sse.data)
                except json.JSONDecodeError:
                    result.flags.append("malformed-sse")
                    result.error = f"malformed SSE data: {sse.data[:120]!r}"
                    return result
                if "error" in payload and not payload.get("choices"):
                    result.error = f"engine error in stream: {json.dumps(payload['error'])[:300]}"
                    return result
                usage = payload.get("usage")
                choices = payload.get("choices") or []
                text = "".join(_delta_text(c) for c in choices)
                for c in choices:
                    if c.get("finish_reason"):
                        result.finish_reason = c["finish_reason"]
                        result.finish_t_ns = t
                        result.final = payload
                if usage:
                    result.usage = usage
                    result.final = payload
                result.text += text
                result.events.append(Event(t, text, chunk_count(payload)))
                if t > deadline:
                    result.error = f"request exceeded {timeout_s:g} s"
                    result.flags.append("timeout")
                    return result
    except httpx.TimeoutException as exc:
        result.error = f"timeout after {timeout_s:g} s without data ({type(exc).__name__})"
        result.flags.append("timeout")  # the protocol stops an engine that stalls
    except (httpx.HTTPError, SSEError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        result.t_done_ns = time.perf_counter_ns()
    return result


def account(result: StreamResult, *, usage_per_chunk: bool, one_token_per_event: bool) -> dict[str, Any]:
    """The accounting of DESIGN.md for one stream, as Sample fields.

    An event is token-bearing when cumulative usage rose on it (engines with per-chunk usage) or,
    otherwise, when it carried output text. N always comes from the final usage.
    """
    out: dict[str, Any] = {"flags": list(result.flags), "events": len(result.events)}
    usage = result.usage or {}
    n = usage.get("completion_tokens")
    out["usage_present"] = n is not None
    out["completion_tokens"] = n
    out["prompt_tokens"] = usage.get("prompt_tokens")
    out["cached_tokens"] = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    out["finish_reason"] = result.finish_reason
    out["output_sha256"] = hashlib.sha256(result.text.encode()).hexdigest()
    out["output_chars"] = len(result.text)
    out["e2e_s"] = (result.t_done_ns - result.t_send_ns) / 1e9 if result.t_done_ns else None

    per_event: list[tuple[int, int]] = []  # (t_ns, tokens in event)
    have_chunk_usage = usage_per_chunk and any(e.usage_completion is not None for e in result.events)
    if have_chunk_usage:
        prev = 0
        for e in result.events:
            if e.usage_completion is None:
                continue
            if e.usage_completion > prev:
                per_event.append((e.t_ns, e.usage_completion - prev))
            prev = max(prev, e.usage_completion)
    else:
        per_event = [(e.t_ns, 1) for e in result.events if e.content]
        # A natural stop: usage counts the end-of-generation token, which is streamed with no text on
        # the finish event. Count it there, so the decode window ends where the server's does.
        if (one_token_per_event and result.finish_reason == "stop" and n == len(per_event) + 1
                and result.finish_t_ns is not None):
            per_event.append((result.finish_t_ns, 1))
    out["token_events"] = len(per_event)
    if not per_event:
        if result.error is None:
            out["flags"].append("no-output-tokens")
        return out

    counts = [c for _, c in per_event]
    if have_chunk_usage:
        n_first, source = counts[0], "usage"
        out["max_tokens_per_event"] = max(counts)
    elif one_token_per_event:
        n_first, source = 1, "one-per-event"
        out["max_tokens_per_event"] = 1
    else:
        # Text-bearing events may hold several tokens; with no per-chunk usage the best estimate is the mean.
        n_first, source = max(1, round((n or len(per_event)) / len(per_event))), "estimated"
        out["flags"].append("n_first-estimated")
    out["n_first"], out["n_first_source"] = n_first, source
    if n is not None:
        out["mean_tokens_per_event"] = n / len(per_event)
        if (one_token_per_event or have_chunk_usage) and sum(counts) != n and result.error is None:
            out["flags"].append(f"token-events-mismatch: events carry {sum(counts)} tokens, usage says {n}")
    else:
        out["flags"].append("usage-missing")

    t_first, t_last = per_event[0][0], per_event[-1][0]
    out["ttft_s"] = (t_first - result.t_send_ns) / 1e9
    decode_s = (t_last - t_first) / 1e9
    out["decode_s"] = decode_s
    if decode_s > 0:
        if n is not None:
            out["decode_tps"] = (n - n_first) / decode_s
        out["event_count_decode_tps"] = (len(per_event) - 1) / decode_s
    uncached = out["prompt_tokens"]
    if uncached is not None and out["cached_tokens"]:
        uncached -= out["cached_tokens"]
    if uncached and out["ttft_s"]:
        out["prefill_tps"] = uncached / out["ttft_s"]
    return out
