"""Structured requests, piece by piece: the prompt's declaration (OpenAI's shapes, a schema that is a schema),
the body sent, the client's assembly of streamed tool calls, validity by jsonschema, stalls, drafting tallies,
the per-arm summary, and the refusal of an engine that declares no structured requests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from sse_fakes import ev, paced_client

from bakeoff.core.analysis.structured import StructuredArm, drafting_state, summarize_structured, wilson
from bakeoff.core.common.errors import CapabilityNotSupported, ConfigError
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.config.prompts import STRUCTURED_PROMPTS
from bakeoff.core.config.schema import Arm, Prompt, Structured, Workload
from bakeoff.core.engine.client import Event, StreamResult, stream_chat
from bakeoff.core.engine.registry import load_engine
from bakeoff.core.measure.definitions import build_request
from bakeoff.core.measure.judge import stop_judging
from bakeoff.core.measure.structured import DraftTally, answer_problem, stamp_structured
from bakeoff.core.reports.model import RunSummary
from bakeoff.core.reports.tables import sections
from bakeoff.core.reports.verdict import verdict_of
from bakeoff.core.results.sample import Sample
from bakeoff.core.run.plan import plan_run

ORDER, WEATHER = STRUCTURED_PROMPTS["json_schema"], STRUCTURED_PROMPTS["tool_call"]


def _result(text: str = "", calls: list[dict[str, Any]] | None = None, times_ms: list[float] | None = None
            ) -> StreamResult:
    times = times_ms or [0.0, 10.0]
    events = [Event(int(t * 1e6), i, "x", None) for i, t in enumerate(times)]
    return StreamResult(t_send_ns=0, events=events, text=text, content=text, tool_calls=calls or [])


def _call(name: str, arguments: str) -> dict[str, Any]:
    return {"id": "c1", "name": name, "arguments": arguments}


def test_a_json_answer_is_valid_only_when_it_parses_and_matches_the_schema() -> None:
    good = {"customer": "Ada Lovelace", "items": [{"name": "notebook", "quantity": 3, "unit_price": 4.5}]}
    assert answer_problem(ORDER, _result(json.dumps(good))) is None
    assert answer_problem(ORDER, _result(' {"customer": "Ada"')).startswith("not JSON")  # type: ignore[union-attr]
    bad = {**good, "items": [{"name": "notebook", "quantity": "three", "unit_price": 4.5}]}
    why = answer_problem(ORDER, _result(json.dumps(bad)))
    assert why is not None and "$.items[0].quantity" in why and "'three' is not of type 'integer'" in why
    why = answer_problem(ORDER, _result(json.dumps({"customer": "Ada"})))
    assert why is not None and "'items' is a required property" in why


def test_a_tool_call_is_valid_only_when_it_names_a_declared_tool_with_valid_arguments() -> None:
    assert answer_problem(WEATHER, _result(calls=[_call("get_weather", '{"city": "Lisbon", "unit": "celsius"}')])) \
        is None
    assert "no tool call" in str(answer_problem(WEATHER, _result("It is sunny in Lisbon.")))
    assert "not a declared tool" in str(answer_problem(WEATHER, _result(calls=[_call("get_news", "{}")])))
    assert "'kelvin' is not one of" in str(answer_problem(
        WEATHER, _result(calls=[_call("get_weather", '{"city": "Lisbon", "unit": "kelvin"}')])))
    assert "not JSON" in str(answer_problem(WEATHER, _result(calls=[_call("get_weather", '{"city": ')])))
    named = WEATHER.model_copy(update={"tool_choice": {"type": "function", "function": {"name": "get_time"}}})
    assert "tool_choice names 'get_time'" in str(answer_problem(
        named, _result(calls=[_call("get_weather", '{"city": "Lisbon", "unit": "celsius"}')])))


def test_the_client_assembles_streamed_tool_calls_and_counts_their_tokens() -> None:
    def delta(d: dict[str, Any], finish: str | None = None) -> bytes:
        return ev({"id": "x", "choices": [{"index": 0, "delta": d, "finish_reason": finish}]})

    body = b"".join([
        delta({"role": "assistant", "tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                                    "function": {"name": "get_weather", "arguments": ""}}]}),
        delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
        delta({"tool_calls": [{"index": 0, "function": {"arguments": '"Lisbon", "unit": "celsius"}'}}]}),
        delta({}, "tool_calls"),
        ev({"id": "x", "choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 3}}), ev("[DONE]")])
    result = stream_chat(paced_client(body), {"max_tokens": 64}, 5)
    assert result.error is None and result.finish_reason == "tool_calls"
    assert result.tool_calls == [_call("get_weather", '{"city": "Lisbon", "unit": "celsius"}')]
    assert sum(1 for e in result.events if e.content) == 3  # each fragment is a token-bearing event
    assert answer_problem(WEATHER, result) is None


def test_a_hostile_tool_call_index_is_an_error_not_a_huge_list() -> None:
    body = ev({"id": "x", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 10**9}]}}]}) + ev("[DONE]")
    result = stream_chat(paced_client(body), {"max_tokens": 8}, 5)
    assert result.error is not None and "index" in result.error and result.tool_calls == []


def test_a_structured_request_carries_its_constraint_and_is_not_forced_to_a_length() -> None:
    adapter = load_engine("llamacpp")
    arm = Arm.model_validate({"name": "a", "engine": "llamacpp", "model": "m.gguf"})
    w = Workload(max_tokens=64)  # fixed_length is on by default
    mode = w.sampling_modes()["greedy"]
    body = build_request(arm, adapter, w, WEATHER, mode, "m")
    assert body["tools"][0]["function"]["name"] == "get_weather" and body["tool_choice"] == "required"
    assert "ignore_eos" not in body and "response_format" not in body
    body = build_request(arm, adapter, w, ORDER, mode, "m")
    assert body["response_format"]["json_schema"]["schema"]["required"] == ["customer", "items"]
    assert "ignore_eos" not in body and body["max_tokens"] == 64
    w = Workload(max_tokens=64, structured=Structured(max_tokens=300))
    assert build_request(arm, adapter, w, ORDER, mode, "m")["max_tokens"] == 300
    plain = build_request(arm, adapter, w, Prompt(name="p", messages=[{"role": "user", "content": "hi"}]), mode, "m")
    assert plain["ignore_eos"] is True and "tools" not in plain


def test_a_schema_that_is_not_a_json_schema_is_refused_naming_where() -> None:
    text = ("arms: [{name: a, engine: sim, model: sim}]\nworkload:\n  suite:\n    - name: bad\n"
            "      messages: [{role: user, content: hi}]\n"
            "      response_format: {type: json_schema, json_schema: {name: x, schema: {type: 12}}}\n")
    with pytest.raises(ConfigError, match=r"response_format.json_schema.schema.type is not a valid JSON Schema"):
        parse_bakeoff(text)
    with pytest.raises(ConfigError, match="tool_choice needs tools"):
        parse_bakeoff(text.replace("response_format: {type: json_schema, json_schema: {name: x, schema: {type: 12}}}",
                                   "tool_choice: required"))


def test_an_engine_that_declares_no_structured_requests_is_refused_before_launch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from bakeoff.core.engine.pieces import StructuredOutputs
    from bakeoff.engines.exllama import ExllamaAdapter

    monkeypatch.setattr(ExllamaAdapter, "structured", StructuredOutputs())  # an engine that takes none
    text = ("arms: [{name: t, engine: exllama, model: ./m}]\n"
            "workload: {prompts: [prose], structured: {kinds: [tool_call]}}\n")
    with pytest.raises(CapabilityNotSupported, match="does not declare tool_call requests"):
        plan_run(parse_bakeoff(text))


def test_a_vllm_arm_without_a_tool_call_parser_is_refused_before_launch_for_tool_calls_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from bakeoff.engines.vllm import VllmAdapter

    monkeypatch.setattr(VllmAdapter, "preflight", lambda self, arm: None)  # no venv or model needed on paper
    text = ("arms: [{name: v, engine: vllm, model: smollm2EXTRA}]\n"
            "workload: {prompts: [prose], gates: [], structured: {kinds: KINDS}}\n")
    needs = r"arm 'v': vLLM answers tool calls .* \(missing: --enable-auto-tool-choice --tool-call-parser\)"
    with pytest.raises(CapabilityNotSupported, match=needs):
        plan_run(parse_bakeoff(text.replace("EXTRA", "").replace("KINDS", "[json_schema, tool_call]")))
    plan_run(parse_bakeoff(text.replace("EXTRA", "").replace("KINDS", "[json_schema]")))  # schemas need no parser
    with pytest.raises(CapabilityNotSupported, match=r"\(missing: --enable-auto-tool-choice\)"):
        plan_run(parse_bakeoff(text.replace("EXTRA", ", extra_args: [--tool-call-parser, hermes]")
                               .replace("KINDS", "[json_schema, tool_call]")))
    both = ", extra_args: [--enable-auto-tool-choice, --tool-call-parser=hermes]"
    plan_run(parse_bakeoff(text.replace("EXTRA", both).replace("KINDS", "[json_schema, tool_call]")))


def test_a_pause_far_beyond_the_streams_own_gap_is_a_stall_and_a_steady_stream_is_not() -> None:
    rules = Structured(stall_s=1.0, stall_factor=10)
    steady = Sample(arm="a", engine="e", prompt="p", mode="greedy", rep=0)
    stamp_structured(steady, ORDER, _result("{}", times_ms=[0, 20, 40, 60, 80]), rules)
    assert steady.max_gap_s == pytest.approx(0.02) and not steady.flags
    slow = Sample(arm="a", engine="e", prompt="p", mode="greedy", rep=0)  # a slow engine, evenly slow: no stall
    stamp_structured(slow, ORDER, _result("{}", times_ms=[0, 1500, 3000, 4500]), rules)
    assert not slow.flags
    stalled = Sample(arm="a", engine="e", prompt="p", mode="greedy", rep=0)
    stamp_structured(stalled, ORDER, _result("{}", times_ms=[0, 20, 40, 2040, 2060]), rules)
    assert stalled.flags == ["stall: 2.00 s without a token mid-answer (100x the stream's median gap of 20.0 ms)"]
    assert stalled.valid is False  # {} lacks the required keys


def _spec(prompt: str, drafted: int | None, accepted: int | None, kind: Any = None, **kw: Any) -> Sample:
    return Sample(arm=kw.pop("arm", "ngram"), engine="e", prompt=prompt, mode="greedy", rep=kw.pop("rep", 0),
                  drafted=drafted, accepted=accepted, structured=kind,
                  acceptance=None if not drafted else (accepted or 0) / drafted, **kw)


def test_the_tally_flags_collapse_and_silence_only_against_free_text_that_drafted() -> None:
    tally = DraftTally()
    assert tally.judge(_spec("json_order", 0, 0, "json_schema")) is None  # nothing drafted on free text yet
    assert tally.judge(_spec("code", 40, 30)) is None
    assert "drafted 0 under json_schema; free text drafted 40 in 1" in str(tally.judge(
        _spec("json_order", 0, 0, "json_schema")))
    assert "acceptance 10% under tool_call against 75%" in str(tally.judge(_spec("tool", 20, 2, "tool_call")))
    assert tally.judge(_spec("tool", 20, 10, "tool_call")) is None  # lower, not collapsed


def test_validity_interval_and_the_less_valid_gate() -> None:
    lo, hi = wilson(10, 10)
    assert hi == 1.0 and 0.6 < lo < 0.8  # never the point [1, 1] a bootstrap of ten 1s would give
    samples = [_spec("json_order", None, None, "json_schema", arm="base", rep=r, valid=True, decode_tps=10.0)
               for r in range(4)]
    samples += [_spec("json_order", None, None, "json_schema", arm="fast", rep=r, valid=r < 2, decode_tps=20.0,
                      invalid_reason=None if r < 2 else "not JSON") for r in range(4)]
    out = summarize_structured(samples, ["base", "fast"], "base")
    assert out is not None
    fast = out.arms["fast"]
    assert (fast.requests, fast.valid, fast.validity_rate, fast.less_valid_than_baseline) == (4, 2, 0.5, True)
    assert fast.vs_baseline is not None and fast.vs_baseline.n == 2  # paired on requests valid on both sides
    assert fast.invalid_reasons == ["not JSON"] and out.arms["base"].less_valid_than_baseline is False


def _tallied(arm: str, answers: list[tuple[Any, int, int]]) -> list[Sample]:
    """One free-text answer drafting 40 (38 accepted), then the structured ones, flagged as a run flags them."""
    tally, out = DraftTally(), []
    for rep, (kind, drafted, accepted) in enumerate([(None, 40, 38), *answers]):
        sample = _spec("code" if kind is None else str(kind), drafted, accepted, kind, arm=arm, rep=rep, valid=True)
        if flag := tally.judge(sample):
            sample.flags.append(flag)
        out.append(sample)
    return out


def _reported(out: Any, arm: str) -> tuple[str, list[str]]:
    """The arm's verdict line and its structured table row, as every report format prints them."""
    summary = RunSummary(run_id="r", name="n", baseline=None, structured=out)
    (line,) = [x for x in verdict_of(summary).structured if x.startswith(f"{arm}:")]
    (table,) = [t for t in sections(summary) if t.id == "structured"]
    (row,) = [r for r in table.rows if r[0] == arm]
    return line, row


