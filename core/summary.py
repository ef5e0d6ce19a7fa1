"""Per-arm summaries in the spine's simple shape (plain medians, no intervals).

A thin layer over core/stats.py, which holds the one implementation of every statistic; new code should
use :func:`bakeoff.core.stats.describe_arms` or :mod:`bakeoff.core.reports` directly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .sample import Sample
from .stats import ArmStats, describe_arms
from .textfmt import DASH, fmt

__all__ = ["ArmSummary", "summarize", "community_rows"]

_QUICK_BOOT = 200  # the intervals are discarded here; keep their cost small


@dataclass
class ArmSummary:
    arm: str
    engine: str
    n: int = 0
    errors: int = 0
    flagged: int = 0
    median: float | None = None
    mean: float | None = None
    min: float | None = None
    max: float | None = None
    combined: float | None = None  # sum of decode tokens / sum of decode seconds
    per_prompt: dict[str, float] = field(default_factory=dict)  # prompt -> median decode tok/s
    drafted: int = 0
    accepted: int = 0
    acceptance_range: tuple[float, float] | None = None
    server_median: float | None = None
    event_count_median: float | None = None
    max_tokens_per_event: int | None = None
    ttft_median: float | None = None
    has_draft_counts: bool = False  # the engine reported draft counts (possibly zero)
    prefill_median: float | None = None

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None


def _plain(a: ArmStats) -> ArmSummary:
    return ArmSummary(
        arm=a.arm, engine=a.engine, n=a.n, errors=a.errors, flagged=a.flagged,
        median=a.median.estimate if a.median else None, mean=a.mean, min=a.min, max=a.max, combined=a.combined,
        per_prompt={p.prompt: p.median.estimate for p in a.per_prompt if p.median},
        drafted=a.drafted, accepted=a.accepted, acceptance_range=a.acceptance_range, server_median=a.server_median,
        event_count_median=a.event_count_median, max_tokens_per_event=a.max_tokens_per_event,
        ttft_median=a.ttft_median, has_draft_counts=a.has_draft_counts, prefill_median=a.prefill_median)


def summarize(samples: Iterable[Sample], arm_order: list[str] | None = None) -> list[ArmSummary]:
    return [_plain(a) for a in describe_arms(samples, arm_order or [], n_boot=_QUICK_BOOT)]


def community_rows(summaries: list[ArmSummary], prompts: list[str]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the community table, as strings (without intervals; see reports.tables)."""
    header = ["arm", "Overall median", "Overall mean", *prompts, "Acceptance"]
    rows = []
    for s in summaries:
        if s.acceptance is not None:
            acc = f"{s.acceptance:.1%} ({s.accepted}/{s.drafted})"
        else:
            acc = "0 drafted" if s.has_draft_counts else DASH
        rows.append([s.arm, fmt(s.median), fmt(s.mean), *(fmt(s.per_prompt.get(p)) for p in prompts), acc])
    return header, rows
