"""Measurement points of an arm: prompt × mode × rep, times depth and concurrency when swept.

This is the glue between the arm session's requests (core/run/arm.py) and the sweeps: it lists an arm's
points, refuses the ones the running engine cannot serve (a depth past its context, more streams than its
slots), rewrites a request for its point (depth filler, a salt per stream), and stamps each Sample with its
point and the checks that belong to it (exact depth, exact output length under fixed work, needle found, a
structured answer's validity and stalls).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from ..config.schema import Arm, Prompt, Workload
from ..config.sessions import Session
from ..engine.client import StreamResult
from ..engine.contract import EngineAdapter
from ..engine.effective import Effective
from ..results.flags import (
    CACHE_IMPOSSIBLE,
    CACHE_MISS,
    CACHE_UNREPORTED,
    DEPTH_MISMATCH,
    FIXED_LENGTH_MISSED,
    NEEDLE_MISSED,
)
from ..results.sample import Sample
from .concurrency import effective_slots, refused_levels
from .depth import DepthBuilder, DepthInfo, effective_context, needle_found, refused_depths
from .structured import stamp_structured

__all__ = ["cache_flags", "DoneKeys", "Point", "arm_points", "turn_points", "concurrent_replays", "is_done",
           "samples_expected", "request_factors", "factors_text", "PointRunner"]

# Resume keys of the samples a run already holds (core/results/db.py done_key): points to skip.
DoneKeys = Collection[tuple[object, ...]]


@dataclass(frozen=True)
class Point:
    """One request (or one batch of ``concurrency`` requests) of an arm in a pass."""

    prompt: Prompt
    mode: str
    rep: int
    depth: int | None = None
    concurrency: int | None = None
    session: str | None = None  # a sessions workload's turn: its session, index, and the prefix it should reuse
    turn: int | None = None
    prefix_floor: int | None = None  # the previous turn's whole prompt, in tokens (None: the first turn)
    rate: float | None = None  # open-loop: workload.arrival's requests at this rate, prompts in turn

    @property
    def label(self) -> str:
        parts = [f"depth {self.depth}" if self.depth else "", f"{self.concurrency} streams" if self.concurrency else "",
                 f"{self.rate:g} req/s" if self.rate else ""]
        return ", ".join(p for p in parts if p) or "plain"


def arm_points(workload: Workload, prompts: Sequence[Prompt], modes: Collection[str],
               sessions: Sequence[Session] | None = None) -> list[Point]:
    """Every point, depth outermost so one depth's requests run back to back; open-loop rate points last
    (one per rate and mode: its requests take the prompts in turn). With ``arrival`` and no concurrency the
    rate points are the arm's only points. A sessions workload's points are its turns (:func:`turn_points`)."""
    if sessions is not None:
        return turn_points(sessions, modes, workload.reps)
    depths: list[int | None] = [*workload.depths] if workload.depths else [None]
    levels: list[int | None] = [*workload.concurrency] if workload.concurrency else [None]
    closed = [] if workload.arrival is not None and not workload.concurrency else [
        Point(p, m, r, d, c) for d in depths for c in levels for p in prompts for m in modes
        for r in range(workload.reps)]
    rates = workload.arrival.rates if workload.arrival is not None else []
    return closed + [Point(prompts[0], m, 0, rate=rate) for rate in rates for m in modes]


def turn_points(sessions: Sequence[Session], modes: Collection[str], reps: int) -> list[Point]:
    """A sessions workload's turns as points, grouped by replay (mode, rep, session) with its turns in order: a
    turn's prompt is the conversation so far, each earlier turn's *recorded* reply included, so every arm sends
    identical work whatever it generated. The arm session salts a replay and carries its prefix floor."""
    out = []
    for mode in modes:
        for rep in range(reps):
            for s in sessions:
                history: list[dict[str, str]] = []
                for index, turn in enumerate(s.turns):
                    history += [dict(m) for m in turn.messages]
                    prompt = Prompt(name=f"{s.id}/t{index}", kind="session", messages=[dict(m) for m in history])
                    out.append(Point(prompt, mode, rep, session=s.id, turn=index))
                    history.append({"role": "assistant", "content": turn.reply})
    return out


def concurrent_replays(sessions: Sequence[Session], mode: str, rep: int, n: int) -> list[list[Point]]:
    """``n`` session replays to run at once (a sessions capacity probe, core/run/capacity.py): replay ``j`` is
    session ``j`` mod the sessions there are, its turns in order as :func:`turn_points` gives them, each turn a
    point of ``n`` concurrent streams. Each replay is its own conversation, named ``<session>@<n>#<j>`` (replay
    j of n at once; the arm session salts each apart), so the same session replayed twice at one load, or at
    two loads, is never read as one replay; the same name on every arm pairs the same load's replays."""
    out = []
    for j in range(n):
        s = sessions[j % len(sessions)]
        out.append([replace(p, rep=rep, session=f"{s.id}@{n}#{j}", concurrency=n)
                    for p in turn_points([s], [mode], 1)])
    return out


