"""Acceptance in one shape for every engine: per request, then pooled per arm.

Every engine counts speculation differently; the adapters hand over what theirs exposes
(``ServerStats``: drafted, accepted, draft steps, accepted per draft position, an engine histogram)
and this module decides, once for all engines, what follows from it and what does not:

- per-position acceptance: position i's accepted count / draft steps, the fraction of draft steps whose
  i-th draft token was accepted (the definition llama.cpp's ``acc per pos`` and vLLM's metrics use);
- the histogram of accepted drafts per step. The per-position counters add one to positions 1..k for a
  step that accepted k tokens, so the steps that accepted at least k are position k's count and the
  histogram follows exactly: ``h[0] = steps - pos[1]``, ``h[k] = pos[k] - pos[k+1]``, ``h[n] = pos[n]``.
  An engine's own histogram (vLLM per-request metrics) is used as is and checked against it.

A field the engine does not expose stays None, with its reason in ``acceptance_unavailable``; a field
computed rather than read says how in ``acceptance_derived``. No number is made up.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..results.flags import (
    ACCEPTANCE_HISTOGRAM_MISMATCH,
    ACCEPTANCE_PER_POSITION_MISMATCH,
    ACCEPTANCE_POSITIONS_NOT_PREFIX,
)
from ..results.sample import Sample

__all__ = ["AcceptanceField", "ACCEPTANCE_FIELDS", "AcceptanceDetail", "ArmAcceptance", "acceptance_detail",
           "acceptance_rate", "histogram_from_positions", "arm_acceptance", "mean_accepted_length", "run_acceptance"]

AcceptanceField = Literal["drafted", "accepted", "drafts", "acceptance", "mean_accepted_len",
                          "accepted_per_position", "acceptance_per_position", "accepted_histogram"]
ACCEPTANCE_FIELDS: tuple[AcceptanceField, ...] = (
    "drafted", "accepted", "drafts", "acceptance", "mean_accepted_len", "accepted_per_position",
    "acceptance_per_position", "accepted_histogram")

HISTOGRAM_FROM_POSITIONS = ("exact: from the per-position counters and the draft steps (steps accepting at least "
                            "k tokens = position k's count)")
POSITIONS_FROM_HISTOGRAM = ("exact: from the engine's histogram (position k's count = steps that accepted more "
                            "than k tokens)")
# Why a field is None when the engine's own reason is not given: what it would have been computed from.
_NEEDS = {
    "acceptance": "needs the drafted token count",
    "mean_accepted_len": "needs the draft step count",
    "acceptance_per_position": "needs per-position counts and the draft step count",
    "accepted_histogram": "needs per-position counts and the draft step count, or the engine's own histogram",
}


class AcceptanceDetail(BaseModel):
    """The acceptance fields of one Sample (the same names), as core derives them from ``ServerStats``."""

    drafted: int | None = None
    accepted: int | None = None
    drafts: int | None = None
    acceptance: float | None = None
    mean_accepted_len: float | None = None
    accepted_per_position: list[int] | None = None
    acceptance_per_position: list[float] | None = None
    accepted_histogram: list[int] | None = None
    acceptance_unavailable: dict[str, str] = Field(default_factory=dict)
    acceptance_derived: dict[str, str] = Field(default_factory=dict)
    flags: list[str] = Field(default_factory=list)


def acceptance_rate(accepted: int | None, drafted: int | None) -> float | None:
    """The acceptance rate: accepted / drafted draft tokens (None when nothing was drafted). The one place it is
    computed, for a request, an arm, a sweep point, a calibration point or a self-test."""
    return (accepted or 0) / drafted if drafted else None


def mean_accepted_length(accepted: int | None, drafts: int | None) -> float | None:
    """Tokens committed per verify step: 1 + accepted / draft steps (None without draft steps)."""
    return 1 + (accepted or 0) / drafts if drafts else None


def histogram_from_positions(per_position: Sequence[int], drafts: int) -> list[int] | None:
    """Draft steps that accepted 0, 1, … n tokens, from accepted-per-position counts; None when the counts
    cannot come from prefix acceptance (a position above the one before it, or above the step count)."""
    counts = [drafts, *per_position]
    if any(b > a for a, b in pairwise(counts)) or any(c < 0 for c in counts):
        return None
    return [a - b for a, b in zip(counts, [*counts[1:], 0], strict=True)]


def _engine_reason(unavailable: dict[str, str], name: str) -> str:
    return unavailable.get(name) or "the engine does not report it"


def acceptance_detail(drafted: int | None, accepted: int | None, drafts: int | None,
                      per_position: Sequence[int] | None, engine_histogram: Sequence[int] | None,
                      unavailable: dict[str, str] | None = None, derived: dict[str, str] | None = None
                      ) -> AcceptanceDetail:
    """One request's acceptance from what its engine exposes.

    :param per_position: accepted draft tokens by draft position (first position first), engine counters.
    :param engine_histogram: the engine's own steps-by-accepted-count histogram, if it reports one.
    :param unavailable: the adapter's reason per field it cannot read (kept for the fields left None).
    :param derived: the adapter's note per field it computed instead of read.
    """
    unavailable = dict(unavailable or {})
    out = AcceptanceDetail(drafted=drafted, accepted=accepted, drafts=drafts,
                           acceptance_derived=dict(derived or {}))
    out.acceptance = acceptance_rate(accepted, drafted)
    out.mean_accepted_len = mean_accepted_length(accepted, drafts)
    if (per_position is None and engine_histogram is not None and sum(engine_histogram) == drafts
            and sum(k * c for k, c in enumerate(engine_histogram)) == accepted):
        # the reverse identity: position k's count is the steps that accepted more than k tokens
        per_position = [sum(engine_histogram[k + 1:]) for k in range(len(engine_histogram) - 1)]
        out.acceptance_derived["accepted_per_position"] = POSITIONS_FROM_HISTOGRAM
    if per_position is not None:
        out.accepted_per_position = list(per_position)
        if accepted is not None and sum(per_position) != accepted:
            out.flags.append(ACCEPTANCE_PER_POSITION_MISMATCH.line(f"positions sum to {sum(per_position)}, "
                             f"accepted {accepted}"))
        if drafts:
            out.acceptance_per_position = [c / drafts for c in per_position]
    from_positions = histogram_from_positions(per_position, drafts) if per_position is not None and drafts else None
    if per_position is not None and drafts and from_positions is None:
        out.flags.append(ACCEPTANCE_POSITIONS_NOT_PREFIX.line(f"per-position counts {list(per_position)[:8]} over "
                         f"{drafts} steps cannot come from accepting a prefix of each draft; no histogram derived"))
    if engine_histogram is not None:
        out.accepted_histogram = list(engine_histogram)
        steps = sum(engine_histogram)
        if drafts is not None and steps != drafts:
            out.flags.append(ACCEPTANCE_HISTOGRAM_MISMATCH.line(f"engine histogram has {steps} steps, drafts {drafts}"))
        weighted = sum(k * c for k, c in enumerate(engine_histogram))
        if accepted is not None and weighted != accepted:
            out.flags.append(ACCEPTANCE_HISTOGRAM_MISMATCH.line(f"engine histogram accepts {weighted} tokens, "
                             f"accepted {accepted}"))
        if from_positions is not None and _trimmed(from_positions) != _trimmed(engine_histogram):
            out.flags.append(ACCEPTANCE_HISTOGRAM_MISMATCH.line(f"engine {list(engine_histogram)} vs per-position "
                             f"counters {from_positions}"))
    elif from_positions is not None:
        out.accepted_histogram = from_positions
        out.acceptance_derived.setdefault("accepted_histogram", HISTOGRAM_FROM_POSITIONS)
    if drafted == 0:
        # speculation proposed nothing: no step to describe, which is a fact, not a gap
        return out
    for name in ACCEPTANCE_FIELDS:
        if getattr(out, name) is not None:
            continue
        if name in ("drafted", "accepted", "drafts", "accepted_per_position"):
            out.acceptance_unavailable[name] = _engine_reason(unavailable, name)
        else:
            missing = unavailable.get(name)
            out.acceptance_unavailable[name] = missing or _NEEDS[name]
    return out


def _trimmed(hist: Sequence[int]) -> list[int]:
    """A histogram without its empty top bins (engines size theirs to n_max, or to what happened)."""
    out = list(hist)
    while out and out[-1] == 0:
        out.pop()
    return out


class ArmAcceptance(BaseModel):
    """One speculative arm's acceptance, pooled over its successful requests (sums, then ratios)."""

    arm: str
    engine: str
    requests: int = Field(0, description="Successful requests with draft counts.")
    drafted: int = 0
    accepted: int = 0
    drafts: int | None = Field(None, description="Σ draft steps, over requests that report them (None: none do).")
    acceptance: float | None = Field(None, description="Σ accepted / Σ drafted.")
    mean_accepted_len: float | None = Field(None, description="1 + Σ accepted / Σ draft steps, over requests "
                                                              "reporting steps.")
    mean_accepted_len_range: tuple[float, float] | None = Field(None, description="Lowest and highest per request.")
    requests_with_positions: int = 0
    accepted_per_position: list[int] | None = Field(None, description="Σ accepted per position (first first).")
    acceptance_per_position: list[float] | None = Field(
        None, description="Position i: Σ accepted at i / Σ draft steps of the same requests.")
    requests_with_histogram: int = 0
    accepted_histogram: list[int] | None = Field(None, description="Σ draft steps that accepted 0, 1, 2, … tokens.")
    sources: list[str] = Field(default_factory=list, description="Where the counts came from.")
    unavailable: dict[str, str] = Field(default_factory=dict, description="Field -> why the engine gives none "
                                                                          "(with how many requests).")
    derived: dict[str, str] = Field(default_factory=dict, description="Field -> how it was computed.")

    @property
    def histogram_shares(self) -> list[float] | None:
        h = self.accepted_histogram
        return [c / sum(h) for c in h] if h and sum(h) else None


