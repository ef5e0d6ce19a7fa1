"""The race of ``bakeoff tune``: which candidates a look drops, and what the race found at its end.

Every number is a paired ratio (:func:`~bakeoff.core.analysis.stats.paired_ratio`: the same requests of two arms
in the same passes). After each pass from the third on, the current best is the arm with the highest decode ratio
against the baseline (the baseline itself counts, at 1.0), and each other candidate is compared with it at the
level :func:`~bakeoff.core.analysis.stats.verdict_stop_level` gives that look: the error budget
``--stop-on-verdict`` spends over its looks, so re-reading the intervals after every pass does not multiply false
drops. A candidate is dropped only when that interval lies below 1 and is not within the equivalence margin of it:
separably slower than the best, and not shown to be as good as it (a tight interval at 0.99× is equivalent, not a
loss; dropping it would call the other of two identical settings the winner).
The control is per compared pair, as ``--stop-on-verdict``'s is per arm: with many candidates, the chance that
*some* identical candidate is dropped grows with their number (docs/tune.md).

What survives is a plateau: arms no look could tell apart from the best. The simplest of them is named
(:func:`~bakeoff.core.config.tune.simplicity`); it is called the winner only when it is alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..results.sample import Sample
from .stats import (
    EQUIVALENCE_MARGIN,
    MIN_ADAPTIVE_PASSES,
    MIN_PAIRS,
    N_BOOT,
    Interval,
    Verdict,
    margin_text,
    paired_ratio,
    passes_to_decide,
    too_few_pairs,
    undecided,
    verdict,
    verdict_stop_level,
)

__all__ = ["TUNE_FILE", "Look", "NothingDrafted", "RaceCandidate", "ScheduleLevel", "Status", "TuneResult",
           "TuneVerify", "VerifyPoint", "Decision", "batch_schedule", "look", "n_max_by_streams", "nothing_drafted",
           "ratio_to_baseline", "read_tune", "separable", "tune_decision"]

Status = Literal["winner", "plateau", "dropped"]
# the gate's outcomes, for a tuner: a setting named on evidence (or spec-off kept on evidence), an interval that
# cannot tell yet (exit 6, as a gate's), or nothing to read a ratio against
Decision = Literal["decided", "inconclusive", "no verdict"]
TUNE_FILE = "tune.json"  # in the race's run directory; its report's summary.json carries it as ``tune``


class RaceCandidate(BaseModel):
    """One arm of the race (summary.json ``tune.candidates[i]``); ratio and interval are against the baseline,
    at 95 %, over every request the arm ran."""

    arm: str
    settings: dict[str, Any] = Field(description="What it changes from the baseline (dotted keys).")
    status: Status
    dropped_after_requests: int | None = Field(None, description="Its successful requests when it was dropped.")
    dropped_at_pass: int | None = None
    dropped_vs: str | None = Field(None, description="The best arm of the look that dropped it.")
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    pairs: int = Field(0, description="Paired requests behind the ratio.")
    verdict: Verdict | None = Field(None, description="Its ratio to the baseline in the words of every comparison.")

    def interval(self) -> Interval | None:
        if self.ratio is None or self.ci_low is None or self.ci_high is None:
            return None
        return Interval(estimate=self.ratio, lo=self.ci_low, hi=self.ci_high, n=self.pairs)


class VerifyPoint(BaseModel):
    """One concurrency level of the verification: each arm's paired ratio against spec-off there."""

    streams: int
    ratios: dict[str, Interval | None] = Field(default_factory=dict)
    collapse: bool = Field(False, description="The winner is separably slower than spec-off here.")


class NothingDrafted(BaseModel):
    """The cost of speculation switched on with nothing drafted (summary.json ``tune.verify.nothing_drafted``):
    the named setting's requests whose own drafted count is 0, paired with spec-off's same request."""

    requests: int = Field(0, description="Paired requests of the named setting that drafted nothing.")
    ratio: float | None = Field(None, description="Their paired decode ratio against spec-off (median).")
    ci_low: float | None = None
    ci_high: float | None = None
    reason: str | None = Field(None, description="Why it could not be measured (ratio is None).")


class TuneVerify(BaseModel):
    run_dir: str
    arms: list[str]
    points: list[VerifyPoint] = Field(default_factory=list)
    collapse: bool = False
    collapse_at: list[int] = Field(default_factory=list, description="Stream counts where the winner collapsed.")
    nothing_drafted: NothingDrafted | None = None


class ScheduleLevel(BaseModel):
    """One stream count of a per-batch-size n_max schedule, and what decided it."""

    streams: int
    n_max: int = Field(description="0: speculation off at this level.")
    arm: str | None = Field(description="The arm whose n_max this is (None: spec-off's).")
    why: str


