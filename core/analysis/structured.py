"""Structured requests per arm: how often the answer is valid, how fast the valid ones are, and whether
speculation kept drafting under the grammar.

The validity interval is Wilson's score interval for a proportion (it stays inside 0..1 and does not collapse to
a point at 0 % or 100 %, as a bootstrap of 0/1 values would with few requests). Speed against the baseline is
the paired ratio of ``core/analysis/stats.py`` (one comparison per pair) over the structured requests that
are valid on both sides: a fast invalid answer is not a fast answer.

Drafting under the grammar is counted, not voted: an arm drafted on k of n structured requests. A lookup drafter
(n-gram, suffix) proposes only what it can match in text already seen, so a structured request with no draft is
"nothing to match" once it drafts on others; a model drafter (draft model, EAGLE3, MTP, DFlash) always has a
guess, so drafting nothing on every grammar request while it drafts on free text means the engine switched it off.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from ..results.flags import SPECULATION_DISENGAGED, STALL
from ..results.sample import Sample
from .stats import EQUIVALENCE_MARGIN, LEVEL, N_BOOT, Interval, paired_ratio, verdict

__all__ = ["DraftingState", "KindDrafting", "StructuredArm", "StructuredSummary", "LOOKUP_METHODS", "drafting_state",
           "wilson", "summarize_structured"]

DraftingState = Literal["engaged", "partly engaged", "disengaged"]
LOOKUP_METHODS = frozenset({"ngram", "suffix"})  # speculative.method values that draft by matching seen text


class KindDrafting(BaseModel):
    """Drafting on one kind of structured request (json_schema, tool_call)."""

    drafting: DraftingState | None = None
    drafted_requests: int = Field(0, description="Requests of this kind that drafted at least one token.")
    structured_requests: int = Field(0, description="Requests of this kind with a draft count.")
    draft_tokens: int = 0
    acceptance: float | None = None


class StructuredArm(BaseModel):
    """One arm's structured requests (summary.json ``structured.arms.ARM``)."""

    requests: int = Field(description="Structured requests answered (status ok).")
    valid: int
    validity_rate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    by_kind: dict[str, str] = Field(default_factory=dict, description="kind -> 'valid/requests'.")
    invalid_reasons: list[str] = Field(default_factory=list, description="A few distinct reasons, first seen first.")
    drafting: DraftingState | None = Field(None, description="engaged: drafted on every structured request (a "
                                           "lookup drafter: on all but those with nothing to match); partly engaged: "
                                           "on some; disengaged: on none while it drafts on free text; None: not "
                                           "speculating.")
    drafted_requests: int | None = Field(None, description="Structured requests that drafted at least one token.")
    structured_requests: int | None = Field(None, description="Structured requests with a draft count.")
    nothing_to_match: int = Field(0, description="Lookup drafter: structured requests with no draft, read as "
                                                 "nothing to match rather than switched off.")
    collapsed: int = Field(0, description="Structured requests that drafted but were flagged for an acceptance "
                                          "collapsed against free text.")
    drafting_by_kind: dict[str, KindDrafting] = Field(default_factory=dict)
    drafting_engaged: bool | None = Field(None, description="Derived from drafting, kept for older readers: True "
                                                            "engaged or partly engaged, False disengaged.")
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

    @model_validator(mode="after")
    def _from_older_summary(self) -> StructuredArm:
        """A summary.json written before ``drafting`` existed still reads with its one boolean."""
        if self.drafting is None and self.drafting_engaged is not None:
            self.drafting = "engaged" if self.drafting_engaged else "disengaged"
        return self

    def drafting_words(self) -> str | None:
        """'engaged: drafted on 5 of 6 structured requests (1 with nothing to match)': every report's words."""
        if self.drafting is None:
            return None
        kinds = [f"{kind} {d.drafted_requests} of {d.structured_requests}" for kind, d in self.drafting_by_kind.items()]
        notes = [", ".join(kinds)] if len(kinds) > 1 else []
        if self.nothing_to_match:
            notes.append(f"{self.nothing_to_match} with nothing to match")
        if self.collapsed:
            notes.append(f"acceptance collapsed on {self.collapsed}")
        if self.drafted_requests is None:  # an older summary.json: the flag count is all it has
            return f"{self.drafting} ({self.disengaged} flagged)"
        return (f"{self.drafting}: drafted on {self.drafted_requests} of {self.structured_requests} structured "
                f"requests" + (f" ({'; '.join(notes)})" if notes else ""))


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


