"""The regression gate's verdict: is the candidate build separably slower than the reference by more than
the slowdown a user allows?

The gate reads the paired ratios candidate/reference the run summary already holds (core/analysis/stats.py:
medians of per-request ratios paired on prompt, mode, rep and pass, with two-stage bootstrap intervals), one
per point: each depth or number of streams the run swept, else the run as a whole. The rule is one-sided and
reads the interval's bound, so noise cannot fail a build: a point fails only when even the interval's upper
bound is below ``1 - max_slowdown`` (the candidate is slower by more than allowed with 95 % confidence).
A point whose interval reaches above that line passes, however low its estimate; a wide interval is a reason
to run more passes, said in the line, not a failure.

A point without paired requests, or whose two arms did not do equal work (the equal-work guard), has no
verdict; a gate with such a point says so and is neither passed nor failed. A quality gate (core/analysis/gates.py)
that the candidate fails and the reference passes fails the gate too: a faster build that answers wrong is a
regression.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from .stats import Comparison

__all__ = ["GatePoint", "GateVerdict", "judge_gate"]

Outcome = Literal["passed", "failed", "no verdict"]


class GatePoint(BaseModel):
    where: str = Field(description="'overall', 'depth 4096', '8 streams'.")
    comparison: Comparison | None = Field(None, description="Candidate against the reference, paired.")
    failed: bool = False
    why: str | None = Field(None, description="Why this point has no verdict, when it has none.")


class GateVerdict(BaseModel):
    """The gate's outcome, its one line, and the points it read."""

    kind: str = "bakeoff-gate"
    reference: str
    candidate: str
    max_slowdown: float
    outcome: Outcome
    line: str
    points: list[GatePoint]
    broken_gates: list[str] = Field(default_factory=list, description="Quality gates the candidate fails and the "
                                                                      "reference passes.")


def _slower(ratio: float) -> str:
    return f"{(1 - ratio):.1%} slower" if ratio < 1 else f"{(ratio - 1):.1%} faster"


def judge_gate(reference: str, candidate: str, max_slowdown: float, points: Sequence[tuple[str, Comparison | None]],
               broken_gates: Sequence[str] = ()) -> GateVerdict:
    """The verdict over ``points`` (where, the candidate's comparison there or None); see the module docstring."""
    floor = 1 - max_slowdown
    judged: list[GatePoint] = []
    for where, c in points:
        if c is None:
            judged.append(GatePoint(where=where, why="no paired requests (an arm has no valid sample there)"))
        elif c.comparable is not None and not c.comparable.get("ok", True):
            judged.append(GatePoint(where=where, comparison=c,
                                    why="not comparable: " + "; ".join(c.comparable.get("reasons") or [])))
        else:
            judged.append(GatePoint(where=where, comparison=c, failed=c.ratio.hi < floor))
    allowed = f"{max_slowdown:.1%} allowed"
    failed = [p for p in judged if p.failed]
    missing = [p for p in judged if p.why is not None]
    if failed:
        worst = min(failed, key=lambda p: p.comparison.ratio.hi if p.comparison else 1.0)
        r = worst.comparison.ratio if worst.comparison else None
        assert r is not None
        line = (f"gate FAILED: {candidate} is {_slower(r.estimate)} than {reference} at {worst.where} "
                f"({r.estimate:.3f}×, {r.level:.0%} CI {r.lo:.3f}–{r.hi:.3f}: at least {_slower(r.hi)}, more than "
                f"the {allowed})")
        if len(failed) > 1:
            line += f"; also slower beyond it at {', '.join(p.where for p in failed if p is not worst)}"
        outcome: Outcome = "failed"
    elif broken_gates:
        line = (f"gate FAILED: {candidate} fails quality gate(s) {', '.join(broken_gates)} that {reference} passes "
                "(a build that answers wrong is a regression, however fast)")
        outcome = "failed"
    elif missing or not judged:
        where = ", ".join(f"{p.where} ({p.why})" for p in missing) or "no point measured"
        line = f"gate: no verdict: {where}"
        outcome = "no verdict"
    else:
        shown = "; ".join(f"{p.comparison.ratio.estimate:.3f}× ({p.comparison.ratio.lo:.3f}–"
                          f"{p.comparison.ratio.hi:.3f}) at {p.where}" for p in judged if p.comparison)
        line = f"gate passed: {candidate} against {reference}: {shown}; not separably slower than the {allowed}"
        wide = [p.where for p in judged if p.comparison and p.comparison.ratio.lo < floor]
        if wide:
            line += (f" (the interval at {', '.join(wide)} still reaches below {floor:.3f}: more passes would "
                     "tell a smaller slowdown)")
        outcome = "passed"
    if broken_gates and outcome == "failed" and failed:
        line += f"; it also fails quality gate(s) {', '.join(broken_gates)}"
    return GateVerdict(reference=reference, candidate=candidate, max_slowdown=max_slowdown, outcome=outcome,
                       line=line, points=judged, broken_gates=list(broken_gates))
