"""Per-arm and per-prompt summaries of samples, and the community table (arm · overall median ·
overall mean · one column per prompt · acceptance)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from .sample import Sample

__all__ = ["ArmSummary", "summarize", "community_rows"]


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


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(samples: Iterable[Sample], arm_order: list[str] | None = None) -> list[ArmSummary]:
    by_arm: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        by_arm[s.arm].append(s)
    names = [a for a in (arm_order or []) if a in by_arm] + sorted(a for a in by_arm if a not in (arm_order or []))
    out = []
    for name in names:
        group = by_arm[name]
        ok = [s for s in group if s.status == "ok" and s.decode_tps is not None]
        rates = [s.decode_tps for s in ok if s.decode_tps is not None]
        summary = ArmSummary(arm=name, engine=group[0].engine, n=len(ok),
                             errors=sum(s.status == "error" for s in group),
                             flagged=sum(bool(s.flags) for s in group))
        if rates:
            summary.median, summary.mean = statistics.median(rates), statistics.fmean(rates)
            summary.min, summary.max = min(rates), max(rates)
            tokens = sum((s.completion_tokens or 0) - (s.n_first or 0) for s in ok)
            seconds = sum(s.decode_s or 0.0 for s in ok)
            summary.combined = tokens / seconds if seconds else None
        prompts: dict[str, list[float]] = defaultdict(list)
        for s in ok:
            prompts[s.prompt].append(s.decode_tps)  # type: ignore[arg-type]
        summary.per_prompt = {p: statistics.median(v) for p, v in prompts.items()}
        with_drafts = [s for s in ok if s.drafted is not None]
        summary.has_draft_counts = bool(with_drafts)
        summary.drafted = sum(s.drafted or 0 for s in with_drafts)
        summary.accepted = sum(s.accepted or 0 for s in with_drafts)
        rates_acc = [s.acceptance for s in with_drafts if s.acceptance is not None]
        summary.acceptance_range = (min(rates_acc), max(rates_acc)) if rates_acc else None
        summary.server_median = _median([s.server_decode_tps for s in ok if s.server_decode_tps is not None])
        summary.event_count_median = _median([s.event_count_decode_tps for s in ok
                                              if s.event_count_decode_tps is not None])
        per_event = [s.max_tokens_per_event for s in ok if s.max_tokens_per_event is not None]
        summary.max_tokens_per_event = max(per_event) if per_event else None
        summary.ttft_median = _median([s.ttft_s for s in ok if s.ttft_s is not None])
        summary.prefill_median = _median([s.prefill_tps for s in ok if s.prefill_tps is not None])
        out.append(summary)
    return out


def community_rows(summaries: list[ArmSummary], prompts: list[str]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the community table, as strings."""
    header = ["arm", "Overall median", "Overall mean", *prompts, "Acceptance"]
    rows = []
    for s in summaries:
        if s.acceptance is not None:
            acc = f"{s.acceptance:.1%} ({s.accepted}/{s.drafted})"
        else:
            acc = "0 drafted" if s.has_draft_counts else "–"
        rows.append([s.arm, _fmt(s.median), _fmt(s.mean), *(_fmt(s.per_prompt.get(p)) for p in prompts), acc])
    return header, rows


def _fmt(v: float | None) -> str:
    return "–" if v is None else f"{v:.1f}"
