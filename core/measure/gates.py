"""Quality gates: short probes every arm must still answer before its speed counts.

After an arm's timed requests, on its first engine start, each probe in ``workload.gates`` is sent once
under greedy sampling with the arm's own request fields (thinking setting included) but no fixed length.
The raw answers are kept in the arm's record; core/analysis/gates.py scores them when a run is summarized.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from typing import Any

import httpx
from openai.types.chat import ChatCompletion, ChatCompletionToolParam
from pydantic import ValidationError

from ..analysis.gates import CONTEXT_CHARS, first_difference
from ..engine.client import bounded_request, stream_chat

__all__ = ["GATE_NAMES", "TOOL", "check_schema", "run_gates"]

GATE_NAMES = ("arithmetic", "factual", "tool_call", "needle", "stream_equality")
_MAX_TOKENS = 24

TOOL: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"], "additionalProperties": False},
    },
}


def _chat(http: httpx.Client, body: dict[str, Any], timeout_s: float) -> str:
    """A non-streamed completion's text (content plus any reasoning), validated as an OpenAI ChatCompletion."""
    resp = bounded_request(http, "POST", "/v1/chat/completions", json={**body, "stream": False}, timeout_s=timeout_s)
    resp.raise_for_status()
    msg = ChatCompletion.model_validate(resp.json()).choices[0].message
    extra = msg.model_extra or {}
    return (msg.content or "") + str(extra.get("reasoning_content") or extra.get("reasoning") or "")


def _products(seed: int) -> list[tuple[int, int]]:
    rng = random.Random(f"gates/arithmetic/{seed}")  # salted: the answers are not in any training set
    return [(rng.randint(12, 49), rng.randint(12, 49)) for _ in range(3)]


def _arithmetic(ask: Callable[[str], str], seed: int) -> tuple[bool, str, str]:
    answers, right = [], 0
    for a, b in _products(seed):
        text = ask(f"What is {a} * {b}? Reply with the number only.")
        answers.append(text)
        right += str(a * b) in text.replace(",", "")
    return right == 3, f"{right}/3 products right ({', '.join(f'{a}*{b}={a * b}' for a, b in _products(seed))})", \
        " | ".join(answers)


def _factual(ask: Callable[[str], str], seed: int) -> tuple[bool, str, str]:
    text = ask("Which gas do green plants take in from the air to make sugar by photosynthesis? "
               "Answer in one short sentence.")
    found = any(k in text.lower() for k in ("carbon dioxide", "co2", "co₂"))
    return found, "key point 'carbon dioxide' " + ("present" if found else "missing"), text