def is_done(done: DoneKeys, arm: str, point: Point, pass_index: int) -> bool:
    """Resume: plain points are keyed (arm, prompt, mode, rep, pass); swept points add (depth, concurrency)."""
    key: tuple[object, ...] = (arm, point.prompt.name, point.mode, point.rep, pass_index)
    if point.rate is not None:  # a rate point's requests are stored together: its first one stands for it
        return (*key, None, None, point.rate) in done
    if point.depth is None and point.concurrency is None:
        return key in done
    return (*key, point.depth, point.concurrency) in done


def samples_expected(workload: Workload, prompts: int, modes: int, *, turns: int | None = None) -> int:
    """Samples one arm writes per pass (a batch of N streams writes N; a sessions workload, one per turn).

    :param turns: a sessions workload's turns, as the plan read them (None: read the conversations here)."""
    factors, opened = request_factors(workload, prompts, modes, turns=turns)
    return (math.prod(n for n, _ in factors) if factors else 0) + opened


def request_factors(workload: Workload, prompts: int, modes: int, *, turns: int | None = None
                    ) -> tuple[list[tuple[int, str]], int]:
    """:func:`samples_expected`'s count, named factor by factor: ``(factors, open_loop)`` where the product of the
    factors plus ``open_loop`` (the requests an arrival schedule sends) is that count; what ``check`` prints."""
    if workload.sessions is not None:
        if turns is None:
            from ..config.sessions import load_sessions

            turns = sum(len(s.turns) for s in load_sessions(workload.sessions))
        return [(turns, "session turn(s)"), (modes, "mode(s)"), (workload.reps, "rep(s)")], 0
    arrival = workload.arrival
    opened = sum(arrival.count(r) for r in arrival.rates) * modes if arrival is not None else 0
    if arrival is not None and not workload.concurrency:
        return [], opened
    factors = [(len(workload.depths), "depth(s)")] if workload.depths else []
    if workload.concurrency:  # a batch of N streams sends N requests
        levels = workload.concurrency
        named = f"stream(s) ({'+'.join(map(str, levels))})" if len(levels) > 1 else "stream(s)"
        factors.append((sum(levels), named))
    return [*factors, (prompts, "prompt(s)"), (modes, "mode(s)"), (workload.reps, "rep(s)")], opened


def factors_text(factors: list[tuple[int, str]], open_loop: int) -> str:
    """:func:`request_factors` in words: ``3 stream(s) (1+2) × 2 prompt(s) × 1 mode(s) × 2 rep(s)``, with the
    open-loop requests added (what ``check`` and the verdict block's design line say)."""
    product = " × ".join(f"{n} {what}" for n, what in factors)
    if not open_loop:
        return product
    opened = f"{open_loop} open-loop request(s)"
    return f"({product} + {opened})" if product else opened


def _salted(messages: list[dict[str, str]], salt: str) -> list[dict[str, str]]:
    out = [dict(m) for m in messages]
    for m in reversed(out):
        if m.get("role") == "user":
            m["content"] = f"(request {salt})\n{m.get('content', '')}"
            break
    return out


def cache_flags(sample: Sample, floor: int | None, block: int = 1) -> list[str]:
    """A session turn that reused less of its prefix than the previous turn's whole prompt re-prefilled what the
    engine had already seen: ``cache-miss`` with the counts. An engine that reuses whole blocks of ``block``
    tokens (vLLM) cannot reuse the previous prompt's last partial block, so a turn is a miss only when it
    re-prefilled a whole block or more of that prompt. An engine that reports no cached count says so.

    A turn claiming its whole prompt cached claims what no engine can have: every turn adds messages it never
    saw (the first turn, the replay's salt at its very start), and engines compute at least the last prompt
    token anew for its logits: ``cache-impossible``, and the count is no cache-hit ratio's."""
    if sample.cached_tokens is None:
        return [CACHE_UNREPORTED.line("the engine reports no cached prompt tokens for this turn")]
    if sample.prompt_tokens and sample.cached_tokens >= sample.prompt_tokens:
        new = "the replay's salted start" if floor is None else "the messages this turn added"
        return [CACHE_IMPOSSIBLE.line(f"all {sample.prompt_tokens} prompt tokens reported cached, yet {new} cannot "
                                      "have been in any cache; no prefill rate or cache-hit ratio is read from it")]
    if floor is None or floor - sample.cached_tokens < max(block, 1):
        return []
    unit = f" (reused in blocks of {block})" if block > 1 else ""
    return [CACHE_MISS.line(f"{sample.cached_tokens} of {sample.prompt_tokens} prompt tokens cached{unit}, the "
                            f"previous turn's prompt was {floor}; re-prefilled "
                            f"{(sample.prompt_tokens or 0) - sample.cached_tokens}")]


