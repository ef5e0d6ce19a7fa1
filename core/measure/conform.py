"""``bakeoff conform``'s verdicts: is this server's accounting true? One fixed battery, judged check by check.

Every bakeoff number rests on an engine's own counters, and engines have shipped bugs in exactly those (usage
reporting the whole budget while fewer tokens streamed, reasoning tokens above completion tokens, cached tokens
reading 0 under speculation, accepted drafts above the tokens predicted, a schema that silently turns drafting
off). The battery's requests go through the normal protocol (core/run/conform.py), so each sample already
carries the flags of the house's witnesses and invariants (core/measure/invariants.py), the acceptance
cross-checks of the engine's adapter, the cache accounting (core/measure/points.py) and the structured drafting
tally (core/measure/structured.py). This module reads those samples once more and gives each check one result:

- ``pass``: the check applied and every sample agreed; the figures quoted are the engine's own;
- ``fail``: some sample broke it; the figures quote the first one that did, in the engine's numbers;
- ``n/a``: the check could not apply (no speculation, no witness, no reasoning, no cache counter), and why.

The same checks judge a real engine and the replay fixtures of tests/fixtures/counter_bugs/, which reproduce
each catalogued bug: a fixture that is not flagged, or a clean engine that is, is a test failure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, Field

from ..analysis.reference import BenchReference
from ..results.flags import (
    ACCEPTANCE_CROSSCHECK_MISSING,
    ACCEPTANCE_HISTOGRAM_MISMATCH,
    ACCEPTANCE_LOG_MISMATCH,
    ACCEPTANCE_MISMATCH,
    ACCEPTANCE_PER_POSITION_MISMATCH,
    ACCEPTANCE_POSITIONS_NOT_PREFIX,
    CACHE_COUNT_MISMATCH,
    CACHE_IMPOSSIBLE,
    CACHE_MISS,
    CACHE_UNREPORTED,
    COUNT_WITNESS_MISMATCH,
    COUNTER_INVARIANT,
    SERVER_COUNT_MISMATCH,
    SPECULATION_DISENGAGED,
    TEXT_WITNESS_MISMATCH,
    TOKEN_EVENTS_MISMATCH,
    Flag,
    flag_detail,
    flag_name,
)
from ..results.record import ArmAttempt
from ..results.sample import Sample

__all__ = ["CHECKS", "CONFORM_SCHEMA_VERSION", "Check", "ArmConformance", "ConformSummary", "Result",
           "judge_arm"]

CONFORM_SCHEMA_VERSION = 1
Result = Literal["pass", "fail", "n/a"]

# (id, the line the table shows): the battery, in the order it is printed
CHECKS: tuple[tuple[str, str], ...] = (
    ("include-usage", "include_usage honoured"),
    ("usage-witness", "usage = tokens delivered"),
    ("events-tokens", "streamed events vs tokens"),
    ("reasoning", "reasoning <= completion"),
    ("accepted", "accepted <= drafted, <= N-1"),
    ("drafted", "drafted <= steps x n_max"),
    ("acceptance-sources", "acceptance across sources"),
    ("cache-hit", "cached_tokens on a repeat"),
    ("cache-counter", "cached = cache counter"),
    ("drafting-structured", "drafting under schema/tools"),
)
TITLES = dict(CHECKS)

_ACCEPTANCE_DISAGREE = (ACCEPTANCE_MISMATCH, ACCEPTANCE_LOG_MISMATCH, ACCEPTANCE_HISTOGRAM_MISMATCH,
                        ACCEPTANCE_PER_POSITION_MISMATCH, ACCEPTANCE_POSITIONS_NOT_PREFIX)


class Check(BaseModel):
    """One check of one arm."""

    id: str
    title: str
    result: Result
    figures: str = Field(description="The engine's own numbers behind the result (a failure: the first sample "
                                     "that broke it), or why the check did not apply.")
    samples: int = Field(0, description="Samples the check read.")


class ArmConformance(BaseModel):
    arm: str
    engine: str
    speculative: bool = Field(description="The arm drafts (asked in the file, or drafts seen in its samples).")
    version: str | None = None
    started: bool = True
    error: str | None = Field(None, description="Why the arm's engine could not be tested (it did not start).")
    checks: list[Check] = Field(default_factory=list)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.result == "fail"]


class ConformSummary(BaseModel):
    """summary.json of ``bakeoff conform``: every arm's checks, and the exit code the command gave."""

    schema_version: int = CONFORM_SCHEMA_VERSION
    source: str = Field(description="The bakeoff file or URL tested.")
    run_dirs: list[str] = Field(default_factory=list, description="Run directories holding the battery's samples.")
    arms: list[ArmConformance] = Field(default_factory=list)
    exit_code: int = 0
    references: dict[str, BenchReference] = Field(default_factory=dict, description="Per arm: the llama-bench "
                                                  "reference, when asked for (core/analysis/reference.py).")


