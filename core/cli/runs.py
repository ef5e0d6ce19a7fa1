"""``bakeoff runs [DIR]``: the runs under a directory, finished or not, with how to resume the others.

Each run directory's SQLite index answers the counts; a run made before the index existed is read from
its samples.jsonl instead (and is not written to: listing never changes a run). Whether a run measured what
it planned is read as its report reads it (core/reports/completeness.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import typer
from rich.markup import escape

from ..common.errors import BakeoffError, RunRecordError, StoreError
from ..reports.completeness import RunProgress, run_progress
from ..reports.layout import print_rows
from ..results.db import RunDB, RunSummary, arm_records_of
from ..results.record import RunRecord, failed_arms
from ..results.store import RunDir, dir_safe, read_samples
from .console import make_console

__all__ = ["runs_command", "list_runs"]

console = make_console()


def _from_files(path: Path) -> RunSummary:
    run = RunDir.open(path)
    try:
        record = run.read_record()
    except RunRecordError:  # a record this bakeoff cannot read (the report says why): listed by its samples
        record = RunRecord()
    samples = read_samples(path)
    return RunSummary(run_id=run.run_id, path=path, name=record.name,
                      started_at=record.started_at, finished_at=record.finished_at,
                      samples=len(samples), errors=sum(s.status == "error" for s in samples),
                      flagged=sum(bool(s.flags) for s in samples), arms=record.arm_names,
                      failed_arms=failed_arms(arm_records_of(path, record)), indexed=False)


def list_runs(base: Path) -> list[RunSummary]:
    """Every run directory directly under ``base`` (one with a run.json), oldest first."""
    out: list[RunSummary] = []
    if not base.is_dir():
        return out
    for path in sorted(p for p in base.iterdir() if (p / "run.json").is_file()):
        db = RunDB(path)
        summary = None
        if db.exists:
            try:
                summary = db.summary(RunDir(path, create=False).run_id, path)
            except StoreError:
                summary = None
        if summary is None or summary.started_at is None:
            try:
                summary = _from_files(path)
            except (OSError, ValueError, BakeoffError):  # unreadable, or written by a newer bakeoff
                continue
        out.append(summary)
    return sorted(out, key=lambda s: (s.started_at or 0.0, s.run_id))


def _progress(path: Path) -> RunProgress | None:
    """Planned against measured (None: the run cannot be read that far)."""
    try:
        record = RunDir.open(path).read_record(strict=False)
        samples = [(s.arm, s.pass_index) for s in read_samples(path)]
        return run_progress(record, samples, arm_records_of(path, record), path)
    except (OSError, ValueError, BakeoffError):
        return None


def _incomplete(s: RunSummary, progress: RunProgress | None) -> bool:
    return s.finished_at is None or (progress is not None and not progress.complete)


def _state(s: RunSummary, progress: RunProgress | None) -> str:
    if _incomplete(s, progress):
        return f"incomplete: {progress.line}" if progress is not None and progress.passes_planned else "incomplete"
    return f"{len(s.failed_arms)} arm(s) failed" if s.failed_arms else "finished"


def runs_command(
    base: Path = typer.Argument(Path("runs"), help="Directory holding run directories (bakeoff run --out)"),
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """List the runs under DIR: state, arms, samples, errors, and how to resume an incomplete one."""
    runs = list_runs(base)
    progress = {s.run_id: _progress(s.path) for s in runs}
    if json_out:
        rows = [{**asdict(s), "path": str(s.path), "state": _state(s, progress[s.run_id]),
                 "progress": p.model_dump(mode="json") if (p := progress[s.run_id]) else None} for s in runs]
        typer.echo(json.dumps(rows, indent=2))
        return
    if not runs:
        console.print(f"no runs under {base}")
        return
    # a run id names its start and its name (20261207-112959-bakeoff): those columns only where it does not
    named = all(s.name and s.started_at and dir_safe(s.name) in s.run_id
                and s.run_id.startswith(time.strftime("%Y%m%d-%H%M", time.localtime(s.started_at))) for s in runs)
    header = ["run", *([] if named else ["name", "started"]), "state", "arms", "samples", "errors", "flagged"]
    cells: list[list[str]] = []
    for s in runs:
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.started_at)) if s.started_at else "–"
        cells.append([escape(s.run_id), *([] if named else [escape(s.name or "–"), started]),
                     escape(_state(s, progress[s.run_id])), str(len(s.arms)), str(s.samples), str(s.errors),
                     str(s.flagged)])
    print_rows(console, f"runs under {escape(str(base))}", header, cells,
               right=[col in ("arms", "samples", "errors", "flagged") for col in header])
    for s in runs:
        if _incomplete(s, progress[s.run_id]) or s.failed_arms:
            why = f" ({p.stopped_why})" if (p := progress[s.run_id]) and p.stopped_why else ""
            console.print(f"resume {escape(s.run_id)}{escape(why)}:", highlight=False)
            console.print(escape(f"bakeoff run --resume {s.path}"), highlight=False, soft_wrap=True)
