"""``bakeoff report RUN_DIR``: tables with intervals and verdicts, and the report files of a run directory."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from ..analysis.phases import compare_phases
from ..analysis.stats import N_BOOT
from ..common.errors import ConfigError
from ..reports import print_summary, render_markdown, report_dir, summarize_run, write_reports
from ..reports.markdown import markdown_table
from ..reports.tables import phase_rows
from ..results.store import RunDir, read_samples

__all__ = ["print_tables", "print_phase_table", "report_command"]

console = Console()


def print_tables(run_path: Path, out: Console, *, write: bool = True, n_boot: int = N_BOOT,
                 seed: int | None = None, drop_foreign_load: bool = False, files_dir: Path | None = None,
                 baseline: str | None = None) -> None:
    """Print the run's tables (called by ``bakeoff run`` after a run) and write its report files.

    :param files_dir: where the report files go (default ``run_path/report``).
    """
    summary = summarize_run(run_path, n_boot=n_boot, seed=seed, drop_foreign_load=drop_foreign_load, baseline=baseline)
    print_summary(summary, out)  # with the n-max / depth / concurrency sections, when the run has them
    print_phase_table(run_path, out, write=write, files_dir=files_dir)  # live-knob phases, when the run has them
    if write:
        files = write_reports(run_path, summary, out=files_dir)
        for failure in files.plot_failures:
            out.print(f"[bold yellow]WARNING[/bold yellow] {failure}", highlight=False)
        out.print(f"reports: {files.markdown}, {files.json}, {files.html} (+{len(files.plots)} plot files)",
                  highlight=False, soft_wrap=True)


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
) -> None:
    """Print a finished (or interrupted) run's tables with 95 % intervals and verdicts, and write its reports
    (markdown, JSON, PNG/SVG plots, one HTML file) into RUN_DIR/report or --out. Nothing else in RUN_DIR is
    written."""
    if not (run_dir / "samples.jsonl").exists() and not (run_dir / "run.json").exists():
        raise ConfigError(f"{run_dir} is not a bakeoff run directory")
    if markdown or json_out:
        summary = summarize_run(run_dir, n_boot=n_boot, seed=seed, drop_foreign_load=drop_foreign_load,
                                baseline=baseline)
        typer.echo(summary.model_dump_json(indent=2) if json_out else render_markdown(summary))
        if not no_files:
            write_reports(run_dir, summary, out=files_dir)
        return
    print_tables(run_dir, console, write=not no_files, n_boot=n_boot, seed=seed, drop_foreign_load=drop_foreign_load,
                 files_dir=files_dir, baseline=baseline)


def print_phase_table(run_path: Path, out: Console, *, write: bool = True, files_dir: Path | None = None) -> None:
    """Print the phase table of a phase run (nothing for other runs) and write ``phases.md`` beside the other
    report files."""
    record = RunDir.open(run_path).read_record()  # empty when the run wrote no run.json
    if not record.phases:
        return
    header, rows = phase_rows(compare_phases(read_samples(run_path), record.phases, seed=record.seed or 0))
    table = Table(*header, title="phases: each knob against its neighbouring baselines (paired, 95 % CI)")
    for row in rows:
        table.add_row(*row)
    out.print(table)
    if write:
        target = report_dir(run_path, files_dir)
        target.mkdir(parents=True, exist_ok=True)
        (target / "phases.md").write_text(
            "## Phases\n\nEach knob phase against the baseline phases either side of it, paired on prompt, mode "
            "and round; ratios are medians of paired ratios with bootstrap 95 % intervals.\n\n"
            + markdown_table(header, rows) + "\n")
