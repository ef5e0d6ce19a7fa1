"""How every table prints a number (fixed digits, a dash for "not measured"), and "did you mean" for a typo."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["DASH", "did_you_mean", "fmt"]

DASH = "–"


def fmt(v: float | None, digits: int = 1) -> str:
    return DASH if v is None else f"{v:.{digits}f}"


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'max_tokens'?"`` for the closest choice, or ``""`` when none is close.

    Case and punctuation are folded first, so ``llama.cpp`` finds ``llamacpp`` and ``vLLM`` finds ``vllm``.
    """
    options = [c for c in choices if c != word]

    def fold(text: str) -> str:
        return "".join(ch for ch in text.lower() if ch.isalnum())

    def words(text: str) -> list[str]:  # code_python and python_code are the same words
        return sorted("".join(ch if ch.isalnum() else " " for ch in text.lower()).split())

    folded = {fold(c): c for c in options}
    if fold(word) in folded:
        return f"; did you mean {folded[fold(word)]!r}?"
    same_words = [c for c in options if words(c) == words(word)]
    if same_words:
        return f"; did you mean {same_words[0]!r}?"
    prefixed = [c for c in options if len(word) >= 3 and (c.startswith(word) or word.startswith(c))]
    if prefixed:  # itl -> itl_ms
        return f"; did you mean {prefixed[0]!r}?"
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.7)
    return f"; did you mean {close[0]!r}?" if close else ""
