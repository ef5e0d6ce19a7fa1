"""bakeoff's built-in prompt suite, written for this project.

Six kinds that stress speculation differently: code (Python and Bash) repeats identifiers and is easy
to draft; prose and story are hard; math and explanation sit between. ``workload.structured`` adds a
JSON-schema extraction and a tool call (STRUCTURED_PROMPTS).
"""

from __future__ import annotations

from ..common.errors import ConfigError
from ..common.textfmt import did_you_mean
from .schema import Prompt, Workload

__all__ = ["STRUCTURED_PROMPTS", "SUITES", "resolve_prompts"]


def _user(name: str, kind: str, text: str) -> Prompt:
    return Prompt(name=name, kind=kind, messages=[{"role": "user", "content": text}])


DEFAULT_SUITE = [
    _user("code_python", "code", "Write a Python class `LRUCache` with get and put methods in O(1) time, "
          "using a dict and a doubly linked list. Include type hints, docstrings and a short usage example."),
    _user("prose", "prose", "Write a short essay about why small harbour towns change slowly, told through "
          "the daily routine of a ferry operator, a baker and a retired teacher."),
    _user("code_bash", "code", "Write a Bash script that backs up every directory given as an argument into "
          "a dated tar.gz archive, keeps only the seven newest archives per directory, and logs each step."),
    _user("math", "math", "Solve step by step: a tank is filled by two pipes in 6 and 9 hours and drained "
          "by a third in 12 hours. With all three open, how long does it take to fill, and why?"),
    _user("explain", "explanation", "Explain to a new programmer how a hash map works: hashing, buckets, "
          "collisions, load factor and resizing, with a small worked example."),
    _user("story", "story", "Tell a story about a lighthouse keeper who finds a message in a bottle that "
          "appears to be written in her own handwriting."),
]

# Structured prompts (workload.structured): the answer repeats names and numbers of the prompt, as real
# extraction and tool calls do, so n-gram drafting has something to find even under a grammar.
_ORDER_SCHEMA = {
    "type": "object",
    "properties": {
        "customer": {"type": "string"},
        "date": {"type": "string"},
        "items": {"type": "array", "minItems": 1, "maxItems": 3, "items": {  # the grammar closes the list
            "type": "object",
            "properties": {"name": {"type": "string"}, "quantity": {"type": "integer", "minimum": 1},
                           "unit_price": {"type": "number"}},
            "required": ["name", "quantity", "unit_price"], "additionalProperties": False}},
    },
    "required": ["customer", "items"],
    "additionalProperties": False,
}
_WEATHER_TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Current local time in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"], "additionalProperties": False}}},
]
STRUCTURED_PROMPTS = {
    "json_schema": Prompt.model_validate({
        "name": "json_order", "kind": "json_schema",
        "messages": [{"role": "user", "content": "Extract the order as JSON with keys customer, date and items "
                      "(name, quantity, unit_price): Ada Lovelace ordered 3 notebooks at 4.50 each, 2 fountain "
                      "pens at 12.00 each and 1 ink bottle at 6.25 on 2026-11-30."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "order", "schema": _ORDER_SCHEMA}}}),
    "tool_call": Prompt.model_validate({
        "name": "tool_weather", "kind": "tool_call",
        "messages": [{"role": "user", "content": "What is the weather in Lisbon right now, in celsius?"}],
        "tools": _WEATHER_TOOLS, "tool_choice": "required"}),
}

SUITES: dict[str, list[Prompt]] = {"default": DEFAULT_SUITE, "code": [DEFAULT_SUITE[0], DEFAULT_SUITE[2]]}


def resolve_prompts(workload: Workload) -> list[Prompt]:
    """The prompts a workload runs, in suite order.

    :raises ConfigError: unknown suite or prompt name.
    """
    if isinstance(workload.suite, str):
        if workload.suite not in SUITES:
            raise ConfigError(f"workload.suite: unknown suite {workload.suite!r}; built-in: {', '.join(SUITES)}"
                              f"{did_you_mean(workload.suite, SUITES)} (or a list of prompts: "
                              "[{name, messages: [{role: user, content: ...}]}])")
        prompts = SUITES[workload.suite]
    else:
        prompts = workload.suite
    if workload.prompts:
        by_name = {p.name: p for p in prompts}
        missing = [n for n in workload.prompts if n not in by_name]
        if missing:
            raise ConfigError(f"workload.prompts: {', '.join(missing)} not in the suite "
                              f"(has: {', '.join(by_name)}){did_you_mean(missing[0], by_name)}")
        prompts = [by_name[n] for n in workload.prompts]
    prompts = list(prompts)
    if workload.structured is not None:  # after the plain prompts: each pass drafts on free text first
        taken = {p.name for p in prompts}
        prompts += [STRUCTURED_PROMPTS[k] for k in workload.structured.kinds
                    if STRUCTURED_PROMPTS[k].name not in taken]
    return prompts
