"""The tables of a run's swept points: the n-max (or any config) sweep, the depth sweep and the
concurrency sweep, as typed sections of the run summary.

Every figure uses the main table's statistics (core/analysis/stats.py): a median decode rate with its bootstrap
interval (passes resampled, then requests), and "vs baseline" as the median of per-request ratios paired
with the baseline arm at the same point, with its interval and verdict. The renderers (core/reports/tables.py)
only format these rows, so the terminal, report.md, report.html and summary.json show the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from ..analysis.acceptance import ArmAcceptance, arm_acceptance
from ..analysis.stats import (
    EQUIVALENCE_MARGIN,
    LEVEL,
    N_BOOT,
    Comparison,
    Interval,
    bootstrap_ci,
    describe_arm,
    paired_ratio,
    verdict,
)
from ..config.schema import Arm
from ..results.sample import Sample

__all__ = ["PointRow", "PointTable", "concurrency_table", "depth_table", "sweep_table"]

PointValue = int | float | str | bool | None


class PointRow(BaseModel):
    """One arm at one point of a sweep."""

    arm: str
    point: dict[str, PointValue] = Field(default_factory=dict, description="The swept values of this row.")
    n: int = Field(0, description="Successful requests with a decode rate.")
    errors: int = 0
    decode: Interval | None = Field(None, description="Median decode tok/s (per stream under concurrency).")
    vs_baseline: Comparison | None = Field(None, description="Paired ratio against the baseline arm at the same "
                                           "point; None for the baseline itself or without partners.")
    is_baseline: bool = False
    acceptance: ArmAcceptance | None = Field(None, description="Pooled over the row's requests.")
    ttft_s: float | None = Field(None, description="Median time to first token.")
    prefill_tps: float | None = Field(None, description="Median prefill tok/s.")
    prompt_tokens: list[int] = Field(default_factory=list, description="Prompt token counts seen (depth).")
    needle: tuple[int, int] | None = Field(None, description="Depth with needle: (found, checked).")
    aggregate: Interval | None = Field(None, description="Concurrency: median over batches of all tokens / batch "
                                       "wall time (prefill included).")
    batches: int | None = None


class PointTable(BaseModel):
    kind: Literal["sweep", "depth", "concurrency"]
    title: str
    keys: list[str] = Field(description="The point's columns, e.g. speculative.n_max, depth, streams.")
    rows: list[PointRow] = Field(default_factory=list)


class _Stats:
    """The bootstrap settings of one summary, shared by every row."""

    def __init__(self, baseline: str | None, n_boot: int, level: float, seed: int, margin: float) -> None:
        self.baseline, self.n_boot, self.level, self.seed, self.margin = baseline, n_boot, level, seed, margin

    def row(self, arm: str, point: dict[str, PointValue], group: list[Sample], reference: list[Sample]) -> PointRow:
        described = describe_arm(arm, group, n_boot=self.n_boot, level=self.level, seed=self.seed)
        row = PointRow(arm=arm, point=point, n=described.n, errors=described.errors, decode=described.median,
                       is_baseline=arm == self.baseline, acceptance=arm_acceptance(arm, group),
                       ttft_s=described.ttft_median, prefill_tps=described.prefill_median)
        if arm != self.baseline and reference:
            ratio = paired_ratio(group, reference, n_boot=self.n_boot, level=self.level, seed=self.seed)
            if ratio is not None and self.baseline is not None:
                row.vs_baseline = Comparison(arm=arm, reference=self.baseline, ratio=ratio,
                                             verdict=verdict(ratio, self.margin), margin=self.margin)
        return row


def _ordered(names: set[str], arm_order: Sequence[str]) -> list[str]:
    return [a for a in arm_order if a in names] + sorted(names - set(arm_order))


def sweep_table(samples: Sequence[Sample], arms: Sequence[Arm], baseline: str | None, *, n_boot: int = N_BOOT,
                level: float = LEVEL, seed: int = 0, margin: float = EQUIVALENCE_MARGIN) -> PointTable | None:
    """The community sweep table (the n-max table when n_max varies): one row per arm with its swept values.

    None when the run is not a sweep (no arm has ``swept`` and n_max is the same everywhere). Depth and
    concurrency requests are left out when plain ones exist (their rates answer another question).
    """
    keys: list[str] = []
    for a in arms:
        keys += [k for k in a.swept if k not in keys]
    n_max = {a.name: a.speculative.n_max for a in arms}
    varies = len({v for v in n_max.values() if v is not None}) > 1  # two set n_max values make an n-max table
    if not keys and not varies:
        return None
    if varies and "speculative.n_max" not in keys:
        keys.insert(0, "speculative.n_max")
    plain = [s for s in samples if s.depth is None and s.concurrency is None and s.rate is None]
    use = plain or list(samples)
    stats = _Stats(baseline, n_boot, level, seed, margin)
    reference = [s for s in use if s.arm == baseline]
    rows = []
    for a in arms:
        point: dict[str, PointValue] = {
            k: a.swept.get(k, n_max[a.name] if k == "speculative.n_max" else None) for k in keys}
        rows.append(stats.row(a.name, point, [s for s in use if s.arm == a.name], reference))
    title = "n-max sweep" if "speculative.n_max" in keys else "sweep"
    return PointTable(kind="sweep", title=title, keys=keys, rows=rows)


def depth_table(samples: Sequence[Sample], arm_order: Sequence[str], baseline: str | None, *,
                n_boot: int = N_BOOT, level: float = LEVEL, seed: int = 0,
                margin: float = EQUIVALENCE_MARGIN) -> PointTable | None:
    """One row per arm and depth (target prompt tokens, chat template included); None without depths."""
    at_depth = [s for s in samples if s.depth is not None]
    if not at_depth:
        return None
    stats = _Stats(baseline, n_boot, level, seed, margin)
    rows = []
    for arm in _ordered({s.arm for s in at_depth}, arm_order):
        for depth in sorted({s.depth for s in at_depth if s.arm == arm and s.depth is not None}):
            group = [s for s in at_depth if s.arm == arm and s.depth == depth]
            reference = [s for s in at_depth if s.arm == baseline and s.depth == depth]
            row = stats.row(arm, {"depth": depth}, group, reference)
            ok = [s for s in group if s.status == "ok"]
            row.prompt_tokens = sorted({s.prompt_tokens for s in ok if s.prompt_tokens is not None})
            found = [s.needle_found for s in ok if s.needle_found is not None]
            row.needle = (sum(found), len(found)) if found else None
            rows.append(row)
    return PointTable(kind="depth", title="depth sweep", keys=["depth"], rows=rows)


def concurrency_table(samples: Sequence[Sample], arm_order: Sequence[str], baseline: str | None, *,
                      n_boot: int = N_BOOT, level: float = LEVEL, seed: int = 0,
                      margin: float = EQUIVALENCE_MARGIN) -> PointTable | None:
    """One row per arm and number of simultaneous streams; None without a concurrency sweep."""
    swept = [s for s in samples if s.concurrency is not None]
    if not swept:
        return None
    stats = _Stats(baseline, n_boot, level, seed, margin)
    rows = []
    for arm in _ordered({s.arm for s in swept}, arm_order):
        for level_ in sorted({s.concurrency for s in swept if s.arm == arm and s.concurrency is not None}):
            group = [s for s in swept if s.arm == arm and s.concurrency == level_]
            reference = [s for s in swept if s.arm == baseline and s.concurrency == level_]
            row = stats.row(arm, {"streams": level_}, group, reference)
            batches: dict[str, list[Sample]] = {}
            for s in group:
                batches.setdefault(s.batch_id or "", []).append(s)
            whole = [b for b in batches.values() if b[0].batch_wall_s and all(s.status == "ok" for s in b)]
            row.aggregate = bootstrap_ci([sum(s.completion_tokens or 0 for s in b) / (b[0].batch_wall_s or 1.0)
                                          for b in whole], [b[0].pass_index for b in whole], n_boot=n_boot,
                                         level=level, seed=seed, key=f"aggregate/{arm}/{level_}")
            row.batches = len(batches)
            row.errors = sum(s.status != "ok" for s in group)
            rows.append(row)
    return PointTable(kind="concurrency", title="concurrency sweep", keys=["streams"], rows=rows)