def drafting_state(drafted: int, counted: int, free_text: int | None, *, lookup: bool,
                   collapsed: int = 0) -> DraftingState | None:
    """The state of ``drafted`` of ``counted`` structured requests; None when there is nothing to judge."""
    if not counted:
        return None
    if not drafted:  # silent under every grammar: only a fault if it speaks on free text
        return "disengaged" if free_text else None
    whole = drafted == counted or lookup  # a lookup drafter's silent requests had nothing to match
    return "engaged" if whole and not collapsed else "partly engaged"


def _collapsed(sample: Sample) -> bool:
    """Flagged although it drafted: the tally's collapsed-acceptance rule, not its drafted-nothing one."""
    return bool(sample.drafted) and sample.has_flag(SPECULATION_DISENGAGED)


def _kind_drafting(counted: list[Sample], free_text: int | None, lookup: bool) -> KindDrafting:
    drafted = sum(bool(s.drafted) for s in counted)
    tokens = sum(s.drafted or 0 for s in counted)
    state = drafting_state(drafted, len(counted), free_text, lookup=lookup,
                           collapsed=sum(_collapsed(s) for s in counted))
    return KindDrafting(drafting=state, drafted_requests=drafted, structured_requests=len(counted),
                        draft_tokens=tokens, acceptance=_rate(sum(s.accepted or 0 for s in counted), tokens))


def _drafting(out: StructuredArm, counted: list[Sample], method: str | None) -> None:
    """Counts and state of drafting under the grammar, per arm and per kind."""
    lookup = method in LOOKUP_METHODS
    whole = _kind_drafting(counted, out.drafts_free_text, lookup)
    out.drafting, out.drafted_requests, out.structured_requests = (whole.drafting, whole.drafted_requests,
                                                                   whole.structured_requests)
    out.collapsed = sum(_collapsed(s) for s in counted)
    if lookup and whole.drafted_requests:
        out.nothing_to_match = whole.structured_requests - whole.drafted_requests
    for kind in dict.fromkeys(str(s.structured) for s in counted):
        out.drafting_by_kind[kind] = _kind_drafting([s for s in counted if str(s.structured) == kind],
                                                    out.drafts_free_text, lookup)
    out.drafting_engaged = None if out.drafting is None else out.drafting != "disengaged"


def _arm(samples: list[Sample], level: float, method: str | None = None) -> StructuredArm | None:
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
    out.disengaged = sum(s.has_flag(SPECULATION_DISENGAGED) for s in structured)
    if drafting:
        _drafting(out, drafting, method)
    out.stalls = sum(s.has_flag(STALL) for s in structured)
    gaps = [s.max_gap_s for s in structured if s.max_gap_s is not None]
    out.max_gap_s = max(gaps) if gaps else None
    rates = sorted(s.decode_tps for s in valid if s.decode_tps is not None)
    out.decode_tps = rates[len(rates) // 2] if rates else None
    return out


def summarize_structured(samples: Sequence[Sample], arm_order: Sequence[str], baseline: str | None, *,
                         methods: Mapping[str, str] | None = None, n_boot: int = N_BOOT, level: float = LEVEL,
                         seed: int = 0, margin: float = EQUIVALENCE_MARGIN) -> StructuredSummary | None:
    """Every arm's structured section, or None when the run sent no structured request.

    :param methods: arm -> ``speculative.method``; an arm missing from it is judged as a model drafter.
    """
    by_arm: dict[str, list[Sample]] = {}
    for s in samples:
        by_arm.setdefault(s.arm, []).append(s)
    order = [a for a in arm_order if a in by_arm] + [a for a in by_arm if a not in arm_order]
    methods = methods or {}
    arms = {name: arm for name in order if (arm := _arm(by_arm[name], level, methods.get(name))) is not None}
    if not arms:
        return None
    ref = arms.get(baseline or "")
    ref_valid = [s for s in by_arm.get(baseline or "", []) if s.structured is not None and s.valid]
    for name, arm in arms.items():
        if ref is None or name == baseline:
            continue
        mine = [s for s in by_arm[name] if s.structured is not None and s.valid]
        arm.vs_baseline = paired_ratio(mine, ref_valid, n_boot=n_boot, level=level, seed=seed)
        arm.verdict = verdict(arm.vs_baseline, margin) if arm.vs_baseline is not None else None
        # a gate, not a claim: any shortfall keeps the arm out of the recommendation
        arm.less_valid_than_baseline = (arm.validity_rate or 0) < (ref.validity_rate or 0)
    return StructuredSummary(arms=arms)
