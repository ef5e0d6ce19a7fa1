"""Quality gates: short probes every arm must still answer before its speed counts, and spec correctness.

After an arm's timed requests, on its first engine start, each probe in ``workload.gates`` is sent once
under greedy sampling with the arm's own request fields (thinking setting included) but no fixed length.
The raw answers are kept in the arm's record. Scoring happens when a run is summarized: a failed probe
is compared with the arm's reference (the spec-off arm of the same engine and model, else the run's
baseline); when the reference fails too — tiny models do not know arithmetic — the arm is
"same-as-baseline" if it answered what the reference answered (or runs another engine or model), and
"regressed" otherwise.

Spec correctness compares greedy outputs (``arms/<arm>/outputs.jsonl``) of an arm with its spec-off
reference: the fraction identical, and for a mismatch the first diverging position and both continuations.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
from openai.types.chat import ChatCompletion, ChatCompletionToolParam
from pydantic import BaseModel, Field, ValidationError

from .client import stream_chat
from .config import Arm, SamplingMode
from .fairness import read_outputs

__all__ = ["GATE_NAMES", "GateStatus", "Divergence", "SpecCheck", "run_gates", "score_gates", "FAILING",
           "spec_identity", "check_schema", "TOOL"]

GATE_NAMES = ("arithmetic", "factual", "tool_call", "needle", "stream_equality")
FAILING = ("fail", "regressed")
_MAX_TOKENS = 24
_CONTEXT_CHARS = 40  # of each continuation shown after a divergence

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


class GateStatus(BaseModel):
    status: str = Field(description="pass | fail | same-as-baseline | regressed | skipped")
    detail: str = ""
    answer: str | None = Field(None, description="The raw answer (first 500 characters).")


class Divergence(BaseModel):
    point: str
    position: int = Field(description="First differing character of the output text.")
    reference: str
    arm: str


class SpecCheck(BaseModel):
    reference: str
    compared: int
    identical: int
    fraction: float | None
    same_engine: bool = Field(description="False: another engine or model; agreement is reported, not judged.")
    divergences: list[Divergence] = Field(default_factory=list)


def _first_difference(a: str, b: str) -> int:
    """The first character position where ``a`` and ``b`` differ (the shorter length if one is a prefix)."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _chat(http: httpx.Client, body: dict[str, Any], timeout_s: float) -> str:
    """A non-streamed completion's text (content plus any reasoning), validated as an OpenAI ChatCompletion."""
    resp = http.post("/v1/chat/completions", json={**body, "stream": False}, timeout=timeout_s)
    resp.raise_for_status()
    msg = ChatCompletion.model_validate(resp.json()).choices[0].message
    extra = msg.model_extra or {}
    return (msg.content or "") + str(extra.get("reasoning_content") or extra.get("reasoning") or "")


def _products(seed: int) -> list[tuple[int, int]]:
    rng = random.Random(f"gates/arithmetic/{seed}")  # salted: the answers are not in any training set
    return [(rng.randint(12, 49), rng.randint(12, 49)) for _ in range(3)]


def _arithmetic(ask: Any, seed: int) -> tuple[bool, str, str]:
    answers, right = [], 0
    for a, b in _products(seed):
        text = ask(f"What is {a} * {b}? Reply with the number only.")
        answers.append(text)
        right += str(a * b) in text.replace(",", "")
    return right == 3, f"{right}/3 products right ({', '.join(f'{a}*{b}={a * b}' for a, b in _products(seed))})", \
        " | ".join(answers)


def _factual(ask: Any, seed: int) -> tuple[bool, str, str]:
    text = ask("Which gas do green plants take in from the air to make sugar by photosynthesis? "
               "Answer in one short sentence.")
    found = any(k in text.lower() for k in ("carbon dioxide", "co2", "co₂"))
    return found, "key point 'carbon dioxide' " + ("present" if found else "missing"), text


def _needle(ask: Any, seed: int) -> tuple[bool, str, str]:
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
    resp = http.post("/v1/chat/completions", json=body, timeout=timeout_s)
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
    pos = _first_difference(streamed.text, plain)
    return False, (f"differ at character {pos}: stream {streamed.text[pos:pos + _CONTEXT_CHARS]!r} vs "
                   f"non-stream {plain[pos:pos + _CONTEXT_CHARS]!r}"), f"stream: {streamed.text}\n---\n{plain}"


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
    for name in names:
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
            continue
        out[name] = {"passed": bool(passed), "detail": detail, "answer": answer[:500]}
    return out