# The checks name flags by their declared objects, never by text, so a misspelt check cannot silently never match.
def _has(sample: Sample, flag: Flag) -> str | None:
    return next((f for f in sample.flags if flag_name(f) == flag.name), None)


def _first_flag(samples: Sequence[Sample], flags: Sequence[Flag],
                keep: Callable[[str], bool] = lambda f: True) -> tuple[Sample, str] | None:
    names = {f.name for f in flags}
    for s in samples:
        for f in s.flags:
            if flag_name(f) in names and keep(f):
                return s, f
    return None


def _flag_failure(cid: str, samples: Sequence[Sample], flags: Sequence[Flag], read: int,
                  keep: Callable[[str], bool] = lambda f: True) -> Check | None:
    """The check failed, on the first sample carrying one of ``flags`` (quoted with where it is); None: none does."""
    bad = _first_flag(samples, flags, keep)
    if bad is None:
        return None
    s, flag = bad
    return _check(cid, "fail", f"{_where(s)}: {flag}", read)


def _where(sample: Sample) -> str:
    turn = f" turn {sample.turn}" if sample.turn is not None else ""
    return f"{sample.prompt}{turn} #{sample.rep}"


def _check(cid: str, result: Result, figures: str, samples: int = 0) -> Check:
    return Check(id=cid, title=TITLES[cid], result=result, figures=figures, samples=samples)


def _include_usage(ok: Sequence[Sample]) -> Check:
    missing = [s for s in ok if not s.usage_present]
    if missing:
        return _check("include-usage", "fail", f"{len(missing)} of {len(ok)} answers carried no usage although "
                      f"stream_options.include_usage asked for it (first: {_where(missing[0])})", len(ok))
    return _check("include-usage", "pass", f"usage on {len(ok)} of {len(ok)} answers", len(ok))


def _usage_witness(ok: Sequence[Sample]) -> Check:
    failed = _flag_failure("usage-witness", ok, (COUNT_WITNESS_MISMATCH, TEXT_WITNESS_MISMATCH,
                                                 SERVER_COUNT_MISMATCH), len(ok))
    if failed is not None:
        return failed
    witnessed = [s for s in ok if s.witness_tokens is not None]
    if not witnessed:
        return _check("usage-witness", "n/a", "no witness: the stream named no token one by one and the engine "
                      "has no tokenizer endpoint", len(ok))
    s = witnessed[0]
    sources = sorted({w.witness_source or "?" for w in witnessed})
    return _check("usage-witness", "pass", f"{len(witnessed)} answers: usage {s.completion_tokens} vs "
                  f"{s.witness_tokens} by {s.witness_source} (first); witnesses: {', '.join(sources)}", len(ok))


def _events_tokens(ok: Sequence[Sample]) -> Check:
    failed = _flag_failure("events-tokens", ok, (TOKEN_EVENTS_MISMATCH,), len(ok))
    if failed is not None:
        return failed
    plain = [s for s in ok if s.completion_tokens is not None]
    if not plain:
        return _check("events-tokens", "n/a", "no answer with a token count", len(ok))
    events = sum(s.token_events for s in plain)
    tokens = sum(s.completion_tokens or 0 for s in plain)
    most = max((s.max_tokens_per_event or 0 for s in plain), default=0)
    per_chunk = any(s.n_first_source == "usage" for s in plain)
    how = "per-chunk counts add up to usage" if per_chunk else "usage only (no per-chunk count)"
    return _check("events-tokens", "pass", f"{tokens} tokens in {events} token events, at most "
                  f"{most or '?'} per event; {how}", len(ok))


