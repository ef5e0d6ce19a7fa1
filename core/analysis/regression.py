"""The regression gate's verdict: is the candidate build separably slower than the reference by more than
the slowdown a user allows?

The gate reads the paired ratios candidate/reference the run summary already holds (core/analysis/stats.py:
medians of per-request ratios paired on prompt, mode, rep and pass, with two-stage bootstrap intervals), one
per point: each depth or number of streams the run swept, else the run as a whole. The rule is one-sided and
reads the interval's bounds, so neither noise nor luck decides a build: a point fails only when even the
interval's upper bound is below ``1 - max_slowdown`` (the candidate is slower by more than allowed with 95 %
confidence), and passes only when its lower bound is at or above that line (a slowdown beyond the limit is
excluded). An interval that straddles the line is *inconclusive*: the machine could not tell, so the gate is
neither green nor red, and says how many passes the observed spread would need (the gate draws more passes up
to ``gate.max_passes`` before it says so; core/cli/regression.py).

A point with fewer paired requests than an interval needs (core/analysis/stats.py ``MIN_PAIRS``: its interval is
only their range) is inconclusive too, never passed or failed, and draws more passes like one that straddles.
A point without paired requests, or whose two arms did not do equal work (the equal-work guard), has no
verdict; a gate with such a point says so and is neither passed nor failed. A quality gate (core/analysis/gates.py)
that the candidate fails and the reference passes fails the gate too: a faster build that answers wrong is a
regression.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from .stats import MIN_PAIRS, Comparison, passes_to_decide, too_few_pairs

__all__ = ["OVERALL", "GatePoint", "GateVerdict", "judge_gate"]

OVERALL = "overall"  # the point of a run that sweeps no depth or stream count

Outcome = Literal["passed", "failed", "inconclusive", "no verdict"]


class GatePoint(BaseModel):
    where: str = Field(description="'overall' (the whole run: no depth or stream count swept), 'depth 4096', "
                       "'8 streams'.")
    comparison: Comparison | None = Field(None, description="Candidate against the reference, paired.")
    failed: bool = False
    inconclusive: bool = Field(False, description="The interval straddles 1 - max_slowdown: neither shown.")
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


def _place(where: str) -> str:
    """A point as a line names it: 'overall' (a run without depths or stream counts) is the whole run."""
    return "the whole run" if where == OVERALL else where


def _at(where: str) -> str:
    """'at depth 4096', 'at 8 streams', or 'over the whole run' (USER-3 #10: the line said 'at overall')."""
    return "over the whole run" if where == OVERALL else f"at {where}"


def judge_gate(reference: str, candidate: str, max_slowdown: float, points: Sequence[tuple[str, Comparison | None]],
               broken_gates: Sequence[str] = (), passes: int | None = None, busy: str | None = None) -> GateVerdict:
    """The verdict over ``points`` (where, the candidate's comparison there or None); see the module docstring.

    :param passes: the passes measured, to say how many an inconclusive point would need.
    :param busy: how much of the run the machine was busy ("11 of 12 samples"), the likely cause of a wide
        interval, said on an inconclusive line.
    """
    floor = 1 - max_slowdown
    judged: list[GatePoint] = []
    for where, c in points:
        if c is None:
            judged.append(GatePoint(where=where, why="no paired requests (an arm has no valid sample there)"))
        elif c.comparable is not None and not c.comparable.get("ok", True):
            judged.append(GatePoint(where=where, comparison=c,
                                    why="not comparable: " + "; ".join(c.comparable.get("reasons") or [])))
        elif too_few_pairs(c.ratio):  # its interval is only the pairs' range: neither side is shown
            judged.append(GatePoint(where=where, comparison=c, inconclusive=True))
        else:
            judged.append(GatePoint(where=where, comparison=c, failed=c.ratio.hi < floor,
                                    inconclusive=c.ratio.lo < floor <= c.ratio.hi))
    allowed = f"{max_slowdown:.1%} allowed"
    failed = [p for p in judged if p.failed]
    missing = [p for p in judged if p.why is not None]
    if failed:
        worst = min(failed, key=lambda p: p.comparison.ratio.hi if p.comparison else 1.0)
        r = worst.comparison.ratio if worst.comparison else None
        assert r is not None
        line = (f"gate FAILED: {candidate} is {_slower(r.estimate)} than {reference} {_at(worst.where)} "
                f"({r.estimate:.3f}×, {r.level:.0%} CI {r.lo:.3f}–{r.hi:.3f}: at least {_slower(r.hi)}, more than "
                f"the {allowed})")
        if len(failed) > 1:
            line += f"; also slower beyond it {', '.join(_at(p.where) for p in failed if p is not worst)}"
        outcome: Outcome = "failed"
    elif broken_gates:
        line = (f"gate FAILED: {candidate} fails quality gate(s) {', '.join(broken_gates)} that {reference} passes "
                "(a build that answers wrong is a regression, however fast)")
        outcome = "failed"
    elif missing or not judged:
        where = ", ".join(f"{_place(p.where)} ({p.why})" for p in missing) or "no point measured"
        line = f"gate: no verdict: {where}"
        outcome = "no verdict"
    else:
        shown = "; ".join(f"{p.comparison.ratio.estimate:.3f}× ({p.comparison.ratio.lo:.3f}–"
                          f"{p.comparison.ratio.hi:.3f}) {_at(p.where)}" for p in judged if p.comparison)
        few = [(p.where, p.comparison.ratio) for p in judged
               if p.inconclusive and p.comparison and too_few_pairs(p.comparison.ratio)]
        open_ = [p for p in judged if p.inconclusive and p.comparison and not too_few_pairs(p.comparison.ratio)]
        if few or open_:
            line = f"gate inconclusive: {candidate} against {reference}: {shown}"
            if few:
                line += "; too few pairs for a verdict " + ", ".join(
                    f"{_at(where)} ({r.n} paired request(s), {MIN_PAIRS} needed)" for where, r in few)
            if open_:
                line += (f"; the interval {', '.join(_at(p.where) for p in open_)} reaches both sides of {floor:.3f} "
                         f"(the {allowed}), so neither a slowdown beyond it nor its absence is shown")
            if passes and open_:
                need = [n for p in open_ if p.comparison and (n := passes_to_decide(
                    p.comparison.ratio.estimate, p.comparison.ratio.lo, p.comparison.ratio.hi, floor, passes))]
                line += (f"; at this spread about {max(need)} passes in all would decide (gate.max_passes)"
                         if len(need) == len(open_) else "; its estimate sits on the line")
            if busy:
                line += (f"; the machine was busy during {busy} (foreign-load, harness-lag or GPU throttle flags): "
                         "a quieter machine may decide it")
            outcome = "inconclusive"
        else:
            line = (f"gate passed: {candidate} against {reference}: {shown}; a slowdown beyond the {allowed} is "
                    "excluded")
            outcome = "passed"
    if broken_gates and outcome == "failed" and failed:
        line += f"; it also fails quality gate(s) {', '.join(broken_gates)}"
    return GateVerdict(reference=reference, candidate=candidate, max_slowdown=max_slowdown, outcome=outcome,
                       line=line, points=judged, broken_gates=list(broken_gates))
