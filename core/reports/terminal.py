"""The terminal report: the community table with intervals and verdicts, the accounting audit, warnings."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..analysis.capacity import CapacityResult
from .calibration import (
    break_even_rows,
    calibration_rows,
    heatmap_grids,
    timing_agreement_line,
    timing_agreement_rows,
)
from .capacity import capacity_lines
from .layout import print_rows
from .model import RunSummary
from .reference import reference_lines
from .tables import (
    audit_table,
    community_table,
    correctness_table,
    footnotes,
    gpu_table,
    phase_rows,
    roofline_note,
    roofline_table,
    sections,
)

__all__ = ["print_calibration", "print_capacity", "print_references", "print_summary", "print_table"]

_VERDICT_STYLE = {"faster": "green", "slower": "red", "equivalent": "cyan", "not separable": "yellow",
                  "too few pairs": "yellow"}


def print_calibration(s: RunSummary, out: Console) -> None:
    """The speedup grid per engine (green above 1, red below), break-even acceptances, every point."""
    c = s.calibration
    if c is None:
        return
    for name, (accs, ns, grid) in heatmap_grids(c).items():
        out.print(f"[bold]calibration {name}: speedup over spec-off[/bold] (rows: forced acceptance)",
                  highlight=False)
        table = Table()
        table.add_column("acceptance")
        for n in ns:
            table.add_column(f"n_max {n}", justify="right")
        for a, speedups in zip(accs, grid, strict=True):
            table.add_row(f"{a:.2f}", *("–" if v is None else f"[{'green' if v >= 1 else 'red'}]{v:.2f}×[/]"
                                        for v in speedups))
        out.print(table)
    agreement = timing_agreement_line(c)
    tables = [("break-even acceptance", break_even_rows(c)),
              *([(f"timing agreement: {agreement}", timing_agreement_rows(c))] if agreement else []),
              ("calibration points", calibration_rows(c))]
    for title, (header, rows) in tables:
        print_table(out, title, header, rows)
    for f in c.flags:
        out.print(f"[bold yellow]calibration:[/bold yellow] {f}", highlight=False)


_LEFT = ("arm", "vs baseline", "Acceptance", "tok/J vs baseline", "gates", "equal work vs baseline", "setting",
         "engine", "method", "point", "from", "flags", "within 2 %")


def print_table(out: Console, title: str | None, header: list[str], rows: list[list[str]]) -> None:
    """A titled table whose cells wrap at a narrow terminal (never cut with "…"), or one record per row where even
    that cannot fit (core/reports/layout.py); nothing when it has no rows."""
    if not rows:
        return
    print_rows(out, title, header, rows, right=[not (col in _LEFT or col.startswith("vs baseline")) for col in header])


def print_summary(s: RunSummary, out: Console) -> None:
    """Every table of the run (``--tables``): the community table first, then each section that has rows."""
    lead = s.progress.warning if s.progress else None
    if lead:  # before any number it qualifies, as in the verdict block
        out.print(f"[bold yellow]{escape(lead)}[/bold yellow]", highlight=False)
    header, rows = community_table(s)
    styled = []
    for row in rows:
        verdict = next((v for v in _VERDICT_STYLE if row[-1].endswith(v)), None)
        if row[-1].startswith(("not comparable", "GATE FAILED")):
            verdict = "slower"  # red: no speed claim stands
        styled.append([*row[:-1], f"[{_VERDICT_STYLE[verdict]}]{row[-1]}[/]" if verdict else row[-1]])
    if not styled:
        out.print("no valid sample: nothing to tabulate", highlight=False)
    print_table(out, f"decode tok/s — {s.name} ({s.run_id})", header, styled)
    for note in footnotes(s):
        out.print(f"[dim]{note}[/dim]", highlight=False)
    for section in sections(s):
        print_table(out, section.title, section.header, section.rows)
        if section.note:
            out.print(f"[dim]{section.note}[/dim]", highlight=False)
    print_table(out, "token accounting and timing (medians)", *audit_table(s))
    phases = phase_rows(s.phases) if s.phases else None
    for title, table_rows in (("phases: each knob against its neighbouring baselines (paired, 95 % CI)", phases),
                              ("correctness: quality gates, spec correctness, equal work", correctness_table(s)),
                              ("roofline: decode vs the memory-bandwidth floor", roofline_table(s)),
                              ("GPU telemetry (medians over requests; energy includes prefill)", gpu_table(s))):
        if table_rows is not None:
            print_table(out, title, *table_rows)
    if s.recommendations:
        out.print("[bold]recommendation per use case[/bold] (paired vs the baseline, 95 % CI)")
        for r in s.recommendations:
            out.print(f"  {r.line}", highlight=False)
    print_calibration(s, out)
    if s.capacity is not None:
        print_capacity(s.capacity, out)
    print_references(s, out)
    if (roofline := roofline_note(s)) is not None:
        out.print(f"[dim]{roofline}[/dim]", highlight=False)
    for msg in (w for w in s.warnings if w != lead):
        out.print(f"[bold yellow]WARNING[/bold yellow] {msg}", highlight=False)
    for f in s.failures:
        out.print(f"[red]arm {f.arm} failed (pass {f.pass_index + 1}):[/red] {f.error}", highlight=False)


def print_references(s: RunSummary, out: Console) -> None:
    """The engine's own benchmark beside each arm's decode rate (a run with ``--llama-bench``), 80 columns."""
    for i, line in enumerate(reference_lines(s.references)):
        out.print(f"[bold]{escape(line)}[/bold]" if i == 0 else escape(line), highlight=False, soft_wrap=True)


def print_capacity(r: CapacityResult, out: Console) -> None:
    """The capacity section (``bakeoff capacity``, ``bakeoff report --tables``), 80 columns at most."""
    first, *rest = capacity_lines(r)
    out.print(f"[bold]{escape(first)}[/bold]", highlight=False)
    for line in rest:
        out.print(escape(line), highlight=False, soft_wrap=True)
