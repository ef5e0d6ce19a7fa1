"""Issue 33 item 1: counts that must hold together are checked on every sample, from two witnesses each.

Replayed streams through the real client (a loopback server scripting every byte) and the one place a sample
is made (measure.make_sample): usage that over-reports what the stream delivered, reasoning above completion,
accepted drafts above what was predicted or drafted. A flagged sample enters no statistic.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
from sse_fakes import SSE_HEAD, chunk, ev, serve

from bakeoff.core.analysis.stats import EXCLUDING_FLAGS
from bakeoff.core.config.schema import Arm
from bakeoff.core.engine.client import stream_chat
from bakeoff.core.engine.pieces import ServerStats
from bakeoff.core.measure.definitions import make_sample
from bakeoff.core.results.sample import Sample
from engines.openai.adapter import OpenAICompatAdapter

BODY = {"model": "m", "messages": [], "max_tokens": 16, "stream": True}


def _with_logprobs(text: str) -> dict[str, Any]:
    c = chunk(text)
    c["choices"][0]["logprobs"] = {"content": [{"token": text, "logprob": -0.1, "top_logprobs": []}]}
    return c


def _replay(events: list[bytes], stats: ServerStats | None = None) -> Sample:
    def script() -> Iterator[bytes | float]:
        yield SSE_HEAD
        for e in events:
            yield e
            yield 0.002

    with serve(script) as url, httpx.Client(base_url=url) as http:
        result = stream_chat(http, BODY, timeout_s=10)
    arm = Arm(name="a", engine="openai", url=url)
    return make_sample(arm, OpenAICompatAdapter(), result, stats or ServerStats(), "r", "p", "greedy", 0, 0,
                       None, 0.0)


def _flag(sample: Sample, name: str) -> str | None:
    return next((f for f in sample.flags if f.startswith(name)), None)


def _usage(n: int, **extra: Any) -> bytes:
    return ev({"id": "x", "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": n, **extra}})


def test_usage_that_over_reports_the_delivered_tokens_is_flagged_with_both_counts() -> None:
    """ik_llama.cpp PR #2358's shape: usage says the whole budget (16), the stream delivered 10 tokens."""
    events = [ev(_with_logprobs(f"t{i} ")) for i in range(10)] + [ev(chunk(None, "length")), _usage(16), ev("[DONE]")]
    sample = _replay(events)
    flag = _flag(sample, "count-witness-mismatch")
    assert flag == "count-witness-mismatch: usage says 16 completion tokens, the stream delivered 10 (logprobs)"
    assert "count-witness-mismatch" in EXCLUDING_FLAGS


def test_usage_that_agrees_with_the_delivered_tokens_is_not_flagged() -> None:
    events = [ev(_with_logprobs(f"t{i} ")) for i in range(10)] + [ev(chunk(None, "length")), _usage(10), ev("[DONE]")]
    sample = _replay(events)
    assert sample.status == "ok" and _flag(sample, "count-witness-mismatch") is None
    assert _flag(sample, "counter-invariant") is None


def test_reasoning_count_above_completion_is_a_counter_invariant() -> None:
    """sglang#39826's shape: reasoning_tokens 14 of 10 completion tokens."""
    events = [ev(chunk(f"t{i} ")) for i in range(10)]
    events += [ev(chunk(None, "length")), _usage(10, completion_tokens_details={"reasoning_tokens": 14}), ev("[DONE]")]
    sample = _replay(events)
    assert _flag(sample, "counter-invariant") == "counter-invariant: reasoning_tokens 14 > completion_tokens 10"
    assert "counter-invariant" in EXCLUDING_FLAGS


def test_accepted_drafts_above_completion_minus_one_and_above_drafted_are_flagged() -> None:
    """mlx-vlm PR #2324's shape: more accepted draft tokens than tokens predicted after the first."""
    events = [ev(chunk(f"t{i} ")) for i in range(10)] + [ev(chunk(None, "length")), _usage(10), ev("[DONE]")]
    sample = _replay(events, ServerStats(drafted=9, accepted=12, drafts=4, source="test"))
    flags = [f for f in sample.flags if f.startswith("counter-invariant")]
    assert "counter-invariant: accepted 12 > completion_tokens 10 - 1" in flags
    assert "counter-invariant: accepted 12 > drafted 9" in flags


def test_the_text_witness_allows_retokenizing_slack_and_flags_a_stream_cut_short() -> None:
    from bakeoff.core.measure.invariants import TOKENIZE_SOURCE, tokenize_slack, witness_flag

    assert tokenize_slack(64) == 2 and tokenize_slack(200) == 6  # 3 %, at least 2
    # measured on llama-server b11434 with SmolLM2: the text counted again fell 0-3 short of 200, and a natural
    # stop counted its end token (55 against 54)
    assert witness_flag(200, 197, TOKENIZE_SOURCE, "length") is None
    assert witness_flag(55, 54, TOKENIZE_SOURCE, "stop") is None
    assert witness_flag(64, 62, TOKENIZE_SOURCE, "length") is None
    # the last 5 tokens of a 64-token answer withheld (usage and timings still count them)
    flag = witness_flag(64, 59, TOKENIZE_SOURCE, "length")
    assert flag == ("text-witness-mismatch: usage says 64 completion tokens, the delivered text is 59 tokens by "
                    "the engine's tokenizer (more than 2 apart: a stream cut short, or a model whose output is not "
                    "its tokenizer's own split)")
    assert "text-witness-mismatch" not in EXCLUDING_FLAGS  # said, never excluding: random-weight models split otherwise
    assert witness_flag(64, 70, TOKENIZE_SOURCE, "length") is not None  # more text than usage counts
    # the in-stream witnesses keep their exact rule
    assert witness_flag(64, 63, "token_ids", "length") is not None
