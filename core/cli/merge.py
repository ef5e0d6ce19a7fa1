"""``bakeoff merge BUNDLE...``: one report across bundles from several machines or people."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.markup import escape

from ..analysis.stats import N_BOOT
from ..common.errors import MeasurementError
from ..reports import print_summary, render_html
from ..reports.layout import print_rows
from ..reports.merge import bundle_rows, merge_bundles, render_merge_markdown
from ..reports.tables import sections
from ..reports.terminal import print_table
from ..reports.verdict import print_verdict, verdict_of
from .console import make_console

__all__ = ["merge_command"]

console = make_console()


def merge_command(
    bundles: list[Path] = typer.Argument(help="Two or more bundles made by `bakeoff bundle`"),
    out: Path | None = typer.Option(None, "--out", help="Directory for the unpacked runs and the merged report "
                                    "(default: runs/merge-TIMESTAMP)"),
    label: list[str] = typer.Option([], "--label", help="A name per bundle, in order (default: its GPU or CPU)"),
    json_out: bool = typer.Option(False, "--json", help="Print the merged summary as JSON."),
    markdown: bool = typer.Option(False, "--markdown", help="Print the merged report as markdown."),
    tables: bool = typer.Option(False, "--tables", help="Print every table of the merged report (default: the "
                                "bundles and the verdict block)."),
    n_boot: int = typer.Option(N_BOOT, "--n-boot", min=200, max=1_000_000, help="Bootstrap resamples per interval."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed of the comparisons across bundles."),
) -> None:
    """Merge verified bundles into one report: each run's arms with their own paired comparisons, and arms
    with the same configuration fingerprint on other hardware compared as hardware (unpaired, labelled)."""
    target = out or Path("runs") / time.strftime("merge-%Y%m%d-%H%M%S")
    merged = merge_bundles(bundles, target / "bundles", labels=label, n_boot=n_boot, seed=seed)
    text = render_merge_markdown(merged)
    try:
        (target / "report.md").write_text(text)
        (target / "summary.json").write_text(merged.model_dump_json(indent=2) + "\n")
        (target / "report.html").write_text(render_html(merged.summary, {}))
    except OSError as exc:
        raise MeasurementError(f"cannot write the merged report into {target}: {exc.strerror or exc}") from exc
    if json_out or markdown:
        typer.echo(merged.model_dump_json(indent=2) if json_out else text)
        return
    header, rows = bundle_rows(merged)
    print_rows(console, f"merged bundles ({len(rows)})", header, [[escape(c) for c in row] for row in rows])
    for note in merged.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False)
    if tables:
        print_summary(merged.summary, console)
    else:  # the answer first, as `bakeoff run` gives it, and the hardware comparison a merge exists for
        print_verdict(verdict_of(merged.summary), console)
        for section in sections(merged.summary):
            if section.id == "hardware":
                print_table(console, section.title, section.header, section.rows)
        console.print("[dim]every table: bakeoff merge ... --tables, or the merged report[/dim]", highlight=False)
    console.print("merged report:", highlight=False)
    for path in (target / "report.md", target / "summary.json", target / "report.html"):
        console.print(f"  {escape(str(path))}", highlight=False, soft_wrap=True)