def _padded_sum(rows: Iterable[Sequence[int]]) -> list[int]:
    out: list[int] = []
    for row in rows:
        out += [0] * (len(row) - len(out))
        for i, v in enumerate(row):
            out[i] += v
    return out


def arm_acceptance(arm: str, samples: Sequence[Sample]) -> ArmAcceptance | None:
    """The pooled acceptance of one arm; None when no successful request carries draft counts."""
    own = [s for s in samples if s.arm == arm and s.status == "ok" and s.drafted is not None]
    if not own:
        return None
    out = ArmAcceptance(arm=arm, engine=own[0].engine, requests=len(own),
                        drafted=sum(s.drafted or 0 for s in own), accepted=sum(s.accepted or 0 for s in own))
    out.acceptance = acceptance_rate(out.accepted, out.drafted)
    stepped = [s for s in own if s.drafts is not None]
    if stepped:
        out.drafts = sum(s.drafts or 0 for s in stepped)
        out.mean_accepted_len = mean_accepted_length(sum(s.accepted or 0 for s in stepped), out.drafts)
        lens = [s.mean_accepted_len for s in stepped if s.mean_accepted_len is not None]
        out.mean_accepted_len_range = (min(lens), max(lens)) if lens else None
    positioned = [s for s in own if s.accepted_per_position is not None and s.drafts]
    if positioned:
        out.requests_with_positions = len(positioned)
        out.accepted_per_position = _padded_sum(s.accepted_per_position or [] for s in positioned)
        steps = sum(s.drafts or 0 for s in positioned)
        out.acceptance_per_position = [c / steps for c in out.accepted_per_position]
    binned = [s for s in own if s.accepted_histogram is not None]
    if binned:
        out.requests_with_histogram = len(binned)
        out.accepted_histogram = _padded_sum(s.accepted_histogram or [] for s in binned)
    out.sources = sorted({s.acceptance_source for s in own if s.acceptance_source})
    out.unavailable = _reasons(own, "acceptance_unavailable")
    for name in ("drafts", "accepted_per_position", "accepted_histogram"):
        if getattr(out, name) is None and name not in out.unavailable:
            out.unavailable[name] = "not recorded in these samples (written before bakeoff read it)"
    out.derived = _reasons(own, "acceptance_derived")
    return out


def _reasons(samples: Sequence[Sample], attr: str) -> dict[str, str]:
    """Field -> its reasons over the arm's requests, each with the number of requests that gave it."""
    seen: dict[str, dict[str, int]] = {}
    for s in samples:
        notes: dict[str, Any] = getattr(s, attr)
        for name, why in notes.items():
            seen.setdefault(name, {})
            seen[name][why] = seen[name].get(why, 0) + 1
    return {name: "; ".join(f"{why} ({n}/{len(samples)} requests)" if n != len(samples) else why
                            for why, n in whys.items())
            for name, whys in seen.items()}


def run_acceptance(samples: Sequence[Sample], arm_order: Sequence[str]) -> list[ArmAcceptance]:
    """Every arm with draft counts, in the run's arm order."""
    names = list(dict.fromkeys([*arm_order, *(s.arm for s in samples)]))
    return [a for name in names if (a := arm_acceptance(name, samples)) is not None]