def _reasoning(ok: Sequence[Sample]) -> Check:
    failed = _flag_failure("reasoning", ok, (COUNTER_INVARIANT,), len(ok), keep=lambda f: "reasoning_tokens" in f)
    if failed is not None:
        return failed
    told = [s for s in ok if s.reasoning_tokens is not None]
    if not told:
        return _check("reasoning", "n/a", "no answer reported reasoning_tokens (thinking off)", len(ok))
    s = told[0]
    return _check("reasoning", "pass", f"{len(told)} answers: reasoning {s.reasoning_tokens} <= completion "
                  f"{s.completion_tokens} (first)", len(ok))


def _accepted(drafting: Sequence[Sample]) -> Check:
    failed = _flag_failure("accepted", drafting, (COUNTER_INVARIANT,), len(drafting),
                           keep=lambda f: (flag_detail(f) or "").startswith("accepted"))
    if failed is not None:
        return failed
    s = drafting[0]
    return _check("accepted", "pass", f"{len(drafting)} answers: accepted {s.accepted} of drafted {s.drafted}, "
                  f"completion {s.completion_tokens} (first)", len(drafting))


def _drafted(drafting: Sequence[Sample], n_max: int | None) -> Check:
    """Each draft step proposes at most n_max tokens: more drafted tokens than steps × n_max is a counter that
    adds something per step (tokenspeed PR #1443 counted one extra per step)."""
    stepped = [s for s in drafting if s.drafts]
    if not n_max or not stepped:
        why = "the engine reports no draft step count" if not stepped else "n_max was not read back"
        return _check("drafted", "n/a", why, len(drafting))
    for s in stepped:
        assert s.drafts is not None
        if (s.drafted or 0) > s.drafts * n_max:
            return _check("drafted", "fail", f"{_where(s)}: drafted {s.drafted} > {s.drafts} draft steps x n_max "
                          f"{n_max} = {s.drafts * n_max}", len(drafting))
    s = stepped[0]
    return _check("drafted", "pass", f"{len(stepped)} answers: drafted {s.drafted} <= {s.drafts} steps x "
                  f"n_max {n_max} (first)", len(drafting))


def _acceptance_sources(drafting: Sequence[Sample]) -> Check:
    failed = _flag_failure("acceptance-sources", drafting, _ACCEPTANCE_DISAGREE, len(drafting))
    if failed is not None:
        return failed
    crossed = [s for s in drafting if not _has(s, ACCEPTANCE_CROSSCHECK_MISSING)]
    if not crossed:
        why = _has(drafting[0], ACCEPTANCE_CROSSCHECK_MISSING) or ACCEPTANCE_CROSSCHECK_MISSING.name
        return _check("acceptance-sources", "n/a", flag_detail(why) or why, len(drafting))
    s = crossed[0]
    seen = s.acceptance_source or "the response"
    also = " and /metrics" if s.drafts is not None else ""
    return _check("acceptance-sources", "pass", f"{len(crossed)} answers: no disagreement among the sources "
                  f"read ({seen}{also}), accepted {s.accepted}/{s.drafted} (first)", len(drafting))


def _cache_hit(turns: Sequence[Sample]) -> Check:
    later = [s for s in turns if s.status == "ok" and s.turn]
    if not later:
        return _check("cache-hit", "n/a", "no repeated-prefix turn was answered", 0)
    if all(s.cached_tokens is None for s in later):  # nothing claimed, so nothing to contradict
        return _check("cache-hit", "n/a", "the engine reports no cached_tokens (usage or its own counter) on a "
                      "repeated prefix", len(later))
    failed = _flag_failure("cache-hit", later, (CACHE_MISS, CACHE_IMPOSSIBLE, CACHE_UNREPORTED), len(later))
    if failed is not None:
        return failed
    zero = next((s for s in later if not s.cached_tokens), None)
    if zero is not None:
        return _check("cache-hit", "fail", f"{_where(zero)}: cached_tokens {zero.cached_tokens} of "
                      f"{zero.prompt_tokens} on a repeated prefix", len(later))
    s = later[0]
    return _check("cache-hit", "pass", f"{len(later)} repeats: cached {s.cached_tokens} of {s.prompt_tokens} "
                  "prompt tokens (first)", len(later))


