"""Structured requests per arm: how often the answer is valid, how fast the valid ones are, and whether
speculation kept drafting under the grammar.

The validity interval is Wilson's score interval for a proportion (it stays inside 0..1 and does not collapse to
a point at 0 % or 100 %, as a bootstrap of 0/1 values would with few requests). Speed against the baseline is
the paired ratio of ``core/analysis/stats.py`` (one comparison per pair) over the structured requests that
are valid on both sides: a fast invalid answer is not a fast answer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, Field

from ..results.sample import Sample
from .stats import LEVEL, N_BOOT, Interval, paired_ratio, verdict

__all__ = ["StructuredArm", "StructuredSummary", "wilson", "summarize_structured"]

STALL_PREFIX = "stall:"
DISENGAGED_PREFIX = "speculation-disengaged:"


class StructuredArm(BaseModel):
    """One arm's structured requests (summary.json ``structured.arms.ARM``)."""

    requests: int = Field(description="Structured requests answered (status ok).")
    valid: int
    validity_rate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    by_kind: dict[str, str] = Field(default_factory=dict, description="kind -> 'valid/requests'.")
    invalid_reasons: list[str] = Field(default_factory=list, description="A few distinct reasons, first seen first.")
    drafting_engaged: bool | None = Field(None, description="False: drafts on free text, none (or collapsed "
                                                            "acceptance) under a grammar; None: not speculating.")
    drafts_free_text: int | None = Field(None, description="Draft tokens proposed on the plain prompts.")
    drafts_structured: int | None = Field(None, description="Draft tokens proposed on the structured prompts.")
    acceptance_free_text: float | None = None
    acceptance_structured: float | None = None
    disengaged: int = Field(0, description="Structured samples flagged speculation-disengaged.")
    stalls: int = Field(0, description="Structured samples flagged stall.")
    max_gap_s: float | None = Field(None, description="Longest pause mid-answer over the arm's structured samples.")
    decode_tps: float | None = Field(None, description="Median decode rate of the valid structured answers.")
    vs_baseline: Interval | None = Field(None, description="Paired decode ratio over the baseline, on structured "
                                                           "requests valid on both sides.")
    verdict: str | None = None
    less_valid_than_baseline: bool = Field(False, description="Fewer valid answers than the baseline (rate): "
                                                              "never recommended, whatever its speed.")


class StructuredSummary(BaseModel):
    arms: dict[str, StructuredArm] = Field(default_factory=dict)


def wilson(successes: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Wilson's score interval of a proportion (z from the normal quantile of ``level``)."""
    from statistics import NormalDist

    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _rate(accepted: int, drafted: int) -> float | None:
    return accepted / drafted if drafted else None


def _arm(samples: list[Sample], level: float) -> StructuredArm | None:
    ok = [s for s in samples if s.status == "ok"]
    structured = [s for s in ok if s.structured is not None]
    if not structured:
        return None
    valid = [s for s in structured if s.valid]
    out = StructuredArm(requests=len(structured), valid=len(valid))
    out.validity_rate = len(valid) / len(structured)
    out.ci_low, out.ci_high = wilson(len(valid), len(structured), level)
    for kind in dict.fromkeys(s.structured for s in structured):
        mine = [s for s in structured if s.structured == kind]
        out.by_kind[str(kind)] = f"{sum(bool(s.valid) for s in mine)}/{len(mine)}"
    out.invalid_reasons = list(dict.fromkeys(s.invalid_reason for s in structured if s.invalid_reason))[:3]
    plain = [s for s in ok if s.structured is None and s.drafted is not None]
    drafting = [s for s in structured if s.drafted is not None]
    if plain or drafting:
        out.drafts_free_text = sum(s.drafted or 0 for s in plain) if plain else None
        out.drafts_structured = sum(s.drafted or 0 for s in drafting) if drafting else None
        out.acceptance_free_text = _rate(sum(s.accepted or 0 for s in plain), out.drafts_free_text or 0)
        out.acceptance_structured = _rate(sum(s.accepted or 0 for s in drafting), out.drafts_structured or 0)
    out.disengaged = sum(any(f.startswith(DISENGAGED_PREFIX) for f in s.flags) for s in structured)
    if out.drafts_free_text and out.drafts_structured is not None:
        out.drafting_engaged = out.disengaged == 0 and out.drafts_structured > 0
    out.stalls = sum(any(f.startswith(STALL_PREFIX) for f in s.flags) for s in structured)
    gaps = [s.max_gap_s for s in structured if s.max_gap_s is not None]
    out.max_gap_s = max(gaps) if gaps else None
    rates = sorted(s.decode_tps for s in valid if s.decode_tps is not None)
    out.decode_tps = rates[len(rates) // 2] if rates else None
    return out


def summarize_structured(samples: Sequence[Sample], arm_order: Sequence[str], baseline: str | None, *,
                         n_boot: int = N_BOOT, level: float = LEVEL, seed: int = 0) -> StructuredSummary | None:
    """Every arm's structured section, or None when the run sent no structured request."""
    by_arm: dict[str, list[Sample]] = {}
    for s in samples:
        by_arm.setdefault(s.arm, []).append(s)
    order = [a for a in arm_order if a in by_arm] + [a for a in by_arm if a not in arm_order]
    arms = {name: arm for name in order if (arm := _arm(by_arm[name], level)) is not None}
    if not arms:
        return None
    ref = arms.get(baseline or "")
    ref_valid = [s for s in by_arm.get(baseline or "", []) if s.structured is not None and s.valid]
    for name, arm in arms.items():
        if ref is None or name == baseline:
            continue
        mine = [s for s in by_arm[name] if s.structured is not None and s.valid]
        arm.vs_baseline = paired_ratio(mine, ref_valid, n_boot=n_boot, level=level, seed=seed)
        arm.verdict = verdict(arm.vs_baseline) if arm.vs_baseline is not None else None
        # a gate, not a claim: any shortfall keeps the arm out of the recommendation
        arm.less_valid_than_baseline = (arm.validity_rate or 0) < (ref.validity_rate or 0)
    return StructuredSummary(arms=arms)
