"""The equal-work guard: before a speed ratio is shown, did both arms do the same work?

Everything is read from what a run already stores: the samples (prompt tokens after the chat template,
completion tokens, cached tokens, drafted tokens, finish reasons), the greedy outputs kept next to them
(``arms/<arm>/outputs.jsonl``: thinking seen) and each arm's records (effective context and slots,
mismatches such as a partial GPU offload, GPU power and clock limits). A pair that differs is "not
comparable", with the reasons, instead of a bare ratio.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ..config.schema import Arm, BakeoffFile
from ..results.flags import EMPTY_OUTPUT, FINISH_REASON, TRUNCATED_STREAM, flag_name
from ..results.record import ArmAttempt
from ..results.sample import Sample
from .stats import median_or_none

__all__ = ["Comparable", "FinishCounts", "finish_flags", "finish_counts", "equal_work", "OUTPUTS_FILE",
           "output_line", "read_outputs", "THINK_RE"]

OUTPUTS_FILE = "outputs.jsonl"  # per arm: greedy outputs, for spec correctness and thinking detection
THINK_RE = re.compile(r"<think>|<\|thinking\|>|\[THINK\]", re.IGNORECASE)
_MAX_REASONS_PER_CHECK = 3
# Decode rates are per token: outputs that end a few tokens apart (TabbyAPI streams 255 of 256 under a fixed
# length, and stops drafting n_max tokens early) cover the same depths, so a shortfall of at most this share
# of the longer output is noted beside the verdict instead of refusing it.
SHORTFALL_SHARE = 0.02


class Comparable(BaseModel):
    """Whether an arm and its reference did the same work; ``reasons`` say how they differ."""

    ok: bool = True
    reasons: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, description="Differences too small to refuse the verdict.")
    checks: dict[str, Any] = Field(default_factory=dict, description="Every check with both arms' values.")


class FinishCounts(BaseModel):
    """Per arm: samples whose ending was not the expected one."""

    expected: str
    unexpected: dict[str, int] = Field(default_factory=dict, description="finish_reason -> samples.")
    truncated: int = Field(0, description="Streams that ended without any finish_reason.")
    empty: int = Field(0, description="Successful samples with no output text.")


def _expected_finish(fixed_length: bool) -> str:
    return "length" if fixed_length else "stop"


def finish_flags(s: Sample, fixed_length: bool) -> list[str]:
    """Flags for an ending other than the expected one: ``length`` under fixed length, ``stop`` otherwise."""
    if s.status != "ok" or s.output_chars is None:  # nothing was read of the output (not a stream bakeoff read)
        return []
    out = []
    expected = _expected_finish(fixed_length and s.structured is None)  # a grammar ends structured answers
    if s.finish_reason is None:
        out.append(TRUNCATED_STREAM.line("no finish_reason"))
    elif s.finish_reason != expected and not (s.structured == "tool_call" and s.finish_reason == "tool_calls"):
        out.append(FINISH_REASON.line(f"{s.finish_reason} (expected {expected})"))
    if s.output_chars == 0:
        out.append(EMPTY_OUTPUT.line())
    return out


def finish_counts(samples: Iterable[Sample], fixed_length: bool) -> FinishCounts:
    """Endings of the plain samples; a structured answer's ending is judged by its validity (a cut-off JSON
    document is invalid, with the reason), so it is left out here."""
    counts = FinishCounts(expected=_expected_finish(fixed_length))
    for s in samples:
        if s.structured is not None:
            continue
        for flag in finish_flags(s, fixed_length):
            if flag_name(flag) == TRUNCATED_STREAM.name:
                counts.truncated += 1
            elif flag_name(flag) == EMPTY_OUTPUT.name:
                counts.empty += 1
            else:
                reason = str(s.finish_reason)
                counts.unexpected[reason] = counts.unexpected.get(reason, 0) + 1
    return counts


def output_line(s: Sample, text: str, depth: int | None = None) -> str:
    """One line of ``outputs.jsonl``: the measurement point and the full output text."""
    return json.dumps({"prompt": s.prompt, "mode": s.mode, "rep": s.rep, "pass": s.pass_index,
                       "depth": depth if depth is not None else s.depth, "max_tokens": s.max_tokens,
                       "sha256": s.output_sha256, "text": text}) + "\n"


def read_outputs(run_path: Path, arm: str) -> dict[tuple[Any, ...], str]:
    """(prompt, mode, rep, pass, depth, max_tokens) -> output text; a torn line is skipped."""
    path = run_path / "arms" / arm / OUTPUTS_FILE
    out: dict[tuple[Any, ...], str] = {}
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            d = json.loads(line)
            out[(d["prompt"], d["mode"], d["rep"], d["pass"], d.get("depth"), d.get("max_tokens"))] = d["text"]
        except (ValueError, KeyError, TypeError):
            continue
    return out


def _by_point(samples: Iterable[Sample], field: str) -> dict[tuple[Any, ...], float]:
    """Median of a sample field per (prompt, mode, depth): what both arms were asked to process."""
    values: dict[tuple[Any, ...], list[float]] = defaultdict(list)
    for s in samples:
        v = getattr(s, field)
        if s.status == "ok" and v is not None and s.concurrency is None:
            values[(s.prompt, s.mode, s.depth)].append(float(v))
    return {k: m for k, vs in values.items() if (m := median_or_none(vs)) is not None}


# run.json 'effective' keys for the context per slot and the slots: Effective's common field first
# (core/engine/effective.py), then the engine names that run directories written before it recorded.
CONTEXT_KEYS = ("context_tokens", "n_ctx_per_slot", "max_model_len", "n_ctx")
SLOT_KEYS = ("slots", "total_slots", "max_num_seqs")


def _effective(records: Sequence[ArmAttempt], keys: Sequence[str]) -> Any:
    for r in reversed(records):
        values = r.effective
        for k in keys:
            if values.get(k) is not None:
                return values[k]
    return None


def _label(point: tuple[Any, ...]) -> str:
    prompt, mode, depth = point
    return f"{prompt}/{mode}" + (f"@{depth}" if depth is not None else "")


def _compare_points(name: str, a: dict[tuple[Any, ...], float], b: dict[tuple[Any, ...], float]
                    ) -> tuple[list[str], dict[str, Any]]:
    reasons = [f"{name} {a[p]:g} vs {b[p]:g} ({_label(p)})" for p in sorted(set(a) & set(b), key=str)
               if a[p] != b[p]]
    return reasons[:_MAX_REASONS_PER_CHECK], {_label(p): [a.get(p), b.get(p)] for p in sorted(set(a) | set(b), key=str)}


def _near(x: float, y: float) -> bool:
    return abs(x - y) <= SHORTFALL_SHARE * max(x, y)


class _ArmFacts:
    """What one arm did, as the guard needs it."""

    def __init__(self, name: str, samples: list[Sample], records: list[ArmAttempt], arm: Arm | None,
                 outputs: dict[tuple[Any, ...], str], max_tokens: int | None, fixed_length: bool) -> None:
        self.name = name
        self.prompt_tokens = _by_point(samples, "prompt_tokens")
        self.completion_tokens = _by_point(samples, "completion_tokens")
        ok = [s for s in samples if s.status == "ok"]
        busted = [s for s in ok if s.session is None]  # session turns reuse their prefix on purpose (docs/sessions.md)
        self.cached = sum(s.cached_tokens or 0 for s in busted)
        self.cached_requests = sum(1 for s in busted if s.cached_tokens)
        self.spec_asked = arm is not None and arm.speculative.enabled
        counted = [s for s in ok if s.drafted is not None]
        self.drafted = sum(s.drafted or 0 for s in counted) if counted else None
        self.thinking = sum(1 for t in outputs.values() if THINK_RE.search(t))
        self.ctx = _effective(records, CONTEXT_KEYS)
        self.slots = _effective(records, SLOT_KEYS)
        self.offload = [m for r in records for m in r.mismatches
                        if any(w in m.lower() for w in ("offload", "gpu", "layers"))]
        self.gpu_state = next((r.gpu_state for r in reversed(records) if r.gpu_state), None)
        asked = max_tokens if fixed_length else None
        short = [(int(s.completion_tokens), s.max_tokens or asked) for s in ok if asked is not None
                 and s.completion_tokens is not None and s.completion_tokens != (s.max_tokens or asked)
                 and s.concurrency is None]
        self.short = sorted({n for n, _ in short})
        self.short_near = all(want is not None and _near(n, want) for n, want in short)


def _pair(a: _ArmFacts, b: _ArmFacts) -> Comparable:
    c = Comparable()
    reasons, c.checks["prompt_tokens"] = _compare_points("prompt tokens", a.prompt_tokens, b.prompt_tokens)
    c.reasons += reasons
    reasons, c.checks["completion_tokens"] = _compare_points("completion tokens", a.completion_tokens,
                                                             b.completion_tokens)
    near = all(_near(x, y) for x, y in c.checks["completion_tokens"].values() if x is not None and y is not None)
    (c.notes if near else c.reasons).extend(reasons)
    for f in (a, b):
        if f.short:
            short = f"{f.name}: fixed length not honoured (completion tokens {f.short[:3]})"
            ok = near and f.short_near
            (c.notes if ok else c.reasons).append(short + (f", within {SHORTFALL_SHARE:.0%}" if ok else ""))
    c.checks["thinking_outputs"] = [a.thinking, b.thinking]
    if bool(a.thinking) != bool(b.thinking):
        c.reasons.append(f"thinking seen in {a.thinking} vs {b.thinking} greedy output(s)")
    c.checks["context"], c.checks["slots"] = [a.ctx, b.ctx], [a.slots, b.slots]
    if a.ctx is not None and b.ctx is not None and a.ctx != b.ctx:
        c.reasons.append(f"context {a.ctx} vs {b.ctx}")
    if a.slots is not None and b.slots is not None and a.slots != b.slots:
        c.reasons.append(f"slots {a.slots} vs {b.slots}")
    c.checks["cached_tokens"] = [a.cached, b.cached]
    for f in (a, b):
        if f.cached:
            c.reasons.append(f"{f.name}: prefix cache served {f.cached} prompt tokens in {f.cached_requests} "
                             f"request(s)")
    c.checks["drafted"] = [a.drafted, b.drafted]
    for f in (a, b):
        if f.spec_asked and f.drafted == 0:
            c.reasons.append(f"{f.name}: speculation asked but nothing drafted")
    c.checks["offload_mismatches"] = [a.offload, b.offload]
    for f in (a, b):
        c.reasons += [f"{f.name}: {m}" for m in f.offload[:1]]
    c.checks["gpu_state"] = [a.gpu_state, b.gpu_state]
    if a.gpu_state is not None and b.gpu_state is not None and a.gpu_state != b.gpu_state:
        c.reasons.append("GPU power limit or clocks differ")
    c.ok = not c.reasons
    return c


def equal_work(samples: Sequence[Sample], config: BakeoffFile | None, records: dict[str, list[ArmAttempt]],
               run_path: Path, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Comparable]:
    """The guard for each (arm, reference) pair.

    :param config: the run's recorded configuration (None for a run that recorded none: nothing is asked).
    """
    arms = {a.name: a for a in config.arms} if config is not None else {}
    fixed = config.workload.fixed_length if config is not None else True
    max_tokens = config.workload.max_tokens if config is not None else None
    by_arm: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        by_arm[s.arm].append(s)
    facts: dict[str, _ArmFacts] = {}

    def fact(name: str) -> _ArmFacts:
        if name not in facts:
            arm = arms.get(name)
            fixed_arm = arm.workload.fixed_length if arm is not None else None
            facts[name] = _ArmFacts(name, by_arm.get(name, []), records.get(name, []), arm,
                                    read_outputs(run_path, name), max_tokens,
                                    fixed if fixed_arm is None else fixed_arm)
        return facts[name]

    return {(a, b): _pair(fact(a), fact(b)) for a, b in pairs}