def _gate_results(records: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return next((r["gates"] for r in records if r.get("gates")), {})


def _server(arm: Arm | None) -> tuple[str | None, str | None, str | None]:
    """What answers an arm's requests: its engine, model and URL (all None for an arm not in the config)."""
    return (arm.engine, arm.model, arm.url) if arm is not None else (None, None, None)


def reference_arm(arm: str, arms: Mapping[str, Arm], baseline: str | None) -> tuple[str | None, bool]:
    """(the arm's reference, same engine and model): the spec-off arm of the same engine and model, else the
    run's baseline; None for the reference itself."""
    cfg = arms.get(arm)
    key = _server(cfg)
    spec_off = [n for n, c in arms.items() if n != arm and _server(c) == key and not c.speculative.enabled]
    if cfg is not None and cfg.speculative.enabled and spec_off:
        ref = baseline if baseline in spec_off else spec_off[0]
        return ref, True
    if baseline is None or baseline == arm:
        return None, True
    return baseline, _server(arms.get(baseline)) == key


def score_gates(records: dict[str, list[dict[str, Any]]], arms: Mapping[str, Arm],
                baseline: str | None) -> dict[str, dict[str, GateStatus]]:
    """Per arm and gate: pass | fail | same-as-baseline | regressed | skipped."""
    raw = {arm: _gate_results(records.get(arm, [])) for arm in arms}
    out: dict[str, dict[str, GateStatus]] = {}
    for arm, gates in raw.items():
        ref, same = reference_arm(arm, arms, baseline)
        scored = {}
        for name, g in gates.items():
            if g.get("passed") is None:
                scored[name] = GateStatus(status="skipped", detail=g.get("detail", ""), answer=g.get("answer"))
                continue
            if g["passed"]:
                scored[name] = GateStatus(status="pass", detail=g["detail"], answer=g.get("answer"))
                continue
            r = raw.get(ref or "", {}).get(name)
            if ref is None or r is None or r.get("passed") is None or r.get("passed"):
                status, detail = "fail", g["detail"] + (f"; {ref} passes" if r and r.get("passed") else "")
            elif not same or r.get("answer") == g.get("answer"):
                status, detail = "same-as-baseline", f"{g['detail']}; {ref} fails too"
            else:
                status, detail = "regressed", f"{g['detail']}; {ref} fails too but answered differently"
            scored[name] = GateStatus(status=status, detail=detail, answer=g.get("answer"))
        out[arm] = scored
    return out


def _is_greedy(mode: str, sampling: Mapping[str, SamplingMode]) -> bool:
    m = sampling.get(mode)
    return (m.temperature if m is not None else 0.0 if mode == "greedy" else 1.0) == 0.0


def spec_identity(run_path: Path, arms: Mapping[str, Arm], baseline: str | None,
                  sampling: Mapping[str, SamplingMode]) -> dict[str, SpecCheck]:
    """Per arm with a reference: how many greedy outputs equal the reference's at the same point.

    :param sampling: the run's sampling modes by name; a mode is greedy when its temperature is 0.
    """
    out: dict[str, SpecCheck] = {}
    outputs = {arm: read_outputs(run_path, arm) for arm in arms}
    for arm in arms:
        ref, same = reference_arm(arm, arms, baseline)
        if ref is None:
            continue
        mine, theirs = outputs[arm], outputs.get(ref, {})
        keys = [k for k in mine if _is_greedy(k[1], sampling) and (k in theirs or _any_pass(k, theirs))]
        if not keys:
            continue
        check = SpecCheck(reference=ref, compared=len(keys), identical=0, fraction=None, same_engine=same)
        for k in sorted(keys, key=str):
            other = theirs.get(k) if k in theirs else _any_pass(k, theirs)
            assert other is not None
            if mine[k] == other:
                check.identical += 1
                continue
            pos = _first_difference(mine[k], other)
            if len(check.divergences) < 5:
                check.divergences.append(Divergence(point=f"{k[0]}/{k[1]} rep {k[2]} pass {k[3]}", position=pos,
                                                    reference=other[pos:pos + _CONTEXT_CHARS],
                                                    arm=mine[k][pos:pos + _CONTEXT_CHARS]))
        check.fraction = check.identical / check.compared
        out[arm] = check
    return out


def _any_pass(key: tuple[Any, ...], outputs: dict[tuple[Any, ...], str]) -> str | None:
    """Greedy output of the reference at the same prompt, mode, depth and length (another rep or pass)."""
    prompt, mode, _rep, _pass, depth, max_tokens = key
    return next((t for k, t in outputs.items() if (k[0], k[1], k[4], k[5]) == (prompt, mode, depth, max_tokens)),
                None)
