"""Counts that must hold together on every sample, whoever reported them (issue 33, item 1).

Engines have shipped counters that lie under speculation: usage reporting the whole budget while fewer tokens
were streamed, reasoning tokens above completion tokens, accepted drafts above the tokens predicted. usage and
an engine's per-chunk counts can come from the same wrong counter, so each check here sets two independent
numbers side by side and a sample that breaks one is flagged, quoting both counts:

- ``count-witness-mismatch``: usage's completion_tokens against the tokens the stream itself named one by one
  (token ids or logprobs entries, where the engine sent them);
- ``text-witness-mismatch``: else against the delivered text counted by the engine's own tokenizer after the
  request (``tokenize``: on by default where the engine has the endpoint). It is said, not excluding: text
  counted again is the tokenizer's own split, and a model with random weights (bakeoff's synthesized drafters
  and targets) emits token sequences that split otherwise, so a mismatch there is the model, not the stream;
- ``counter-invariant``: reasoning ≤ completion; accepted ≤ completion − 1 (the first token of a request is
  never a draft's); accepted ≤ drafted.

A flagged sample stays stored, but enters no statistic (core/analysis/stats.py EXCLUDING_FLAGS).
"""

from __future__ import annotations

import math
from typing import Any

from ..results.flags import COUNT_WITNESS_MISMATCH, COUNTER_INVARIANT, TEXT_WITNESS_MISMATCH

__all__ = ["TOKENIZE_SOURCE", "counter_flags", "reasoning_tokens", "tokenize_slack", "witness_flag"]


TOKENIZE_SOURCE = "tokenize"
# Text counted again is not always the tokens generated: a sampled sequence need not be the tokenizer's own
# split of its text. On llama-server b11434 with SmolLM2 (32 answers of 64 and 200 tokens, greedy and at 0.8)
# the count fell short by 0 to 3 tokens (3 of 200 at 0.8), never over; a natural stop adds its end token.
RETOKENIZE_SHARE, RETOKENIZE_FLOOR = 0.03, 2


def tokenize_slack(completion: int) -> int:
    """Tokens the text witness may differ by without a flag: 3 % of the answer, at least 2."""
    return max(RETOKENIZE_FLOOR, math.ceil(RETOKENIZE_SHARE * completion))


def witness_flag(completion: int | None, witnessed: int | None, source: str | None,
                 finish_reason: str | None) -> str | None:
    """usage against the tokens the stream delivered, or None when they agree (or there is no witness).

    A natural stop may count its end-of-generation token in usage without streaming it: one more is allowed.
    The text witness (``tokenize``) also allows :func:`tokenize_slack` either way: it still catches a stream
    cut short by more (a proxy or engine that drops the last 5 tokens of a 64-token answer).
    """
    if completion is None or witnessed is None:
        return None
    end = 1 if finish_reason == "stop" else 0
    if source == TOKENIZE_SOURCE:
        slack = tokenize_slack(completion)
        if -slack <= completion - witnessed <= slack + end:
            return None
        return TEXT_WITNESS_MISMATCH.line(
            f"usage says {completion} completion tokens, the delivered text is {witnessed} tokens by the engine's "
            f"tokenizer (more than {slack} apart: a stream cut short, or a model whose output is not its "
            "tokenizer's own split)")
    if completion == witnessed or (end and completion == witnessed + 1):
        return None
    return COUNT_WITNESS_MISMATCH.line(f"usage says {completion} completion tokens, the stream delivered "
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
        out.append(COUNTER_INVARIANT.line(f"reasoning_tokens {reasoning} > completion_tokens {completion}"))
    if completion is not None and accepted is not None and completion >= 1 and accepted > completion - 1:
        out.append(COUNTER_INVARIANT.line(f"accepted {accepted} > completion_tokens {completion} - 1"))
    if accepted is not None and drafted is not None and accepted > drafted:
        out.append(COUNTER_INVARIANT.line(f"accepted {accepted} > drafted {drafted}"))
    return out
