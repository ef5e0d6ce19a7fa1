"""Every chat mode of the project's hostile server (tests/fixtures/hostile_server.py) through the stream client:
each ends as a valid sample, a flagged one, or an error sample naming the cause — never a traceback or a hang."""

from __future__ import annotations

import threading

import httpx
import pytest
from hostile_server import CHAT_MODES, HostileServer

from bakeoff.core.engine.client import StreamResult, stream_chat
from bakeoff.core.measure.definitions import account
from bakeoff.engines.llamacpp import LlamaCppAdapter

# these get a 1 s deadline, others 30 s
DEADLINE_MODES = ("silent", "slowloris", "slowloris_nl", "slow_complete", "header_trickle", "infinite")
OK = ("ok", None)
WITNESSED = ("ids_lie", "ids_dup", "ids_withheld", "ids_cumulative")
EXPECTED: dict[str, tuple[str, str | None]] = {  # mode -> (status, flag or error text it must carry)
    **{m: OK for m in ("ok", "badutf8", "comments_only", "crlf", "ids_only", "ids_keepalive", "multiline",
                       "nodone", "split", "timings_ok", "echo_model")},
    "usage_missing": ("ok", "usage-missing"),
    "usage_null": ("ok", "usage-missing"),  # usage.completion_tokens: null is no count at all
    "burst": ("ok", "burst-delivery"),
    "gzip": ("ok", "burst-delivery"),
    **{m: ("error", "malformed-payload") for m in (
        "choices_dict", "content_int", "delta_list", "details_list", "finish_int", "json_list", "json_null",
        "usage_float", "usage_huge", "usage_notdict", "usage_str", "timings_str")},
    **{m: ("error", "usage-impossible") for m in ("cached_over", "usage_neg", "usage_over_max", "usage_zero")},
    **{m: ("error", "no-events") for m in ("close200", "sse_plain_json", "html", "nonstream_json")},
    "http429": ("error", "HTTP 429"), "http500": ("error", "HTTP 500"), "http503": ("error", "HTTP 503"),
    "redirect": ("error", "HTTP 307"), "echo_key": ("error", "HTTP 401"),
    "json_string": ("error", "malformed-sse"),
    "err_in_stream": ("error", "engine error in stream"),
    "reset": ("error", "Error"),
    "silent": ("error", "timeout"), "slowloris": ("error", "timeout"), "slowloris_nl": ("error", "timeout"),
    "slow_complete": ("error", "deadline-exceeded"),
    # FAULTS-2 modes
    "header_trickle": ("error", "timeout"), "infinite": ("error", "deadline-exceeded"),
    **{m: OK for m in ("big_event", "big_event_dashes", "bom", "keepalive_cl", "keepalive_chunked")},
    "two_choices": ("ok", "multiple-choices"), "usage_two_disagree": ("error", "usage-conflict"),
    **{m: ("error", "HTTP 401") for m in ("key_cut", "key_json_escaped", "key_urlencoded", "echo_basic_decoded",
                                          "basic_required")},
    "key_in_finish": ("ok", None),
    # FAULTS-3 modes: the client reads them as sent; what they lie about is caught past the stream, by the count
    # witness (token ids against usage: tests/unit/cli/test_run_outcomes.py) and by a session turn's cache flags
    **{m: OK for m in WITNESSED},
    "cached_all": OK,
}


def test_every_hostile_chat_mode_has_an_expected_outcome() -> None:
    assert set(EXPECTED) == set(CHAT_MODES), "a new hostile mode needs its expected outcome here"


def _stream(url: str, timeout_s: float) -> StreamResult:
    out: list[StreamResult] = []
    with httpx.Client(base_url=url) as http:
        thread = threading.Thread(target=lambda: out.append(
            stream_chat(http, {"max_tokens": 16, "stream": True}, timeout_s, LlamaCppAdapter.reader.chunk_token_count)),
            daemon=True)
        thread.start()
        thread.join(60)
    assert out, "the client hung"
    return out[0]


@pytest.mark.parametrize("mode", sorted(EXPECTED))
def test_hostile_stream(mode: str, hostile_server: HostileServer) -> None:
    status, mark = EXPECTED[mode]
    result = _stream(hostile_server.url(mode), 1.0 if mode in DEADLINE_MODES else 30.0)
    fields = account(result, "engine_per_chunk" if mode.startswith("timings") else "final_usage_only")
    got = "error" if result.error else "ok"
    assert got == status, result.error
    text = " ".join(fields.flags) + " " + (result.error or "")
    if mark is not None:
        assert mark in text
    if status == "ok" and mark != "usage-missing" and mark != "burst-delivery" and mode != "ids_lie":
        assert fields.completion_tokens == 16 and fields.decode_tps is not None and fields.decode_tps > 0
