"""Context-depth sweeps: prompts padded with filler to an exact token count.

Decode speed falls as the context fills, and the community's depth tables (4K … 128K) are only
comparable when "depth" means the same thing everywhere. Here it is the number the engine itself will
report as ``usage.prompt_tokens``: the chat template and any default system prompt included, counted
with the engine's own tokenizer (:meth:`Reader.count_prompt_tokens`), never estimated.

Every request gets its own salt at the very start of the user message, and filler drawn from a
generator seeded by that salt, so no prefix cache can serve one request from another. An optional
needle (a code hidden in the middle of the filler) must come back in the answer.

A depth the engine's effective context cannot hold together with ``max_tokens`` is refused, before
launch when ``settings.ctx`` says so, after launch from what the engine reports.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..common.errors import MeasurementError
from ..config.schema import Arm, Prompt
from ..engine.effective import Effective

__all__ = ["DepthInfo", "DepthBuilder", "filler_words", "effective_context", "refused_depths", "needle_found"]

_WORDS = (
    "river harbour lantern orchard meadow window village kettle ledger compass garden signal market "
    "bridge engine copper timber shelter morning evening winter summer autumn spring island valley "
    "ferry baker teacher miller painter sailor farmer keeper clerk weaver carpenter doctor student "
    "walks carries builds paints counts mends watches follows gathers opens closes sorts repairs "
    "quietly slowly early later often rarely gently carefully together again nearly almost "
    "old new small quiet narrow bright heavy simple distant careful patient crowded empty warm "
    "stone paper glass salt bread rope wool iron clay honey letter story record table chair road "
    "the a of and to in on with near under over across beside before after during while because"
).split()
_PAD_PIECES = (" and", " so", " a", " the", " it", ".", " yes", " ok")
_MAX_COUNTS = 60  # tokenizer calls allowed for one prompt before giving up


def filler_words(salt: str, n: int) -> list[str]:
    """``n`` words of plain sentences, the same for the same salt, different for another."""
    rng = random.Random(salt)
    out: list[str] = []
    while len(out) < n:
        length = rng.randint(6, 14)
        sentence = [rng.choice(_WORDS) for _ in range(length)]
        sentence[0] = sentence[0].capitalize()
        sentence[-1] += "."
        out += sentence
    return out[:n]


@dataclass
class DepthInfo:
    """How one depth prompt was built."""

    target: int
    counted: int
    filler_words: int
    needle: str | None = None
    tokenizer_calls: int = 0


@dataclass
class DepthBuilder:
    """Builds salted prompts of exactly ``depth`` tokens, measured by ``count``.

    :param count: messages -> prompt tokens as the engine will process them.
    :param needle: hide a code in the filler and ask for it back.
    """

    count: Callable[[list[dict[str, str]]], int]
    needle: bool = False
    _guess: dict[tuple[str, int], int] = field(default_factory=dict)

    def messages(self, prompt: Prompt, depth: int, salt: str) -> tuple[list[dict[str, str]], DepthInfo]:
        """Messages of ``prompt`` with filler before its last user message, ``depth`` tokens in all.

        :raises MeasurementError: the prompt alone is longer than ``depth``, or the count cannot be
            hit exactly.
        """
        words = _WordSource(salt)
        code = f"{random.Random(salt + 'needle').randrange(10**5, 10**6)}" if self.needle else None
        calls = 0

        def build(n: int, pad: str = "") -> list[dict[str, str]]:
            return _with_filler(prompt, salt, words.take(n), pad, code)

        def measure(n: int, pad: str = "") -> int:
            nonlocal calls
            calls += 1
            if calls > _MAX_COUNTS:
                raise MeasurementError(f"depth {depth}: no exact fit after {_MAX_COUNTS} tokenizer calls")
            return self.count(build(n, pad))

        base = measure(0)
        if base > depth:
            raise MeasurementError(f"prompt {prompt.name!r} alone is {base} tokens, more than depth {depth}")
        lo, c_lo, hi = 0, base, None
        n = self._guess.get((prompt.name, depth)) or max(1, round((depth - base) / 1.3))
        while base < depth:
            c = measure(n)
            if c == depth:
                self._guess[(prompt.name, depth)] = n
                return build(n), DepthInfo(depth, c, n, code, calls)
            if c < depth:
                lo, c_lo = n, c
            else:
                hi = n
            if hi is not None and hi - lo <= 1:
                break
            per_word = (c - base) / n if n else 1.3
            step = round((depth - c) / max(per_word, 0.2))
            nxt = n + (step or (1 if c < depth else -1))
            nxt = max(nxt, lo + 1)
            if hi is not None:
                nxt = min(nxt, hi - 1)
            n = nxt
        self._guess[(prompt.name, depth)] = lo
        pad, c = "", c_lo
        while c < depth:  # the last word overshot: add pieces that cost exactly one token each
            for piece in _PAD_PIECES:
                got = measure(lo, pad + piece)
                if got == c + 1:
                    pad, c = pad + piece, got
                    break
            else:
                raise MeasurementError(f"depth {depth}: could not pad from {c} to exactly {depth} tokens")
        return build(lo, pad), DepthInfo(depth, c, lo, code, calls)


class _WordSource:
    """Filler words for one salt, generated once and sliced."""

    def __init__(self, salt: str) -> None:
        self.salt = salt
        self.words: list[str] = []

    def take(self, n: int) -> list[str]:
        if n > len(self.words):
            self.words = filler_words(self.salt, max(n, 2 * len(self.words)))
        return self.words[:n]


def _with_filler(prompt: Prompt, salt: str, words: list[str], pad: str, code: str | None) -> list[dict[str, str]]:
    if code is not None:
        mid = len(words) // 2
        words = [*words[:mid], f"The secret code is {code}.", *words[mid:]]
    messages = [dict(m) for m in prompt.messages]
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    if not users:
        raise MeasurementError(f"prompt {prompt.name!r} has no user message to put filler in front of")
    last = messages[users[-1]]
    ask = "\n\nBegin your reply with the secret code from the notes." if code is not None else ""
    last["content"] = f"Notes {salt}:\n{' '.join(words)}{pad}\n\n{last.get('content', '')}{ask}"
    return messages


def needle_found(info: DepthInfo | None, text: str) -> bool | None:
    """Whether the answer repeats the hidden code (None: no needle)."""
    if info is None or info.needle is None:
        return None
    return info.needle in text


def effective_context(eff: Effective, arm: Arm) -> int | None:
    """Tokens one request may use: what the engine reports, else the arm's ``settings.ctx``."""
    return eff.context_tokens if eff.context_tokens and eff.context_tokens > 0 else arm.settings.ctx


def refused_depths(depths: Iterable[int], max_tokens: int, context: int | None) -> dict[int, str]:
    """Depths that cannot fit with ``max_tokens`` in ``context``, with the reason."""
    if context is None:
        return {}
    return {d: f"depth {d} + max_tokens {max_tokens} > effective context {context}"
            for d in depths if d + max_tokens > context}


