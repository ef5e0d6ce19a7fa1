"""The race of ``bakeoff tune``: which candidates a look drops, and what the race found at its end.

Every number is a paired ratio (:func:`~bakeoff.core.analysis.stats.paired_ratio`: the same requests of two arms
in the same passes). After each pass from the third on, the current best is the arm with the highest decode ratio
against the baseline (the baseline itself counts, at 1.0), and each other candidate is compared with it at the
level :func:`~bakeoff.core.analysis.stats.verdict_stop_level` gives that look: the error budget
``--stop-on-verdict`` spends over its looks, so re-reading the intervals after every pass does not multiply false
drops. A candidate is dropped only when that interval excludes it (its ratio to the best is separably below 1).
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
from .stats import MIN_ADAPTIVE_PASSES, N_BOOT, Interval, paired_ratio, verdict_stop_level

__all__ = ["TUNE_FILE", "Look", "RaceCandidate", "Status", "TuneResult", "TuneVerify", "VerifyPoint", "look",
           "ratio_to_baseline", "read_tune", "separable"]

Status = Literal["winner", "plateau", "dropped"]
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


class VerifyPoint(BaseModel):
    """One concurrency level of the verification: each arm's paired ratio against spec-off there."""

    streams: int
    ratios: dict[str, Interval | None] = Field(default_factory=dict)
    collapse: bool = Field(False, description="The winner is separably slower than spec-off here.")


class TuneVerify(BaseModel):
    run_dir: str
    arms: list[str]
    points: list[VerifyPoint] = Field(default_factory=list)
    collapse: bool = False
    collapse_at: list[int] = Field(default_factory=list, description="Stream counts where the winner collapsed.")


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
         seed: int = 0, n_boot: int = N_BOOT) -> Look:
    """The look after ``passes_done`` passes over the ``alive`` candidates (the baseline is never dropped: it is
    what every ratio is read against)."""
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
        if ci is not None and ci.hi < 1:
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