class TuneResult(BaseModel):
    """summary.json ``tune``."""

    baseline: str
    candidates: list[RaceCandidate] = Field(default_factory=list)
    winner: dict[str, Any] = Field(default_factory=dict, description="arm, settings, engine_config, chosen_by, "
                                                                     "plateau, winner_file.")
    verify: TuneVerify | None = None
    spent_s: float = 0.0
    budget_s: float = 0.0
    passes: int = 0
    max_passes: int = 0
    stopped: str = Field("", description="Why the race ended: one arm left, max passes, or the budget.")
    undecided: list[str] = Field(default_factory=list, description="Arms still racing when the budget ran out: "
                                                                   "more passes might have told them apart.")
    promoted: dict[str, Any] | None = None
    decision: Decision = Field("decided", description="decided: the named setting is shown faster than the baseline, "
                               "or no candidate can be (each slower or equivalent); inconclusive: an interval "
                               "cannot tell yet (exit 6); no verdict: the baseline measured nothing.")
    decision_why: str = ""


def tune_decision(named: str, baseline: str, candidates: Sequence[RaceCandidate], passes: int, margin: float
                  ) -> tuple[Decision, str]:
    """The gate's rule for the tuner's answer: a candidate is named on evidence only when its interval against the
    baseline lies above 1; spec-off is kept on evidence only when no candidate still in the race could be faster
    by more than ``margin`` (each slower or within it). Anything else is inconclusive, with what would decide it."""
    if passes < MIN_ADAPTIVE_PASSES:
        return "inconclusive", (f"{passes} pass(es) ran and the first look needs {MIN_ADAPTIVE_PASSES}: nothing "
                                "was compared")
    by_arm = {c.arm: c for c in candidates}
    if named != baseline:
        c = by_arm[named]
        ci = c.interval()
        if ci is not None and verdict(ci, margin) == "faster":
            return "decided", f"{named} is faster than {baseline}: {ci.ratio_text()}"
        return "inconclusive", f"{named} is not told apart from {baseline}: " + _open(ci, passes)
    open_ = [(c.arm, ci) for c in candidates if c.status != "dropped" and (ci := c.interval()) is not None
             and (undecided(ci, margin) or too_few_pairs(ci))]
    if not open_:
        return "decided", (f"no candidate is faster than {baseline} (each dropped, slower, or within "
                           f"±{margin_text(margin)})")
    return "inconclusive", "; ".join(f"{arm} may be faster than {baseline}: " + _open(ci, passes)
                                     for arm, ci in open_)


def _open(ci: Interval | None, passes: int) -> str:
    if ci is None:
        return "no paired ratio"
    if too_few_pairs(ci):
        return f"{ci.ratio_text()} from {ci.n} paired request(s), too few pairs (a verdict needs {MIN_PAIRS})"
    need = passes_to_decide(ci.estimate, ci.lo, ci.hi, 1.0, passes)
    return ci.ratio_text() + (f", about {need} passes would decide it" if need else "")


def _by_arm(samples: Sequence[Sample]) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for s in samples:
        out.setdefault(s.arm, []).append(s)
    return out


def ratio_to_baseline(samples: Sequence[Sample], arm: str, baseline: str, *, level: float = 0.95, seed: int = 0,
                      n_boot: int = N_BOOT) -> Interval | None:
    groups = _by_arm(samples)
    return paired_ratio(groups.get(arm, []), groups.get(baseline, []), level=level, seed=seed, n_boot=n_boot)


class Look(BaseModel):
    """One look of the race: the best arm, the level read, and who is dropped against the best."""

    passes: int
    level: float | None = Field(None, description="None: too few passes to drop anything yet.")
    best: str
    dropped: dict[str, Interval] = Field(default_factory=dict, description="Arm -> its interval against the best.")


def look(samples: Sequence[Sample], alive: Sequence[str], baseline: str, passes_done: int, max_passes: int, *,
         margin: float = EQUIVALENCE_MARGIN, seed: int = 0, n_boot: int = N_BOOT) -> Look:
    """The look after ``passes_done`` passes over the ``alive`` candidates (the baseline is never dropped: it is
    what every ratio is read against). ``margin``: ``workload.equivalence_margin``; a candidate whose interval
    against the best lies within 1 - margin and 1 stays."""
    groups = _by_arm(samples)
    estimates = {baseline: 1.0}
    for name in alive:
        ci = paired_ratio(groups.get(name, []), groups.get(baseline, []), seed=seed, n_boot=n_boot)
        if ci is not None:
            estimates[name] = ci.estimate
    best = max(estimates, key=lambda n: (estimates[n], n == baseline))
    if passes_done < MIN_ADAPTIVE_PASSES:
        return Look(passes=passes_done, best=best)
    level = verdict_stop_level(passes_done, max_passes)
    dropped = {}
    for name in alive:
        if name == best:
            continue
        ci = paired_ratio(groups.get(name, []), groups.get(best, []), level=level, seed=seed, n_boot=n_boot)
        if ci is not None and ci.hi < 1 and ci.lo < 1 - margin:
            dropped[name] = ci
    return Look(passes=passes_done, level=level, best=best, dropped=dropped)


def separable(samples: Sequence[Sample], arm: str, other: str, passes_done: int, max_passes: int, *,
              seed: int = 0, n_boot: int = N_BOOT) -> bool:
    """Whether ``arm`` and ``other`` are told apart at this look's level (either way)."""
    if passes_done < MIN_ADAPTIVE_PASSES:
        return False
    groups = _by_arm(samples)
    ci = paired_ratio(groups.get(arm, []), groups.get(other, []), level=verdict_stop_level(passes_done, max_passes),
                      seed=seed, n_boot=n_boot)
    return ci is not None and (ci.lo > 1 or ci.hi < 1)