def test_an_ngram_arm_with_nothing_to_match_on_one_grammar_request_is_engaged_with_its_counts() -> None:
    """The JSON-grammar run that read ``drafting_engaged: false``: one answer had no n-gram yet, the rest drafted."""
    samples = _tallied("ngram", [("json_schema", 0, 0), ("json_schema", 40, 40), ("json_schema", 40, 40),
                                 ("json_schema", 35, 35)])
    assert sum(bool(s.flags) for s in samples) == 1  # the tally still flags the one that drafted nothing
    out = summarize_structured(samples, ["ngram"], None, methods={"ngram": "ngram"})
    assert out is not None
    arm = out.arms["ngram"]
    assert (arm.drafting, arm.drafted_requests, arm.structured_requests, arm.nothing_to_match) == ("engaged", 3, 4, 1)
    assert arm.drafting_engaged is True and arm.drafts_structured == 115 and arm.acceptance_structured == 1.0
    assert arm.drafting_by_kind["json_schema"].drafting == "engaged"
    words = "engaged: drafted on 3 of 4 structured requests (1 with nothing to match)"
    line, row = _reported(out, "ngram")
    assert line.endswith(f"drafting {words}; 115 draft tokens under the grammar at 100% acceptance")
    assert words in row and "DISENGAGED" not in " ".join(row)


