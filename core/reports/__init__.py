"""Layer 9, reports: from a run directory, terminal table, community markdown, versioned JSON, plots, one HTML file.

:func:`write_reports` computes the run summary once (core/analysis/stats.py) and writes every format under
``RUN_DIR/report/`` (or a directory the caller names); each format only renders the summary.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from ..analysis.stats import N_BOOT
from ..common.errors import RunDirError
from .html import render_html
from .markdown import render_markdown
from .model import REPORT_SCHEMA_VERSION, RunSummary, load_run, require_run_dir, summarize_run
from .terminal import print_summary

__all__ = ["REPORT_SCHEMA_VERSION", "RunSummary", "ReportFiles", "summarize_run", "write_reports", "report_dir",
           "require_run_dir", "print_summary", "print_run", "render_markdown", "render_html"]


def report_dir(run_path: Path, out: Path | None = None) -> Path:
    """Where a run's report files go: ``out`` when given (a run directory may be read-only), else
    ``run_path/report``."""
    return out if out is not None else run_path / "report"


@dataclass
class ReportFiles:
    directory: Path
    markdown: Path
    json: Path
    html: Path
    plots: list[Path] = field(default_factory=list)
    plot_failures: list[str] = field(default_factory=list)


def write_reports(run_path: Path, summary: RunSummary | None = None, *, plots: bool = True,
                  out: Path | None = None) -> ReportFiles:
    """Write report.md, summary.json, report.html and the plots into ``out`` (default ``run_path/report``);
    the run directory itself is only read.

    Every file is rendered and written beside its final name first, and only once all are written do they
    replace the previous ones: a full disk or an interruption leaves the previous report whole, never a
    truncated file or a mix of two reports.

    :raises RunDirError: the directory cannot be written.
    """
    from .plots import render_plots  # matplotlib: only when plots are drawn

    summary = summary or summarize_run(run_path)
    out = report_dir(run_path, out)
    samples = load_run(run_path, drop_foreign_load=summary.dropped_foreign_load is not None)[1]
    failures: list[str] = []
    rendered = render_plots(summary, samples, failures) if plots else {}
    plot_files = {f"{name}.{fmt}": data for name, formats in rendered.items() for fmt, data in formats.items()}
    contents = dict(plot_files)
    contents["report.md"] = render_markdown(summary).encode()
    contents["summary.json"] = (summary.model_dump_json(indent=2) + "\n").encode()
    contents["report.html"] = render_html(summary, rendered).encode()
    _replace_files(out, contents)
    return ReportFiles(out, out / "report.md", out / "summary.json", out / "report.html",
                       [out / name for name in plot_files], failures)


def _replace_files(directory: Path, contents: dict[str, bytes]) -> None:
    """Write every file under a temporary name in ``directory``, then rename each into place (all or none)."""
    staged: list[tuple[Path, Path]] = []
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in contents.items():
            final = directory / name
            temp = directory / f".{name}.{os.getpid()}.tmp"
            staged.append((temp, final))
            with open(temp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        for temp, final in staged:
            os.replace(temp, final)
    except OSError as exc:
        for temp, _ in staged:
            temp.unlink(missing_ok=True)
        raise RunDirError(f"cannot write reports into {directory}: {exc.strerror or exc}; the previous report "
                          "files are left as they were") from exc


def print_run(run_path: Path, out: Console, *, write: bool = True, n_boot: int = N_BOOT, seed: int | None = None,
              drop_foreign_load: bool = False, files_dir: Path | None = None, baseline: str | None = None,
              tables: bool = False) -> None:
    """Print a run's verdict block, or with ``tables`` every table (``bakeoff run`` after a run, ``bakeoff
    report``), and write its report files, all from one summary.

    :param files_dir: where the report files go (default ``run_path/report``).
    """
    from .tables import phase_rows
    from .terminal import print_references, print_table
    from .verdict import print_verdict, verdict_of

    summary = summarize_run(run_path, n_boot=n_boot, seed=seed, drop_foreign_load=drop_foreign_load, baseline=baseline)
    if tables:
        print_summary(summary, out)
    else:
        print_verdict(verdict_of(summary), out)
        if summary.phases:  # a phase run's answer is its phase table
            print_table(out, "phases: each knob against its neighbouring baselines (paired, 95 % CI)",
                        *phase_rows(summary.phases))
        print_references(summary, out)  # asked for with --llama-bench: beside the verdict's decode rates
    lead, command = ("every table:", f"bakeoff report {run_path} --tables") if not tables else ("", "")
    if write:
        files = write_reports(run_path, summary, out=files_dir)
        for failure in files.plot_failures:
            out.print(f"[bold yellow]WARNING[/bold yellow] {failure}", highlight=False)
        if tables:
            out.print(f"reports (+{len(files.plots)} plot files):", highlight=False)
            for path in (files.markdown, files.json, files.html):
                out.print(f"  {escape(str(path))}", highlight=False, soft_wrap=True)
        else:
            out.print(f"report: {escape(str(files.html))}", highlight=False, soft_wrap=True)  # every table, plots
            lead = "every table in the terminal:"
    if command:  # the command on a line of its own, never wrapped, so it can be copied whole
        out.print(f"[dim]{escape(lead)}[/dim]", highlight=False, soft_wrap=True)
        out.print(escape(command), highlight=False, soft_wrap=True)
