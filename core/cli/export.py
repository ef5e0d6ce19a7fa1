"""``bakeoff export RUN --format csv|parquet|jsonl|community``: flat tables to load elsewhere."""

from __future__ import annotations

from pathlib import Path

import typer

from ..common.errors import ConfigError
from ..reports.export import FORMATS, Format, export_run
from .console import make_console

__all__ = ["export_command"]

console = make_console()


def export_command(
    run_dir: Path = typer.Argument(help="A run directory made by `bakeoff run`"),
    fmt: str = typer.Option("csv", "--format", "-f", help="csv, parquet (pip install -e '.\\[analysis]'), jsonl, "
                            "or community (the community table as markdown, with machine, build and fingerprint)"),
    out: Path | None = typer.Option(None, "--out", help="Directory for the files (default: RUN_DIR/export)"),
) -> None:
    """Write a run as flat tables: samples (one row per request, the arm's settings as columns) and points (one
    row per arm and measured point: median, interval, paired ratio and verdict), or the community table row."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    if not (run_dir / "samples.jsonl").exists():
        raise ConfigError(f"{run_dir} is not a bakeoff run directory (no samples.jsonl)")
    fmt_: Format = fmt  # type: ignore[assignment]  # checked against FORMATS above
    paths = export_run(run_dir, fmt_, out or run_dir / "export")
    if fmt == "community":
        typer.echo(paths[0].read_text(), nl=False)
    for path in paths:
        console.print(f"wrote {path}", highlight=False, soft_wrap=True)