def test_a_model_drafter_silent_on_every_grammar_request_is_disengaged_and_partly_silent_is_partly_engaged(
) -> None:
    silent = _tallied("draft", [("json_schema", 0, 0), ("tool_call", 0, 0), ("json_schema", 0, 0)])
    some = _tallied("eagle", [("json_schema", 30, 25), ("tool_call", 0, 0)])
    out = summarize_structured(silent + some, ["draft", "eagle"], None, methods={"draft": "draft", "eagle": "eagle3"})
    assert out is not None
    draft, eagle = out.arms["draft"], out.arms["eagle"]
    assert (draft.drafting, draft.drafted_requests, draft.structured_requests, draft.drafting_engaged) == \
        ("disengaged", 0, 3, False)
    words = "disengaged: drafted on 0 of 3 structured requests (json_schema 0 of 2, tool_call 0 of 1)"
    line, row = _reported(out, "draft")
    assert line.endswith(f"drafting {words}; 0 draft tokens under the grammar, 40 on free text") and words in row
    # a model drafter always has a guess: its silent request was switched off, not short of a match
    assert (eagle.drafting, eagle.drafted_requests, eagle.nothing_to_match) == ("partly engaged", 1, 0)
    assert eagle.drafting_by_kind["tool_call"].drafting == "disengaged"
    assert "partly engaged: drafted on 1 of 2 structured requests (json_schema 1 of 1, tool_call 0 of 1)" in \
        _reported(out, "eagle")[0]


