"""The engine's own benchmark beside each arm's decode rate, in the run's reports (core/analysis/reference.py):
plain lines within 80 columns for the terminal, markdown for report.md (and report.html through it)."""

from __future__ import annotations

import textwrap

from ..analysis.reference import BenchReference
from .layout import plain_table

__all__ = ["reference_lines", "reference_markdown"]

WIDTH = 80
TITLE = "Engine's own benchmark (same build, same GGUF and settings, after the run)"
HEADER = ("arm", "bakeoff decode", "llama-bench tg", "server share", "at")


def _rate(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else "–"


def _row(r: BenchReference) -> tuple[str, ...]:
    if r.tg_tps is None or r.error:
        return (r.arm, _rate(r.server_tps), "n/a", "–", "")
    tg = f"{r.tg_tps:.1f} ± {r.stddev_tps or 0:.1f}"
    share = f"{r.share:.0%}" if r.share is not None else "–"
    share += " busy" if r.disturbed else ""
    return (r.arm, _rate(r.server_tps), tg, share, f"tg{r.n_gen} @ d{r.depth}")


def _notes(refs: dict[str, BenchReference]) -> list[str]:
    out = [f"{name}: {r.error}" for name, r in refs.items() if r.error]
    out += [f"{name}: the machine was busy while llama-bench ran ({r.foreign_cores:.2f} cores used by other "
            f"processes, limit {r.foreign_limit:.2f}): not a clean reference" for name, r in refs.items()
            if r.disturbed and r.foreign_cores is not None and r.foreign_limit is not None]
    builds = sorted({r.build_number for r in refs.values() if r.build_number is not None})
    if builds:
        out.append(f"tok/s; llama-bench build {', '.join(map(str, builds))}; share = bakeoff's median decode rate "
                   "over llama-bench's tg at the arm's median depth and longest answer")
    if any(r.share is not None and r.share > 1 for r in refs.values()):
        out.append("llama-bench runs the target alone (no speculation), so a speculative arm's share can pass "
                   "100 %")
    return out


def reference_lines(refs: dict[str, BenchReference], width: int = WIDTH) -> list[str]:
    """The section as plain lines of at most ``width`` characters ([] without references)."""
    if not refs:
        return []
    lines = textwrap.wrap(TITLE, width) + plain_table([HEADER, *(_row(r) for r in refs.values())], width)
    for note in _notes(refs):
        lines += textwrap.wrap(note, width, subsequent_indent="  ", break_on_hyphens=False)
    return lines


def reference_markdown(refs: dict[str, BenchReference]) -> list[str]:
    """The section as markdown lines ([] without references)."""
    if not refs:
        return []
    out = [f"**{TITLE}**", "", "| " + " | ".join(HEADER) + " |", "|---|---:|---:|---:|---|"]
    out += ["| " + " | ".join(_row(r)) + " |" for r in refs.values()]
    notes = _notes(refs)
    return out + ([""] + [f"- {n}" for n in notes] if notes else [])