def _cache_counter(turns: Sequence[Sample]) -> Check:
    ok = [s for s in turns if s.status == "ok"]
    failed = _flag_failure("cache-counter", ok, (CACHE_COUNT_MISMATCH,), len(ok))
    if failed is not None:
        return failed
    both = [s for s in ok if s.server_cached_tokens is not None and s.cached_tokens is not None and s.turn]
    if not both:
        return _check("cache-counter", "n/a", "the engine has no cache counter of its own per request", len(ok))
    s = both[0]
    return _check("cache-counter", "pass", f"{len(both)} repeats: usage {s.cached_tokens} = engine counter "
                  f"{s.server_cached_tokens} (first)", len(ok))


def _drafting_structured(ok: Sequence[Sample], speculative: bool) -> Check:
    structured = [s for s in ok if s.structured is not None]
    if not speculative:
        return _check("drafting-structured", "n/a", "speculation off", len(structured))
    if not structured:
        return _check("drafting-structured", "n/a", "no structured answer (the engine or arm refused them)", 0)
    failed = _flag_failure("drafting-structured", structured, (SPECULATION_DISENGAGED,), len(structured))
    if failed is not None:
        return failed
    plain = next((s for s in ok if s.structured is None and s.drafted), None)
    uncounted = next((s for s in structured if s.drafted is None), None)
    if plain is not None and uncounted is not None:
        # an attached server whose arm does not say it speculates: llama.cpp leaves draft_n out when it drafted
        # nothing, so no draft count under a schema where free text had one is drafting that stopped
        return _check("drafting-structured", "fail", f"{_where(uncounted)}: no draft count under "
                      f"{uncounted.structured}, where free text drafted {plain.drafted} ({_where(plain)})",
                      len(structured))
    counted = [s for s in structured if s.drafted is not None]
    if not counted:
        return _check("drafting-structured", "n/a", "structured answers carry no draft counts", len(structured))
    first = {s.structured: s for s in reversed(counted)}
    kinds = "; ".join(f"{k} drafted {s.drafted}" for k, s in sorted(first.items(), key=lambda kv: str(kv[0])))
    return _check("drafting-structured", "pass", kinds, len(structured))


def judge_arm(arm: str, engine: str, samples: Sequence[Sample], turns: Sequence[Sample],
              attempts: Sequence[ArmAttempt], *, speculative_asked: bool) -> ArmConformance:
    """Every check of one arm, from the battery's samples (``samples``: single prompts, plain and structured;
    ``turns``: the repeated-prefix session) and its engine starts (``attempts``: read-back, failures)."""
    failed = next((a for a in attempts if a.status == "failed"), None)
    started = [a for a in attempts if a.status != "failed"]
    version = next((a.version for a in attempts if a.version), None)
    ok = [s for s in samples if s.status == "ok"]
    drafting = [s for s in ok if s.drafted]
    speculative = speculative_asked or bool(drafting)
    out = ArmConformance(arm=arm, engine=engine, speculative=speculative, version=version)
    if failed is not None and not started:
        out.started, out.error = False, failed.error or failed.status
        return out
    if failed is not None:
        out.error = failed.error or failed.status
    n_max = next((a.effective.get("n_max") for a in started if isinstance(a.effective.get("n_max"), int)), None)
    out.checks += [_include_usage(ok), _usage_witness(ok), _events_tokens(ok), _reasoning(ok)]
    if drafting:
        out.checks += [_accepted(drafting), _drafted(drafting, n_max), _acceptance_sources(drafting)]
    else:
        why = "speculation off" if not speculative else "speculation on, but no token was drafted"
        out.checks += [_check(cid, "n/a", why, len(ok)) for cid in ("accepted", "drafted")]
        out.checks.append(_check("acceptance-sources", "fail" if speculative else "n/a", why, len(ok)))
    out.checks += [_cache_hit(turns), _cache_counter(turns), _drafting_structured(ok, speculative)]
    errors = [s for s in [*samples, *turns] if s.status != "ok"]
    if errors:
        out.error = out.error or f"{len(errors)} request(s) failed: {errors[0].error}"
    return out
