"""Structured requests: is the answer valid, did the stream stall, and did speculation keep drafting.

A structured prompt (``response_format`` with a JSON schema, or ``tools``) is timed like any other by
``ArmRun.measure``; after its stream, :func:`stamp_structured` (called from ``PointRunner.finish``)
records whether the answer is valid and its longest pause, and :class:`DraftTally` (kept per engine start by
the arm session) flags a structured answer that drafted nothing, or accepted far less, where the same engine
drafted on free text. Validation is the ``jsonschema`` library's, never a hand-written one, within the bounds
of core/measure/judge.py.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass
from typing import Any

from ..config.schema import Prompt, Structured
from ..engine.client import StreamResult
from ..results.flags import SPECULATION_DISENGAGED, STALL
from ..results.sample import Sample
from .judge import VALIDATION_S, judged

__all__ = ["COLLAPSE_SHARE", "answer_problem", "gaps", "stamp_structured",
           "DraftTally"]

COLLAPSE_SHARE = 0.2  # structured acceptance below a fifth of the same engine's free-text acceptance: collapsed


def answer_problem(prompt: Prompt, result: StreamResult, bound_s: float = VALIDATION_S) -> str | None:
    """Why the answer to a structured prompt is not valid, or None when it is.

    json_schema: the content (reasoning apart) parses as JSON and validates against the schema. tool_call: at
    least one tool call, each naming a declared tool (the one ``tool_choice`` names, if it names one) with
    arguments that parse to an object valid against that tool's parameters. Every bound passed (depth, size,
    digits, a pattern's time) is a reason, never an exception.
    """
    if prompt.response_format is not None:
        return judged(result.content.strip(), prompt.response_format["json_schema"].get("schema") or {}, bound_s)
    tools = {t["function"]["name"]: t["function"].get("parameters") or {} for t in prompt.tools or []}
    if not result.tool_calls:
        return f"no tool call; answered with text {result.text[:80]!r}"
    choice: Any = prompt.tool_choice  # a named function, or one of the other shapes (no name to check)
    named = choice["function"]["name"] if isinstance(choice, dict) and choice.get("type") == "function" else None
    for call in result.tool_calls:
        name = call["name"]
        if name not in tools:
            return f"calls {name!r}, not a declared tool ({', '.join(tools)})"
        if named is not None and name != named:
            return f"calls {name!r}; tool_choice names {named!r}"
        if why := judged(call["arguments"] or "{}", tools[name], bound_s):
            return f"{name} arguments {why}"
    return None


def gaps(result: StreamResult) -> list[float]:
    """Seconds between consecutive token-bearing network reads, first token to last (mid-answer only)."""
    times = sorted({e.t_ns for e in result.events if e.content})
    return [(b - a) / 1e9 for a, b in itertools.pairwise(times)]


def stamp_structured(sample: Sample, prompt: Prompt, result: StreamResult, rules: Structured | None) -> None:
    """Validity, the longest pause and the stall flag of one structured answer (an errored one keeps None)."""
    sample.structured = "json_schema" if prompt.response_format is not None else "tool_call"
    if sample.status != "ok":
        return
    sample.invalid_reason = answer_problem(prompt, result)
    sample.valid = sample.invalid_reason is None
    rules = rules or Structured()
    pauses = gaps(result)
    if not pauses:
        return
    sample.max_gap_s = longest = max(pauses)
    typical = statistics.median(pauses)
    if longest >= rules.stall_s and longest >= rules.stall_factor * typical:
        sample.flags.append(STALL.line(f"{longest:.2f} s without a token mid-answer "
                                       f"({longest / typical:.0f}x the stream's median gap of {typical * 1e3:.1f} ms)"
                                       if typical > 0 else f"{longest:.2f} s without a token mid-answer"))


@dataclass
class DraftTally:
    """Drafts on free text per engine start, against which each structured answer is judged.

    Plain prompts run before structured ones at every point (the suite lists them first), so a structured
    answer is judged against what the same engine drafted on free text just before it.
    """

    plain_requests: int = 0
    plain_drafted: int = 0
    plain_accepted: int = 0

    def judge(self, sample: Sample) -> str | None:
        """Record a plain sample; for a structured one, the speculation-disengaged flag or None."""
        if sample.status != "ok" or sample.drafted is None:
            return None
        if sample.structured is None:
            self.plain_requests += 1
            self.plain_drafted += sample.drafted
            self.plain_accepted += sample.accepted or 0
            return None
        if not self.plain_drafted:
            return None  # nothing to compare with: this engine drafts nothing on free text either
        plain = f"free text drafted {self.plain_drafted} in {self.plain_requests} request(s) on this engine start"
        if sample.drafted == 0:
            return SPECULATION_DISENGAGED.line(f"drafted 0 under {sample.structured}; {plain}")
        plain_rate = self.plain_accepted / self.plain_drafted
        if sample.acceptance is not None and plain_rate > 0 and sample.acceptance < COLLAPSE_SHARE * plain_rate:
            return SPECULATION_DISENGAGED.line(f"acceptance {sample.acceptance:.0%} under {sample.structured} "
                                              f"against {plain_rate:.0%} on free text ({plain})")
        return None
