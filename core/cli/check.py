"""``bakeoff check FILE``: is this file right, and what does this machine still need to run it?

Reads and plans the file on paper (core/run/check.py): nothing is run, downloaded, synthesized or built, so a
file can be checked before any engine is installed. Exit 0: the file is valid (what the machine lacks is
listed as warnings, each with the command that provides it); 2: the file has errors, each on its own line.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from ..common.errors import ConfigError
from ..run.check import CheckResult, check_file
from .console import make_console

__all__ = ["check_command", "print_check"]

console = make_console(highlight=False)


def print_check(result: CheckResult, out: Console) -> None:
    c = result.config
    w = c.workload
    if result.shape is None:  # phases run for a duration, not a count
        assert c.phases is not None
        size = f"{len(c.phases.phase_names)} phases of {c.phases.duration_s:g} s against one server"
    else:
        size = (f"{result.requests} timed requests = {len(result.arms)} arm(s) × {w.passes} pass(es) × "
                f"{result.shape.text()}")
        if w.arrival is not None:
            size += f" (open loop at {', '.join(f'{r:g}' for r in w.arrival.rates)} req/s)"
    out.print(f"[bold]{escape(result.source)}[/bold]: {escape(size)}; "
              f"{result.engine_starts} engine start(s) per pass")
    for line in result.command:
        out.print(escape(line))
    width = max((len(a.name) for a in result.arms), default=3)
    engine_width = max((len(a.engine) for a in result.arms), default=6)
    for a in result.arms:
        out.print(f"  {escape(a.name):<{width}}  {escape(a.engine):<{engine_width}}  {escape(a.runs)}")
    for line in result.calibration:
        out.print(f"calibration: {escape(line)}")
    for note in result.notes:
        out.print(f"[dim]note: {escape(note)}[/dim]")
    for lack in result.lacks:
        arms = ", ".join(lack.arms)
        out.print(f"[yellow]WARNING[/yellow] {escape(arms)}: {escape(lack.what)}")
        out.print(f"  fix: [bold]{escape(lack.fix)}[/bold]")
    if result.errors:
        return
    if result.lacks:
        out.print(f"[green]the file is valid[/green]; this machine lacks {len(result.lacks)} thing(s) listed above "
                  "(the run would stop at the first)")
    else:
        out.print("[green]the file is valid, and this machine has what it needs[/green]")


def check_command(
    file: Path = typer.Argument(help="Bakeoff YAML file"),
) -> None:
    """Check a bakeoff file without engines: every arm on paper, and what this machine still lacks to run it.

    Validates every arm against its engine's declared capabilities and options, expands sweeps and calibration
    sections, and lists per arm what is missing here (engine, plugin, model files) with the command that fixes
    each. Nothing is run, downloaded, synthesized or built. Exit 0: the file is valid; 2: it has errors.
    """
    result = check_file(file)
    print_check(result, console)
    if result.errors:
        raise ConfigError("\n".join(result.errors))