def _needle(ask: Callable[[str], str], seed: int) -> tuple[bool, str, str]:
    rng = random.Random(f"gates/needle/{seed}")
    code = str(rng.randint(10000, 99999))
    lines = [f"Line {i}: the ferry leaves the harbour at dawn and returns before the evening market."
             for i in range(12)]
    lines.insert(len(lines) // 2, f"The secret code is {code}.")  # depth 50 %
    text = ask("\n".join(lines) + "\n\nWhat is the secret code? Reply with the number only.")
    return code in text, f"code {code} at depth 50 % " + ("found" if code in text else "not found"), text


def check_schema(value: Any, schema: dict[str, Any], where: str = "arguments") -> str | None:
    """Why ``value`` does not match the JSON-schema subset OpenAI tools use (type, properties, required,
    enum, additionalProperties), or None."""
    kinds = {"object": dict, "string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list}
    kind = schema.get("type")
    if kind in kinds and not isinstance(value, kinds[kind]):  # type: ignore[arg-type]
        return f"{where} is {type(value).__name__}, schema wants {kind}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where} is {value!r}, not one of {schema['enum']}"
    if kind == "object":
        props = schema.get("properties", {})
        missing = [k for k in schema.get("required", []) if k not in value]
        if missing:
            return f"{where} lacks required {missing}"
        if schema.get("additionalProperties") is False and (extra := sorted(set(value) - set(props))):
            return f"{where} has unknown keys {extra}"
        for k, v in value.items():
            if k in props and (why := check_schema(v, props[k], f"{where}.{k}")):
                return why
    return None


def _tool_call(http: httpx.Client, base: dict[str, Any], timeout_s: float) -> tuple[bool, str, str]:
    body = {**base, "messages": [{"role": "user", "content": "What is the weather in Paris right now? "
                                                             "Use the tool."}],
            "tools": [TOOL], "tool_choice": "auto", "stream": False}
    resp = bounded_request(http, "POST", "/v1/chat/completions", json=body, timeout_s=timeout_s)
    resp.raise_for_status()
    msg = ChatCompletion.model_validate(resp.json()).choices[0].message
    calls = msg.tool_calls or []
    if not calls:
        return False, "no tool call", msg.content or ""
    fn = getattr(calls[0], "function", None)
    raw = fn.arguments if fn is not None else ""
    if fn is None or fn.name != "get_weather":
        return False, f"called {getattr(fn, 'name', None)!r}, not get_weather", raw
    try:
        args = json.loads(raw)
    except ValueError as exc:
        return False, f"arguments are not JSON ({exc})", raw
    why = check_schema(args, TOOL["function"]["parameters"])
    return why is None, why or "arguments valid JSON matching the schema", raw


def _stream_equality(http: httpx.Client, base: dict[str, Any], timeout_s: float, fields: dict[str, Any]
                     ) -> tuple[bool, str, str]:
    body = {**base, "messages": [{"role": "user", "content": "Write two sentences about a lighthouse."}]}
    streamed = stream_chat(http, {**body, "stream": True, "stream_options": fields.get("stream_options")
                                  or {"include_usage": True}}, timeout_s)
    if streamed.error:
        raise RuntimeError(f"streamed request failed: {streamed.error}")
    plain = _chat(http, body, timeout_s)
    if streamed.text == plain:
        return True, f"identical ({len(plain)} characters)", plain
    pos = first_difference(streamed.text, plain)
    return False, (f"differ at character {pos}: stream {streamed.text[pos:pos + CONTEXT_CHARS]!r} vs "
                   f"non-stream {plain[pos:pos + CONTEXT_CHARS]!r}"), f"stream: {streamed.text}\n---\n{plain}"


def _server_error(resp: httpx.Response) -> str | None:
    """The server's own reason for a refused probe (OpenAI error JSON, else the body's first line)."""
    try:
        body = resp.json()
        err = body.get("error", body) if isinstance(body, dict) else body
        msg = err.get("message") if isinstance(err, dict) else err
    except ValueError:
        msg = resp.text
    text = str(msg or "").strip()
    return text.splitlines()[0][:200] if text else None


def run_gates(http: httpx.Client, names: Sequence[str], model_id: str, request_fields: dict[str, Any],
              stream_options: dict[str, Any], seed: int, timeout_s: float) -> dict[str, dict[str, Any]]:
    """Send each probe once; ``{name: {passed, detail, answer}}`` (``passed`` None: the probe could not run)."""
    base: dict[str, Any] = {"model": model_id, "max_tokens": _MAX_TOKENS, "temperature": 0.0, **request_fields}

    def ask(question: str) -> str:
        return _chat(http, {**base, "messages": [{"role": "user", "content": question}]}, timeout_s)

    out: dict[str, dict[str, Any]] = {}
    timed_out = None  # an engine that gave no whole answer in time once is not asked again (each costs timeout_s)
    for name in names:
        if timed_out is not None:
            out[name] = {"passed": None, "detail": f"could not run: {timed_out}", "answer": None}
            continue
        try:
            if name == "arithmetic":
                passed, detail, answer = _arithmetic(ask, seed)
            elif name == "factual":
                passed, detail, answer = _factual(ask, seed)
            elif name == "needle":
                passed, detail, answer = _needle(ask, seed)
            elif name == "tool_call":
                passed, detail, answer = _tool_call(http, base, timeout_s)
            elif name == "stream_equality":
                passed, detail, answer = _stream_equality(http, base, timeout_s, {"stream_options": stream_options})
            else:
                raise ValueError(f"unknown gate {name!r}")
        except (httpx.HTTPError, ValidationError, ValueError, RuntimeError, IndexError) as exc:
            detail = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            if isinstance(exc, httpx.HTTPStatusError) and (why := _server_error(exc.response)):
                detail += f": {why}"  # e.g. vLLM: tools need --enable-auto-tool-choice and a parser
            out[name] = {"passed": None, "detail": f"could not run: {detail}", "answer": None}
            if isinstance(exc, httpx.TimeoutException):
                timed_out = f"an earlier gate ({name}) got no whole answer within {timeout_s:g} s"
            continue
        out[name] = {"passed": bool(passed), "detail": detail, "answer": answer[:500]}
    return out