@dataclass
class PointRunner:
    """Per engine start: what this engine can run, and how each point's request is shaped."""

    adapter: EngineAdapter
    arm: Arm
    workload: Workload
    http: httpx.Client
    eff: Effective
    warn: Callable[[str], None] = lambda msg: None
    refused: dict[str, str] = field(default_factory=dict)
    _builder: DepthBuilder | None = None
    _template_kwargs: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        w = self.workload
        if w.depths:
            for depth, why in refused_depths(w.depths, w.max_tokens, effective_context(self.eff, self.arm)).items():
                self.refused[f"depth {depth}"] = why
            self._builder = DepthBuilder(self._count, needle=w.needle)
        if w.concurrency:
            slots = effective_slots(self.eff, self.arm)
            if slots is None and max(w.concurrency) > 1:
                self.warn(f"{self.arm.name}: the engine does not report its slots; concurrency levels are unchecked")
            for level, why in refused_levels(w.concurrency, slots).items():
                self.refused[f"{level} streams"] = why
        for what, why in self.refused.items():
            self.warn(f"{self.arm.name}: {what} refused: {why}")
        if w.fixed_length and self.adapter.capabilities.fixed_length_field == "none":
            self.warn(f"{self.arm.name}: {self.adapter.name} has no way to force fixed-length output; "
                      "short answers are flagged")

    def accept(self, todo: list[Point]) -> list[Point]:
        """The points this engine can serve (refused ones are warned about once and recorded)."""
        return [p for p in todo if not ((p.depth and f"depth {p.depth}" in self.refused)
                                        or (p.concurrency and f"{p.concurrency} streams" in self.refused))]

    def _count(self, messages: list[dict[str, str]]) -> int:
        return self.adapter.reader.count_prompt_tokens(self.http, messages, self._template_kwargs)

    def prepare(self, body: dict[str, Any], point: Point) -> DepthInfo | None:
        """Shape one request for its point: salt, depth filler. Untimed."""
        salt = f"{uuid.uuid4().int % 10**10:010d}"  # fixed-length digits: the same token count in every arm
        if point.depth is not None and self._builder is not None:
            self._template_kwargs = body.get("chat_template_kwargs")
            body["messages"], info = self._builder.messages(point.prompt, point.depth, salt)
            return info
        if point.session is not None:  # a replay is salted once, at its start: its turns reuse their own prefix
            return None
        if point.concurrency is not None or point.rate is not None:  # copies of a prompt must not share a cache
            body["messages"] = _salted(body["messages"], salt)
        return None

    def finish(self, sample: Sample, point: Point, body: dict[str, Any], result: StreamResult,
               info: DepthInfo | None) -> Sample:
        """Stamp the sample with its point and the checks the point owes."""
        sample.max_tokens = body.get("max_tokens")
        sample.depth, sample.concurrency, sample.rate = point.depth, point.concurrency, point.rate
        sample.needle_found = needle_found(info, result.text)
        sample.session, sample.turn = point.session, point.turn
        if point.prompt.structured:  # validity, longest pause, stall
            stamp_structured(sample, point.prompt, result, self.workload.structured)
        if sample.status != "ok":
            return sample
        if point.session is not None:
            sample.flags += cache_flags(sample, point.prefix_floor, self.eff.prefix_block_tokens or 1)
        if point.depth is not None and sample.prompt_tokens != point.depth:
            sample.flags.append(DEPTH_MISMATCH.line(
                f"usage.prompt_tokens {sample.prompt_tokens}, target {point.depth}"))
        if sample.needle_found is False:
            sample.flags.append(NEEDLE_MISSED.line())
        if self.workload.fixed_length and not point.prompt.structured and sample.completion_tokens is not None \
                and sample.completion_tokens != sample.max_tokens:
            sample.flags.append(FIXED_LENGTH_MISSED.line(f"{sample.completion_tokens} of {sample.max_tokens} tokens"))
        return sample
