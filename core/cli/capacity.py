"""``bakeoff capacity FILE``: each arm's highest load at which the capacity: section's SLOs hold, paired
(core/run/capacity.py searches, core/analysis/capacity.py judges, docs/capacity.md explains)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from ..analysis.capacity import Probe, level_margins
from ..common.errors import BakeoffError
from ..config.capacity import CapacitySection
from ..config.loader import load_bakeoff
from ..reports import print_run
from ..reports.terminal import print_capacity
from ..run.bakeoff import run_bakeoff
from ..run.capacity import CapacityExecutor, check_capacity_config
from ..run.events import RunEvents
from .exit_codes import ExitCode
from .progress import warning_printer
from .running import console, stop_signals_as_interrupt

__all__ = ["capacity_command"]


def _probe_line(p: Probe, section: CapacitySection) -> str:
    margins, values = level_margins([p], section)
    worst = min(margins, key=lambda k: margins[k])
    one = p.level == 1
    unit = ("stream" if one else "streams") if section.load == "streams" else "req/s"
    if p.kind == "sessions":  # the unit names the kind
        unit = "session at once" if one else "sessions at once"
    held = "holds" if margins[worst] >= 0 else "fails"
    value = values[worst]
    shown = f"{value:.0%}" if worst.startswith("goodput") else f"{value:.3g} s"
    cut = f"; cut: {p.cut}" if p.cut else ""
    who = p.arm if p.kind in ("plain", "sessions") else f"{p.arm} {p.kind}"
    return f"  {who} at {p.level:g} {unit} (replicate {p.replicate + 1}): {held}, {worst.split(' ')[0]} " \
           f"{worst.split(' ')[1]} {shown}{cut}"


def _events() -> RunEvents:
    """Plain lines, no progress bar: the search decides how many requests it sends, and says each probe."""
    warn = warning_printer(console)
    return RunEvents(
        on_run_start=lambda run, total, done: console.print(f"run directory: [bold]{run.path}[/bold]"),
        on_note=lambda msg: console.print(escape(msg), highlight=False),
        on_arm_ready=lambda arm, eff, boot: console.print(
            escape(f"{arm}: ready" + (f" (boot {boot:.1f} s)" if boot else "")), highlight=False),
        on_arm_failed=lambda arm, why: console.print(f"[red]arm {escape(arm)} failed:[/red] {escape(why)}",
                                                     highlight=False),
        on_warning=warn)


def capacity_command(
    file: Path = typer.Argument(help="Bakeoff YAML file with a capacity: section"),
    out: Path = typer.Option(Path("runs"), "--out", help="Directory that receives the run directory"),
) -> None:
    config = load_bakeoff(file)
    section = check_capacity_config(config)
    executor = CapacityExecutor(on_probe=lambda p: console.print(escape(_probe_line(p, section)),
                                                                 highlight=False))
    with stop_signals_as_interrupt():
        run = run_bakeoff(config, out, executor=executor, events=_events())
        try:
            print_run(run.path, console)
        except (BakeoffError, OSError, ValueError) as exc:  # the samples and capacity.json are stored
            console.print(f"[bold yellow]WARNING[/bold yellow] the report could not be written "
                          f"({type(exc).__name__}: {escape(str(exc))}); `bakeoff report {run.path}` retries",
                          highlight=False)
        result = executor.result
        if result is None:
            raise typer.Exit(ExitCode.NOTHING_MEASURED)
        print_capacity(result, console)
        console.print(f"capacity: {escape(str(run.path / 'capacity.json'))}", highlight=False)
        if all(a.estimate is None for a in result.arms):
            raise typer.Exit(ExitCode.NOTHING_MEASURED)


capacity_command.__doc__ = """Find each arm's highest load at which the capacity: section's SLOs hold, paired across
arms.

Exit codes: 0 a boundary was found for at least one arm; 2 configuration error, nothing ran; 3 no arm held at
the first load probed (no boundary); 130 interrupted.
"""