def read_tune(run_dir: Path) -> TuneResult | None:
    """The tune result of a race's run directory (None for any other run)."""
    path = run_dir / TUNE_FILE
    return TuneResult.model_validate_json(path.read_text()) if path.exists() else None


def nothing_drafted(samples: Sequence[Sample], arm: str, baseline: str, *, seed: int = 0,
                    n_boot: int = N_BOOT) -> NothingDrafted:
    """The paired decode ratio against ``baseline`` of ``arm``'s requests that drafted nothing (their own
    per-request ``drafted`` is 0): what having speculation on costs when it proposes nothing.

    Those requests are the ones the speculator found nothing for (an n-gram lookup with no match), so the ratio
    is for them, not for an average request; each is paired with the baseline's same prompt, point and pass."""
    groups = _by_arm(samples)
    mine = [s for s in groups.get(arm, []) if s.status == "ok"]
    counted = [s for s in mine if s.drafted is not None]
    if not mine:
        return NothingDrafted(reason=f"{arm} has no valid request")
    if not counted:
        why = next((v for s in mine for k, v in s.acceptance_unavailable.items() if k == "drafted"), None)
        return NothingDrafted(reason=f"the engine gave no per-request drafted count for {arm}"
                                     + (f" ({why})" if why else ""))
    if not any(s.drafted == 0 for s in counted):
        return NothingDrafted(reason=f"every one of {arm}'s {len(counted)} counted requests drafted tokens: "
                                     "none ran with nothing drafted")
    ci = paired_ratio(mine, groups.get(baseline, []), seed=seed, n_boot=n_boot, where=lambda s: s.drafted == 0)
    if ci is None:
        return NothingDrafted(reason=f"no request of {arm} that drafted nothing has a {baseline} partner")
    return NothingDrafted(requests=ci.n, ratio=ci.estimate, ci_low=ci.lo, ci_high=ci.hi)


def n_max_by_streams(samples: Sequence[Sample], n_max: dict[str, int], named: str, baseline: str, *,
                     seed: int = 0, n_boot: int = N_BOOT) -> list[ScheduleLevel]:
    """The n_max to use at each stream count the samples were measured at (``Sample.concurrency``).

    ``n_max`` maps the named arm and the arms that differ from it only in n_max to their n_max. At each level
    the named setting's n_max stays unless the paired numbers say otherwise there: another arm separably faster
    than the named one (95 % interval wholly above 1; the fastest such) gives its n_max, and when the arm so
    chosen is separably slower than ``baseline`` there (a collapse) the level gets 0, speculation off.
    Differences no interval separates change nothing: a schedule is not drawn from noise."""
    levels = sorted({s.concurrency for s in samples if s.concurrency is not None and s.arm == named})
    out = []
    for streams in levels:
        here = [s for s in samples if s.concurrency == streams]
        faster = {a: ci for a in n_max if a != named
                  if (ci := ratio_to_baseline(here, a, named, seed=seed, n_boot=n_boot)) is not None and ci.lo > 1}
        chosen = max(faster, key=lambda a: faster[a].estimate) if faster else named
        own = ratio_to_baseline(here, chosen, baseline, seed=seed, n_boot=n_boot)
        if own is not None and own.hi < 1:
            level = ScheduleLevel(streams=streams, n_max=0, arm=None,
                                  why=f"{chosen} {own.estimate:.2f}x ({own.lo:.2f}-{own.hi:.2f}) of {baseline}")
        elif chosen != named:
            ci = faster[chosen]
            level = ScheduleLevel(streams=streams, n_max=n_max[chosen], arm=chosen,
                                  why=f"{chosen} {ci.estimate:.2f}x ({ci.lo:.2f}-{ci.hi:.2f}) of {named}")
        else:
            level = ScheduleLevel(streams=streams, n_max=n_max[named], arm=named,
                                  why=f"no arm separably faster, not separably slower than {baseline}")
        out.append(level)
    return out


def batch_schedule(levels: Sequence[ScheduleLevel]) -> list[list[int]] | None:
    """``levels`` as inclusive batch-size ranges ``[first, last, n_max]`` (vLLM's
    ``num_speculative_tokens_per_batch_size``), or None when every level takes the same n_max.

    The first range starts at 1; a level's n_max holds from it up to the next measured level, and past the last
    one (vLLM carries the last entry forward). Between two measured levels the lower one's n_max is kept: what
    lies there was not measured."""
    if len({lv.n_max for lv in levels}) < 2:
        return None
    entries: list[list[int]] = []
    for i, lv in enumerate(levels):
        first = 1 if i == 0 else lv.streams
        last = levels[i + 1].streams - 1 if i + 1 < len(levels) else lv.streams
        if entries and entries[-1][2] == lv.n_max:
            entries[-1][1] = last
        else:
            entries.append([first, last, lv.n_max])
    return entries
