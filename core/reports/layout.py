"""Tables that fit the terminal: a table wider than the console, even with every cell wrapped at its spaces, is
printed as one record per row (``arm: ngram`` then ``  vs spec-off  1.11× (1.003–1.30) faster``), never squeezed
until rich breaks its words letter by letter (``sp/ec/-o/ff``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

__all__ = ["plain_table", "print_rows"]

_UNBOUNDED = 1_000_000  # measure a table's own minimum, not the console's width it would be clamped to


def plain_table(rows: Sequence[Sequence[str]], width: int) -> list[str]:
    """``rows`` (the header first) as left-aligned plain-text columns two spaces apart, each line at most
    ``width`` characters with no trailing space: the first column (the arm's name) is cut to what the others
    leave, never below 4 characters (report.md and summary.json keep the whole name)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    name_w = max(4, min(widths[0], width - sum(widths[1:]) - 2 * (len(widths) - 1)))
    out = []
    for row in rows:
        cells = [row[0][:name_w].ljust(name_w)] + [c.ljust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        out.append("  ".join(cells).rstrip()[:width])
    return out


def print_rows(out: Console, title: str | None, header: Sequence[str], rows: Sequence[Sequence[str]], *,
               right: Sequence[bool] | None = None, **table: Any) -> None:
    """``rows`` (rich markup) under ``header`` (plain text) as a table, or as records when it cannot fit
    ``out.width`` without breaking a word; ``right`` right-justifies columns; ``table`` goes to rich's Table."""
    grid = Table(title=title, **table)
    for i, col in enumerate(header):
        grid.add_column(escape(col), justify="right" if right and right[i] else "left", overflow="fold")
    for row in rows:
        grid.add_row(*row)
    if (widths := _widths(out, [escape(h) for h in header], rows, grid)) is not None:
        for column, width in zip(grid.columns, widths, strict=True):
            column.width = width
        out.print(grid)
        return
    if title:
        out.print(title, highlight=False)
    for row in rows:
        record = Table.grid(padding=(0, 2))
        record.add_column(no_wrap=True)  # the label keeps its line, the value wraps beside it
        record.add_column(overflow="fold")
        record.add_row(f"[bold]{escape(header[0])}[/bold]", f"[bold]{row[0]}[/bold]")
        for label, value in zip(header[1:], row[1:], strict=True):
            if value.strip():
                record.add_row(f"  {escape(label)}", value)
        out.print(record)


def _widths(out: Console, header: Sequence[str], rows: Sequence[Sequence[str]], grid: Table) -> list[int] | None:
    """Column widths that fit ``out.width`` with no word broken, or None when no such widths exist: the widest
    columns are narrowed first, to a common cap, but none below its longest word, so a short column (a number with
    its interval) stays whole on its line while a long one (a verdict with its reasons) wraps. rich's own squeeze
    narrows the widest columns first whatever their words, which is what breaks them."""
    options = out.options.update(max_width=_UNBOUNDED)
    spans = [[Measurement.get(out, options, Text.from_markup(cell)) for cell in column]
             for column in zip(header, *rows, strict=True)]
    least = [max(m.minimum for m in col) for col in spans]
    most = [max(m.maximum for m in col) for col in spans]
    frame = Measurement.get(out, options, grid).maximum - sum(most)  # borders and padding
    room = out.width - frame
    if sum(least) > room:
        return None

    def capped(cap: int) -> list[int]:
        return [max(lo, min(hi, cap)) for lo, hi in zip(least, most, strict=True)]

    cap = max(most)
    while cap > 0 and sum(capped(cap)) > room:
        cap -= 1
    return capped(cap)
