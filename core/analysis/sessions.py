"""Sessions workload: per arm, session time (the sum of a session's turn times), the cache-hit ratio and the
turns by index; per arm against the baseline, the paired session-time ratio with its interval and verdict,
beside the decode-rate ratio of the same turns.

A session replay (session, mode, rep, pass) is one observation; it counts only when every turn of it
succeeded. The session-time ratio pairs replays through :func:`~bakeoff.core.analysis.stats.paired_ratio` (one
comparison per pair: the same requests give the same interval everywhere), on the replay's session *speed*
(1 / session time), so the ratio reads like the decode ratio: baseline time / arm time, above 1 faster.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, Field

from ..results.flags import CACHE_IMPOSSIBLE, CACHE_MISS
from ..results.sample import Sample
from .stats import EQUIVALENCE_MARGIN, LEVEL, N_BOOT, Verdict, bootstrap_ci, paired_ratio, verdict

__all__ = ["SessionArm", "SessionComparison", "SessionsSummary", "TurnRow", "session_replays",
           "summarize_sessions"]

class TurnRow(BaseModel):
    """One turn index of an arm: medians over its session replays."""

    turn: int
    prompt_tokens: float | None = None
    cached_tokens: float | None = None
    reprefill_tokens: float | None = Field(None, description="Prompt tokens processed anew: prompt - cached.")
    ttft_s: float | None = None
    decode_tps: float | None = None
    e2e_s: float | None = None
    cache_misses: int = Field(0, description="Replays whose turn carried a cache-miss flag.")


class SessionArm(BaseModel):
    sessions: int = Field(description="Complete session replays (every turn succeeded).")
    turns: list[TurnRow] = Field(default_factory=list)
    session_time_s: dict[str, float] | None = Field(None, description="{median, ci_low, ci_high} of session time.")
    cache_hit_ratio: float | None = Field(None, description="Cached / prompt tokens, summed over every turn after "
                                          "each session's first (the turns that could reuse a prefix).")
    cache_misses: int = Field(0, description="Turns flagged cache-miss.")
    first_miss_turn: int | None = Field(None, description="The earliest turn index flagged cache-miss.")
    decode_tps: float | None = Field(None, description="Median decode rate over the arm's turns.")


class SessionComparison(BaseModel):
    session_time_ratio: float = Field(description="Baseline session time / this arm's, paired per replay "
                                      "(median of pairs): above 1 this arm finishes sessions faster.")
    ci_low: float
    ci_high: float
    verdict: Verdict
    pairs: int
    decode_ratio: float | None = None
    decode_ci_low: float | None = None
    decode_ci_high: float | None = None
    note: str | None = Field(None, description="A worse cache-hit ratio than the baseline's, and where it began.")


class SessionsSummary(BaseModel):
    arms: dict[str, SessionArm] = Field(default_factory=dict)
    comparisons: dict[str, SessionComparison] = Field(default_factory=dict)


def _median(values: Iterable[float | int | None]) -> float | None:
    xs = [float(v) for v in values if v is not None]
    return statistics.median(xs) if xs else None


def _missed(s: Sample) -> bool:
    return s.has_flag(CACHE_MISS)


def session_replays(samples: Iterable[Sample]) -> dict[str, list[Sample]]:
    """Per arm, one Sample per complete session replay: prompt = the session, ``e2e_s`` = its session time."""
    groups: dict[tuple[str, str, str, int, int], list[Sample]] = defaultdict(list)
    for s in samples:
        if s.session is not None and s.turn is not None:
            groups[(s.arm, s.session, s.mode, s.rep, s.pass_index)].append(s)
    length: dict[str, int] = defaultdict(int)  # the session's turns: the most any replay of it stored
    for (_, session, *_), turns in groups.items():
        length[session] = max(length[session], 1 + max(t.turn or 0 for t in turns))
    out: dict[str, list[Sample]] = defaultdict(list)
    for (arm, session, mode, rep, pass_index), turns in groups.items():
        if len({t.turn for t in turns}) != length[session] or any(t.status != "ok" or t.e2e_s is None for t in turns):
            continue
        out[arm].append(Sample(arm=arm, engine=turns[0].engine, prompt=session, mode=mode, rep=rep,
                               pass_index=pass_index, e2e_s=sum(t.e2e_s or 0.0 for t in turns)))
    return out


def _speed(s: Sample) -> float | None:
    return 1.0 / s.e2e_s if s.e2e_s else None


def _arm(turns: list[Sample], replays: list[Sample], *, n_boot: int, level: float, seed: int, name: str
         ) -> SessionArm:
    by_turn: dict[int, list[Sample]] = defaultdict(list)
    for s in turns:
        by_turn[s.turn or 0].append(s)
    rows = []
    for index in sorted(by_turn):
        ok = [s for s in by_turn[index] if s.status == "ok"]
        rows.append(TurnRow(
            turn=index, prompt_tokens=_median(s.prompt_tokens for s in ok),
            cached_tokens=_median(s.cached_tokens for s in ok),
            reprefill_tokens=_median((s.prompt_tokens - s.cached_tokens) for s in ok
                                     if s.prompt_tokens is not None and s.cached_tokens is not None),
            ttft_s=_median(s.ttft_s for s in ok), decode_tps=_median(s.decode_tps for s in ok),
            e2e_s=_median(s.e2e_s for s in ok), cache_misses=sum(_missed(s) for s in ok)))
    reuse = [s for s in turns if s.status == "ok" and s.turn and s.prompt_tokens and s.cached_tokens is not None
             and not s.has_flag(CACHE_IMPOSSIBLE)]
    prompt = sum(s.prompt_tokens or 0 for s in reuse)
    times = bootstrap_ci([s.e2e_s or 0.0 for s in replays], [s.pass_index for s in replays], n_boot=n_boot,
                         level=level, seed=seed, key=f"session time|{name}")
    missed = [s.turn or 0 for s in turns if _missed(s)]
    return SessionArm(
        sessions=len(replays), turns=rows,
        session_time_s=None if times is None else {"median": times.estimate, "ci_low": times.lo, "ci_high": times.hi},
        cache_hit_ratio=sum(s.cached_tokens or 0 for s in reuse) / prompt if prompt else None,
        cache_misses=len(missed), first_miss_turn=min(missed, default=None),
        decode_tps=_median(s.decode_tps for s in turns if s.status == "ok"))


def summarize_sessions(samples: Sequence[Sample], arm_order: Sequence[str], baseline: str | None, *,
                       n_boot: int = N_BOOT, level: float = LEVEL, seed: int = 0,
                       margin: float = EQUIVALENCE_MARGIN) -> SessionsSummary | None:
    """The sessions section of a run's summary (None: the run has no session turns)."""
    turns = [s for s in samples if s.session is not None]
    if not turns:
        return None
    replays = session_replays(turns)
    names = [a for a in arm_order if any(s.arm == a for s in turns)]
    names += sorted({s.arm for s in turns} - set(names))
    by_arm = {a: [s for s in turns if s.arm == a] for a in names}
    out = SessionsSummary(arms={a: _arm(by_arm[a], replays.get(a, []), n_boot=n_boot, level=level, seed=seed,
                                        name=a) for a in names})
    if baseline not in out.arms:
        return out
    assert baseline is not None
    ref = out.arms[baseline]
    for a in names:
        if a == baseline:
            continue
        ratio = paired_ratio(replays.get(a, []), replays.get(baseline, []), n_boot=n_boot, level=level, seed=seed,
                             value=_speed, value_name="session speed")
        if ratio is None:
            continue
        decode = paired_ratio(by_arm[a], by_arm[baseline], n_boot=n_boot, level=level, seed=seed)
        mine = out.arms[a]
        note = None
        if mine.cache_hit_ratio is not None and ref.cache_hit_ratio is not None \
                and mine.cache_hit_ratio < ref.cache_hit_ratio - 0.01:
            note = (f"cache-hit ratio {mine.cache_hit_ratio:.0%} against the baseline's {ref.cache_hit_ratio:.0%}"
                    + (f": prefix lost from turn {mine.first_miss_turn}" if mine.first_miss_turn is not None else ""))
        out.comparisons[a] = SessionComparison(
            session_time_ratio=ratio.estimate, ci_low=ratio.lo, ci_high=ratio.hi, verdict=verdict(ratio, margin),
            pairs=ratio.n, decode_ratio=decode.estimate if decode else None,
            decode_ci_low=decode.lo if decode else None, decode_ci_high=decode.hi if decode else None, note=note)
    return out