def test_drafting_states_from_counts_and_an_older_summary_still_reads() -> None:
    assert drafting_state(0, 4, 0, lookup=True) is None  # silent on free text too: nothing to judge
    assert drafting_state(0, 4, 40, lookup=True) == "disengaged"  # an n-gram drafter silent on every one
    assert drafting_state(1, 4, 40, lookup=True) == "engaged"
    assert drafting_state(4, 4, 40, lookup=False, collapsed=1) == "partly engaged"  # acceptance collapsed on one
    old = StructuredArm.model_validate({"requests": 2, "valid": 2, "drafting_engaged": False, "disengaged": 2})
    assert old.drafting == "disengaged" and old.drafting_words() == "disengaged (2 flagged)"


def _json_prompt(schema: dict[str, Any]) -> Prompt:
    return Prompt.model_validate({"name": "j", "messages": [{"role": "user", "content": "x"}],
                                  "response_format": {"type": "json_schema", "json_schema": {"name": "j",
                                                                                             "schema": schema}}})


def _tool_prompt(**extra: Any) -> Prompt:
    tool = {"type": "function", "function": {"name": "get_x", "parameters": {
        "type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}}}}
    return Prompt.model_validate({"name": "t", "messages": [{"role": "user", "content": "x"}], "tools": [tool],
                                  **extra})


def test_an_answer_nested_deeper_than_the_bound_is_invalid_and_its_sample_kept() -> None:
    deep = "[" * 20_000 + "]" * 20_000
    sample = Sample(arm="a", engine="e", prompt="j", mode="greedy", rep=0)
    stamp_structured(sample, _json_prompt({"type": "array"}), _result(deep), None)
    assert sample.valid is False and "nested deeper than 64 levels" in str(sample.invalid_reason)
    why = answer_problem(_tool_prompt(), _result(calls=[_call("get_x", '{"a": ' + deep + "}")]))
    assert "get_x arguments nested deeper than 64 levels" in str(why)
    assert answer_problem(_json_prompt({"type": "array"}), _result('["]]]]"' + ", []" * 10 + "]")) is None
    recursive = _json_prompt({"type": "array", "items": {"$ref": "#"}})  # recursion that reads into the answer
    assert answer_problem(recursive, _result("[" * 64 + "]" * 64)) is None


def test_an_answer_is_read_as_strict_json_with_integers_of_any_length_up_to_a_bound() -> None:
    number = _json_prompt({"type": "object", "required": ["a"], "properties": {"a": {"type": "number"}}})
    assert "NaN is not a JSON number" in str(answer_problem(number, _result('{"a": NaN}')))
    assert "-Infinity is not a JSON number" in str(answer_problem(number, _result('{"a": -Infinity}')))
    long_int = '{"a": 1' + "0" * 5_000 + "}"
    assert answer_problem(number, _result(long_int)) is None
    small = _json_prompt({"type": "object", "properties": {"a": {"type": "integer", "maximum": 10}}})
    assert "is greater than the maximum of 10" in str(answer_problem(small, _result(long_int)))
    why = answer_problem(number, _result('{"a": 1' + "0" * 10_000 + "}"))
    assert why is not None and "integer of 10,001 digits, over the 10,000" in why and "not JSON" not in why
    huge = _result('"' + "a" * 1_000_000 + '"')
    assert "answer of 1,000,002 characters, over the 1,000,000" in str(answer_problem(_json_prompt({}), huge))


@pytest.fixture
def judging_child() -> Iterator[None]:
    yield
    stop_judging()  # as an arm session's close does


@pytest.mark.usefixtures("judging_child")
def test_a_backtracking_pattern_is_judged_invalid_within_its_time_bound() -> None:
    redos = _json_prompt({"type": "string", "pattern": "^(a+)+$"})
    why = answer_problem(redos, _result('"' + "a" * 34 + '!"'), bound_s=0.3)
    assert why is not None and "schema not judged within 0.3 s" in why
    assert answer_problem(redos, _result('"aaa"')) is None  # a fresh child judges the next answer
    assert "does not match" in str(answer_problem(redos, _result('"aab"')))


@pytest.mark.parametrize(("schema", "said"), [
    ({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}, "'#/$defs/a' loops back without reading into"),
    ({"allOf": [{"$ref": "#"}]}, "allOf[0].$ref '#' loops back"),
    ({"$ref": "#/$defs/missing"}, "schema.$ref '#/$defs/missing' resolves to nothing"),
    ({"$ref": "http://127.0.0.1:9/schema.json"}, "resolves to nothing (bakeoff fetches no remote schema"),
    ({"properties": {"s": {"type": "string", "pattern": "(?<=a+)b"}}}, "schema.properties.s.pattern is not a valid"),
])
def test_a_schema_no_answer_can_be_judged_against_is_refused_at_load_naming_the_field(
        schema: dict[str, Any], said: str) -> None:
    with pytest.raises(ValueError, match=r"response_format\.json_schema\.schema") as caught:
        _json_prompt(schema)
    assert said in str(caught.value)


def test_a_schema_whose_references_resolve_loads_and_judges() -> None:
    tree = _json_prompt({"$ref": "#/$defs/node", "$defs": {"node": {
        "type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}})
    assert answer_problem(tree, _result('{"kids": [{"kids": []}]}')) is None
    assert "is not of type 'array'" in str(answer_problem(tree, _result('{"kids": [{"kids": 1}]}')))


def test_reasoning_deltas_are_kept_apart_from_the_json_answer_judged() -> None:
    body = b"".join([ev({"id": "x", "choices": [{"index": 0, "delta": d}]}) for d in (
        {"reasoning_content": "Let me "}, {"reasoning_content": "think."}, {"content": '{"a"'}, {"content": ": 1"},
        {"content": "}"})] + [ev("[DONE]")])
    result = stream_chat(paced_client(body), {"max_tokens": 16}, 5)
    assert result.content == '{"a": 1}' and result.text == 'Let me think.{"a": 1}'  # reasoning is decode too
    schema = {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}}
    assert answer_problem(_json_prompt(schema), result) is None


def test_a_single_tool_call_streamed_with_a_high_index_is_one_call() -> None:
    body = b"".join([
        ev({"id": "x", "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 3, "id": "c1", "function": {"name": "get_x", "arguments": '{"a"'}}]}}]}),
        ev({"id": "x", "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 3, "function": {"arguments": ": 1}"}}]}}]}),
        ev("[DONE]")])
    result = stream_chat(paced_client(body), {"max_tokens": 16}, 5)
    assert result.tool_calls == [_call("get_x", '{"a": 1}')]
    assert answer_problem(_tool_prompt(tool_choice="required"), result) is None


def test_tool_choice_naming_a_function_not_among_tools_is_refused_at_load() -> None:
    with pytest.raises(ValueError, match=r"tool_choice names 'nope', which is not among tools \(get_x\)"):
        _tool_prompt(tool_choice={"type": "function", "function": {"name": "nope"}})
    assert _tool_prompt(tool_choice={"type": "function", "function": {"name": "get_x"}}).tools
