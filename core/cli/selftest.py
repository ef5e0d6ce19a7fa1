"""``bakeoff selftest ENGINE``: does the installed engine accept every speculative flag bakeoff emits?

Each speculative method the adapter maps (a case on tiny models it provides) runs through the normal
protocol; this command prints one row per method and exits non-zero, quoting the engine's own log
line, when any method failed to start, ran without speculation, or accepted less than its weights force.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import typer
from rich.table import Table

from ..common.errors import BakeoffError
from ..engine.registry import load_engine
from ..run.selftest import SelftestRow, run_selftest
from .console import make_console

console = make_console()


def _yes_no(value: bool | None) -> str:
    return "?" if value is None else ("[green]yes[/green]" if value else "no")


def selftest_table(engine: str, rows: list[SelftestRow], wall_s: float) -> Table:
    version = next((r.version for r in rows if r.version), None)
    table = Table(title=f"bakeoff selftest {engine}" + (f" ({version})" if version else ""),
                  caption=f"{sum(r.ok for r in rows)}/{len(rows)} passed in {wall_s:.1f} s")
    for col in ("method", "flags bakeoff emitted", "started", "speculative", "drafted", "accepted",
                "acceptance", "seconds", "result"):
        table.add_column(col, overflow="fold", justify="right" if col in ("drafted", "accepted", "acceptance",
                                                                          "seconds") else "left")
    for r in rows:
        acc = r.acceptance
        table.add_row(r.label, r.flags or "-", _yes_no(r.started) if r.started or r.problems else "?",
                      _yes_no(r.speculative), "-" if r.drafted is None else str(r.drafted),
                      "-" if r.accepted is None else str(r.accepted), "-" if acc is None else f"{acc:.3f}",
                      f"{r.seconds:.1f}", "[green]ok[/green]" if r.ok else "[red]FAILED[/red]")
    return table


def selftest_command(
    engine: str = typer.Argument(help="Engine to test, e.g. llamacpp"),
    keep: Path | None = typer.Option(None, "--keep", help="Keep run directories and engine logs here "
                                                          "(default: a temporary directory, kept only on failure)"),
) -> None:
    """Run every speculative method ENGINE maps through the installed engine, on tiny synthesized models."""
    workdir = keep or Path(tempfile.mkdtemp(prefix="bakeoff-selftest-"))
    t0 = time.perf_counter()
    try:
        adapter = load_engine(engine)
        rows = run_selftest(adapter, lambda msg: console.print(f"[dim]{msg}[/dim]"), workdir)
    except BakeoffError:  # no self-test for this engine, engine not installed, model download failed
        if keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
        raise
    wall = time.perf_counter() - t0
    console.print(selftest_table(engine, rows, wall))
    failed = [r for r in rows if not r.ok]
    for r in failed:
        for problem in r.problems:
            console.print(f"[red]{r.label}[/red]: {problem}")
        if r.run_dir:
            console.print(f"  engine log: {r.run_dir / 'arms'}")
    if failed:
        console.print(f"[red]{len(failed)} method(s) failed[/red]; logs kept in {workdir}")
        raise typer.Exit(1)
    if keep is None:
        shutil.rmtree(workdir, ignore_errors=True)
    console.print(f"all {len(rows)} speculative paths of {engine} work ({wall:.1f} s)")
