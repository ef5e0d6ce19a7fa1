"""FAULTS-3 structured-output validation (N1-N7): answers and schemas that must be judged, never crash or hang.

Each probe runs ``bakeoff run`` (or ``check``) on one structured prompt against a mode of the hostile server
registered here (``f3s_*``): an answer nested 20,000 deep, a pattern that backtracks, reasoning deltas before
the JSON, NaN, a 5,001-digit integer, a lone tool call streamed with index 3; or a schema no answer can be
judged against ($ref loop, $ref to nowhere, remote $ref) and a tool_choice naming no declared tool, which must
be refused at load (exit 2) naming the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fault_probes import Outcome, Probe, config_error, ran, samples_of
from hostile_server import Reply, chat_mode, chunk, send_stream, sse, usage, usage_chunk

DEEP = "[" * 20_000 + "]" * 20_000
TOOL = {"type": "function", "function": {"name": "get_x", "parameters": {
    "type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}}}}
OBJECT_A = {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}}
NUMBER_A = {"type": "object", "required": ["a"], "properties": {"a": {"type": "number"}}}


def _deltas(r: Reply, deltas: list[dict[str, Any]], finish: str = "stop") -> list[bytes]:
    events = [sse({**chunk(r.model), "choices": [{"index": 0, "delta": d, "finish_reason": None}]}) for d in deltas]
    events.append(sse(chunk(r.model, None, finish)))
    return [*events, sse(usage_chunk(r, usage(len(deltas)))), sse("[DONE]")]


def _thirds(text: str) -> list[str]:
    """The answer in three deltas: a decode window to time, as a real engine's would have."""
    n = max(1, len(text) // 3)
    return [text[:n], text[n:2 * n], text[2 * n:]]


def _content_mode(name: str, text: str) -> None:
    async def handler(r: Reply) -> None:
        await send_stream(r, _deltas(r, [{"content": p} for p in _thirds(text)]))
    chat_mode(name)(handler)


def _tool_mode(name: str, index: int, arguments: str) -> None:
    async def handler(r: Reply) -> None:
        first = {"index": index, "id": "c1", "type": "function", "function": {"name": "get_x", "arguments": ""}}
        rest = [{"index": index, "function": {"arguments": p}} for p in _thirds(arguments)]
        await send_stream(r, _deltas(r, [{"tool_calls": [c]} for c in (first, *rest)], "tool_calls"))
    chat_mode(name)(handler)


_content_mode("f3s_deep", DEEP)
_content_mode("f3s_valid", '{"a": 1}')
_content_mode("f3s_redos", '"' + "a" * 34 + '!"')
_content_mode("f3s_nan", '{"a": NaN}')
_content_mode("f3s_hugeint", '{"a": 1' + "0" * 5_000 + "}")
_tool_mode("f3s_deep_args", 0, '{"a": ' + DEEP + "}")
_tool_mode("f3s_index_jump", 3, '{"a": 1}')
_tool_mode("f3s_tool_ok", 0, '{"a": 1}')


@chat_mode("f3s_reasoning")
async def _reasoning(r: Reply) -> None:
    await send_stream(r, _deltas(r, [{"reasoning_content": "Let me "}, {"reasoning_content": "think."},
                                     {"content": '{"a"'}, {"content": ": 1"}, {"content": "}"}]))


def _file(url: str, prompt: dict[str, Any]) -> str:
    """One attached arm and a suite of one structured prompt (the review's JS(S) and its tool-call twin)."""
    suite = [{"name": "j", "kind": "structured", "messages": [{"role": "user", "content": "x"}], **prompt}]
    return (f"arms: [{{name: base, engine: openai, url: '{url}'}}]\n"
            f"workload: {{suite: {json.dumps(suite)}, max_tokens: 16, reps: 1, warmup: 0, gates: [],"
            " request_timeout_s: 5}\n")


def _json_prompt(schema: dict[str, Any]) -> dict[str, Any]:
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "j", "schema": schema}}}


def _tool_prompt(choice: Any = "required") -> dict[str, Any]:
    return {"tools": [TOOL], "tool_choice": choice}


def judged(url: str, prompt: dict[str, Any], valid: bool, said: str = "") -> Probe:
    """The run ends (within the probe's bound, exit 0), its one structured sample kept and judged as expected."""
    def probe(t: Path) -> Outcome:
        (t / "b.yaml").write_text(_file(url, prompt))
        o = ran(t, ["run", "b.yaml", "--out", "runs"])
        rows = [r for r in samples_of(t / "runs") if r.get("structured")]
        o.expect(o.rc == 0, f"exit {o.rc}, expected 0 (the answer judged, the sample kept)")
        o.expect(len(rows) == 1, f"{len(rows)} structured samples stored, 1 expected")
        for row in rows[:1]:
            o.expect(row.get("valid") is valid and said in str(row.get("invalid_reason")),
                     f"valid {row.get('valid')}, reason {str(row.get('invalid_reason'))[:120]!r}; expected valid "
                     f"{valid}" + (f" saying {said!r}" if said else ""))
        return o
    return probe


def refused(url: str, prompt: dict[str, Any], said: str) -> Probe:
    """``bakeoff check`` and ``bakeoff run`` both refuse the file (exit 2) naming what is wrong; nothing runs."""
    def probe(t: Path) -> Outcome:
        text = _file(url, prompt)
        (t / "b.yaml").write_text(text)
        checked = ran(t, ["check", "b.yaml"], is_run=False)
        o = config_error(t, text)
        o.defects += checked.defects
        o.expect(checked.rc == 2 and said in checked.output, f"check exit {checked.rc}, expected 2 saying {said!r}: "
                                                             f"{checked.output[-200:]!r}")
        return o.expect(said in o.output, f"run did not say {said!r}: {o.output[-200:]!r}")
    return probe


def probes(srv: Any) -> dict[str, Probe]:
    url = srv.url
    loop = {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}
    return {
        "f3/N1/deep-answer": judged(url("f3s_deep"), _json_prompt({"type": "array"}), False,
                                    "nested deeper than 64 levels"),
        "f3/N1/deep-tool-arguments": judged(url("f3s_deep_args"), _tool_prompt(), False,
                                            "get_x arguments nested deeper than 64 levels"),
        "f3/N2/ref-loop": refused(url("f3s_valid"), _json_prompt(loop), "loops back without reading into the answer"),
        "f3/N2/ref-to-nowhere": refused(url("f3s_valid"), _json_prompt({"$ref": "#/$defs/missing"}),
                                        "'#/$defs/missing' resolves to nothing"),
        "f3/N2/ref-remote": refused(url("f3s_valid"), _json_prompt({"$ref": url("x") + "/schema.json"}),
                                    "bakeoff fetches no remote schema"),
        "f3/N3/pattern-backtracking": judged(url("f3s_redos"), _json_prompt({"type": "string", "pattern": "^(a+)+$"}),
                                             False, "schema not judged within 5 s"),
        "f3/N4/reasoning-apart": judged(url("f3s_reasoning"), _json_prompt(OBJECT_A), True),
        "f3/N5/nan": judged(url("f3s_nan"), _json_prompt(NUMBER_A), False, "NaN is not a JSON number"),
        "f3/N5/integer-5001-digits": judged(url("f3s_hugeint"), _json_prompt(NUMBER_A), True),
        "f3/N6/tool-call-index-3": judged(url("f3s_index_jump"), _tool_prompt(), True),
        "f3/N7/tool-choice-undeclared": refused(url("f3s_tool_ok"), _tool_prompt(
            {"type": "function", "function": {"name": "nope"}}), "tool_choice names 'nope', which is not among tools"),
    }
