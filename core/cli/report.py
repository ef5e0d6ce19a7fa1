"""``bakeoff report RUN_DIR``: tables with intervals and verdicts, and the report files of a run directory.

The files go into RUN_DIR/report, unless ``--out`` names another directory or the run is not the user's to write
into: a run committed to a git checkout (``evidence/``, which the README points at) or a read-only one gets a new
temporary directory, named, so reading a committed run never leaves files in the checkout.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import typer

from ..analysis.stats import N_BOOT
from ..reports import print_run, render_markdown, require_run_dir, summarize_run, write_reports
from .console import make_console
from .running import TABLES_HELP

__all__ = ["report_command"]

console = make_console()
notes = make_console(stderr=True)  # beside --json's or --markdown's stdout, which must stay whole


def report_command(
    run_dir: Path = typer.Argument(help="A run directory made by `bakeoff run`"),
    markdown: bool = typer.Option(False, "--markdown", help="Print the community markdown instead of the tables."),
    json_out: bool = typer.Option(False, "--json", help="Print the JSON summary instead of the tables."),
    no_files: bool = typer.Option(False, "--no-files", help="Do not write report files into RUN_DIR/report."),
    files_dir: Path | None = typer.Option(None, "--out", help="Write the report files into this directory instead "
                                          "of RUN_DIR/report (the run directory is only read; it may be read-only)."),
    n_boot: int = typer.Option(N_BOOT, "--n-boot", min=200, max=1_000_000, help="Bootstrap resamples per interval."),
    seed: int | None = typer.Option(None, "--seed", help="Bootstrap seed (default: the run's recorded seed)."),
    drop_foreign_load: bool = typer.Option(False, "--drop-foreign-load", help="Leave out samples flagged as "
                                           "taken while other processes used the CPU (their number is reported)."),
    baseline: str | None = typer.Option(None, "--baseline", help="Compare every arm with this arm instead of the "
                                        "run's baseline (e.g. another engine's spec-off arm); with --out, the "
                                        "run's own report files stay as they are."),
    tables: bool = typer.Option(False, "--tables", "-v", help=TABLES_HELP),
) -> None:
    """Print a run's verdict (--tables: every table) and write its report files.

    Works on a finished or interrupted run: 95 % intervals and verdicts in the terminal; markdown, JSON, PNG/SVG
    plots and one HTML file in RUN_DIR/report or --out. Nothing else in RUN_DIR is written."""
    require_run_dir(run_dir)
    if not no_files and files_dir is None:
        files_dir = _elsewhere(run_dir)
    if markdown or json_out:
        summary = summarize_run(run_dir, n_boot=n_boot, seed=seed, drop_foreign_load=drop_foreign_load,
                                baseline=baseline)
        typer.echo(summary.model_dump_json(indent=2) if json_out else render_markdown(summary))
        if not no_files:
            write_reports(run_dir, summary, out=files_dir)
        return
    print_run(run_dir, console, write=not no_files, n_boot=n_boot, seed=seed, drop_foreign_load=drop_foreign_load,
              files_dir=files_dir, baseline=baseline, tables=tables)


def committed(run_dir: Path) -> bool:
    """Whether the run's record is tracked by git: a run of the checkout (evidence), not one the user made."""
    try:
        done = subprocess.run(["git", "-C", str(run_dir), "ls-files", "--error-unmatch", "run.json"],
                              capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):  # no git here: nothing can be committed
        return False
    return done.returncode == 0


def _elsewhere(run_dir: Path) -> Path | None:
    """A new temporary directory for the report files of a run that is not the user's to write into, or None."""
    if committed(run_dir):
        why = "the run is committed to git"
    elif not os.access(run_dir, os.W_OK):
        why = "the run directory is read-only"
    else:
        return None
    out = Path(tempfile.mkdtemp(prefix=f"bakeoff-report-{run_dir.resolve().name}-"))
    notes.print(f"{why}, so its report files go to a new temporary directory (--out names another)",
                highlight=False)
    return out
