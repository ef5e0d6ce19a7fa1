"""Counts that must hold together on every sample, whoever reported them (issue 33, item 1).

Engines have shipped counters that lie under speculation: usage reporting the whole budget while fewer tokens
were streamed, reasoning tokens above completion tokens, accepted drafts above the tokens predicted. usage and
an engine's per-chunk counts can come from the same wrong counter, so each check here sets two independent
numbers side by side and a sample that breaks one is flagged, quoting both counts:

- ``count-witness-mismatch``: usage's completion_tokens against the tokens the stream itself named one by one
  (token ids or logprobs entries, where the engine sent them);
- ``counter-invariant``: reasoning ≤ completion; accepted ≤ completion − 1 (the first token of a request is
  never a draft's); accepted ≤ drafted.

A flagged sample stays stored, but enters no statistic (core/analysis/stats.py EXCLUDING_FLAGS).
"""

from __future__ import annotations

from typing import Any

__all__ = ["COUNTER_INVARIANT", "COUNT_WITNESS_MISMATCH", "counter_flags", "reasoning_tokens", "witness_flag"]

COUNT_WITNESS_MISMATCH = "count-witness-mismatch"
COUNTER_INVARIANT = "counter-invariant"


def witness_flag(completion: int | None, witnessed: int | None, source: str | None,
                 finish_reason: str | None) -> str | None:
    """usage against the tokens the stream delivered, or None when they agree (or there is no witness).

    A natural stop may count its end-of-generation token in usage without streaming it: one more is allowed.
    """
    if completion is None or witnessed is None:
        return None
    if completion == witnessed or (finish_reason == "stop" and completion == witnessed + 1):
        return None
    return (f"{COUNT_WITNESS_MISMATCH}: usage says {completion} completion tokens, the stream delivered "
            f"{witnessed} ({source})")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def reasoning_tokens(usage: dict[str, Any] | None) -> int | None:
    details = (usage or {}).get("completion_tokens_details")
    return _int(details.get("reasoning_tokens")) if isinstance(details, dict) else None


def counter_flags(completion: int | None, reasoning: int | None, accepted: int | None,
                  drafted: int | None) -> list[str]:
    """Every counter invariant the counts break, each quoting both sides."""
    out = []
    if completion is not None and reasoning is not None and reasoning > completion:
        out.append(f"{COUNTER_INVARIANT}: reasoning_tokens {reasoning} > completion_tokens {completion}")
    if completion is not None and accepted is not None and completion >= 1 and accepted > completion - 1:
        out.append(f"{COUNTER_INVARIANT}: accepted {accepted} > completion_tokens {completion} - 1")
    if accepted is not None and drafted is not None and accepted > drafted:
        out.append(f"{COUNTER_INVARIANT}: accepted {accepted} > drafted {drafted}")
    return out
