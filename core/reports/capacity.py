"""The capacity section of a run's reports: each arm's boundary at the SLOs, and the paired ratio.

One renderer per format, all reading the run's :class:`~bakeoff.core.analysis.capacity.CapacityResult`
(``capacity.json``, carried in the run summary): plain lines that fit 80 columns for the terminal, markdown for
report.md (and report.html through it), flat rows for ``bakeoff export``. A search with structured requests
gives each arm a row per workload kind (plain, structured) under a kind column, and each comparison names its
kind; a search of plain prompts alone reads as it always did.
"""

from __future__ import annotations

import textwrap
from typing import Any

from ..analysis.capacity import ArmBoundary, CapacityResult
from .layout import plain_table

__all__ = ["capacity_lines", "capacity_markdown", "capacity_rows", "boundary_text", "merge_capacity"]

WIDTH = 80


def _load(value: float | None, load: str) -> str:
    if value is None:
        return "–"
    return f"{value:g}" if load == "streams" else f"{value:.3g}"


def boundary_text(a: ArmBoundary, load: str) -> str:
    """``40 (40–41)``, ``< 1`` (failed at the first load) or ``≥ 256`` (held at max)."""
    unit = " streams" if load == "streams" else " req/s"
    if a.kind == "sessions":  # its load: sessions replayed at once
        unit = " sessions"
    if a.censored == "below":
        return f"< {_load(a.failed, load)}{unit}"
    if a.censored == "above":
        return f"≥ {_load(a.held, load)}{unit}"
    return f"{_load(a.estimate, load)} ({_load(a.lo, load)}–{_load(a.hi, load)}){unit}"


def _header(r: CapacityResult) -> str:
    kind = "closed loop, streams" if r.load == "streams" else "open loop, req/s"
    if r.kinds == ["sessions"]:
        kind = "closed loop, concurrent sessions"
    return (f"Capacity at {' and '.join(r.constraints)} ({kind}; {r.strategy}; {r.levels} loads, "
            f"{r.probes} probes, {r.level:.0%} intervals)")


def _kinded(r: CapacityResult) -> bool:
    """Not plain prompts alone: every row and note names its kind."""
    return r.kinds != ["plain"]


def _who(a: ArmBoundary, r: CapacityResult) -> str:
    return f"{a.arm} ({a.kind})" if _kinded(r) else a.arm


def _notes(r: CapacityResult) -> list[str]:
    out = []
    for a in r.arms:
        if not a.monotone and a.monotone_note:
            out.append(f"{_who(a, r)}: not monotone: {a.monotone_note}")
        cut = [f"{row.level:g}" for row in a.levels if row.cut]
        if cut:
            out.append(f"{_who(a, r)}: over-saturated, cut early at {', '.join(cut)}")
    return out


def capacity_lines(r: CapacityResult, width: int = WIDTH) -> list[str]:
    """The section as plain lines of at most ``width`` characters."""
    lines = textwrap.wrap(_header(r), width)
    kind: tuple[str, ...] = ("kind",) if _kinded(r) else ()
    rows = [("arm", *kind, "boundary (interval)", "bracket", "binds", "shape", "tok/J")]
    for a in r.arms:
        bracket = f"{_load(a.held, r.load)}|{_load(a.failed, r.load)}"
        tpj = f"{a.tokens_per_joule:.3g}" if a.tokens_per_joule is not None else "–"
        rows.append((a.arm, *((a.kind,) if kind else ()), boundary_text(a, r.load), bracket,
                     (a.binding or "–").split(" ≤")[0].split(" ≥")[0], a.shape, tpj))
    lines += plain_table(rows, width)
    for c in r.comparisons:
        lines += textwrap.wrap(c.text, width)
    for note in _notes(r):
        lines += textwrap.wrap(note, width, subsequent_indent="  ")
    return lines


def capacity_markdown(r: CapacityResult) -> list[str]:
    """The section as markdown lines."""
    kind = " kind |" if _kinded(r) else ""
    out = [f"**{_header(r)}**", "",
           f"| arm |{kind} boundary (interval) | held / failed | binding constraint | shape | probes | "
           "tok/J at boundary |",
           f"|---|{'---|' if kind else ''}---|---|---|---|---:|---:|"]
    for a in r.arms:
        tpj = f"{a.tokens_per_joule:.3g}" if a.tokens_per_joule is not None else "–"
        cell = f" {a.kind} |" if kind else ""
        out.append(f"| {a.arm} |{cell} {boundary_text(a, r.load)} | {_load(a.held, r.load)} / "
                   f"{_load(a.failed, r.load)} | {a.binding or '–'} | {a.shape} | {a.probes} | {tpj} |")
    out.append("")
    out += [f"- {c.text}" for c in r.comparisons]
    out += [f"- {n}" for n in _notes(r)]
    return out


def capacity_rows(r: CapacityResult, run_id: str) -> list[dict[str, Any]]:
    """Flat rows for ``bakeoff export``: one per arm (its boundary) and one per comparison."""
    rows: list[dict[str, Any]] = []
    for a in r.arms:
        rows.append({"run_id": run_id, "table": "capacity", "arm": a.arm, "kind": a.kind, "load": r.load,
                     "constraints": " and ".join(r.constraints), "boundary": a.estimate, "boundary_lo": a.lo,
                     "boundary_hi": a.hi, "held": a.held, "failed": a.failed, "censored": a.censored,
                     "binding": a.binding, "shape": a.shape, "monotone": a.monotone, "probes": a.probes,
                     "tok_per_j": a.tokens_per_joule})
    for c in r.comparisons:
        rows.append({"run_id": run_id, "table": "capacity", "arm": c.arm, "kind": c.kind, "baseline": c.baseline,
                     "load": r.load,
                     "ratio": c.ratio.estimate if c.ratio else None, "ratio_lo": c.ratio.lo if c.ratio else None,
                     "ratio_hi": c.ratio.hi if c.ratio else None,
                     "difference": c.difference.estimate if c.difference else None,
                     "difference_lo": c.difference.lo if c.difference else None,
                     "difference_hi": c.difference.hi if c.difference else None, "verdict": c.verdict})
    return rows


def merge_capacity(results: list[tuple[str, CapacityResult | None]]) -> CapacityResult | None:
    """``bakeoff merge``: every bundle's boundaries and paired ratios, arms named ``arm@label``. Boundaries of
    different bundles are not compared with each other (they were not probed interleaved); bundles searched at
    other constraints or another kind of load than the first one's are left out (their own reports have them)."""
    present = [(label, r) for label, r in results if r is not None]
    if not present:
        return None
    first = present[0][1]
    same = [(label, r) for label, r in present if r.load == first.load and r.constraints == first.constraints]
    arms = [a.model_copy(update={"arm": f"{a.arm}@{label}"}) for label, r in same for a in r.arms]
    comparisons = [c.model_copy(update={"arm": f"{c.arm}@{label}", "baseline": f"{c.baseline}@{label}",
                                        "text": f"{c.text} ({label})"}) for label, r in same for c in r.comparisons]
    kinds = list(dict.fromkeys(k for _, r in same for k in r.kinds))
    return first.model_copy(update={"arms": arms, "comparisons": comparisons, "kinds": kinds,
                                    "baseline": f"{first.baseline}@{same[0][0]}",
                                    "probes": sum(r.probes for _, r in same),
                                    "levels": sum(r.levels for _, r in same)})
