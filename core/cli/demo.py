"""``bakeoff demo``: the embedded default bakeoff, end to end on this machine.

The demo's bakeoff file ships with the built-in engines (``bakeoff.engines/demo.yaml``); the demo
makes sure its engines are installed, then runs it like ``bakeoff run``.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import typer

from ..common.errors import EngineUnavailable
from ..config.loader import parse_bakeoff
from ..engine.registry import load_engine
from ..run.executor import LocalExecutor
from .console import make_console
from .exit_codes import EXIT_CODES_HELP
from .running import TABLES_HELP, execute, finish

console = make_console()
DEMO_UNTIL_CI, DEMO_MAX_PASSES = 0.03, 6  # about 100 s of requests on a 2-core CPU at the cap


def demo_command(
    out: Path = typer.Option(Path("runs"), "--out", help="Directory that receives the run directory"),
    print_config: bool = typer.Option(False, "--print-config", help="Print the demo's bakeoff file and exit"),
    tables: bool = typer.Option(False, "--tables", "-v", help=TABLES_HELP),
) -> None:
    text = files("bakeoff.engines").joinpath("demo.yaml").read_text()
    if print_config:
        typer.echo(text)
        return
    config = parse_bakeoff(text, "demo.yaml")
    for engine in sorted({arm.engine for arm in config.arms}):
        adapter = load_engine(engine)
        try:
            adapter.preflight(config.arms[0])
        except EngineUnavailable:
            if adapter.installer is None:
                raise
            console.print(f"{engine} is not installed yet; installing it (once, cached)")
            adapter.installer.install(lambda msg: console.print(f"[dim]{msg}[/dim]"))
    # passes until each ratio is decided (faster, slower or equivalent: --until-ci with --stop-on-verdict), at
    # most DEMO_MAX_PASSES: a busy machine ends undecided and says so, instead of a verdict drawn from noise
    executor = LocalExecutor()  # the exit code of `bakeoff run`: 3 nothing measured, 4 partial
    execute(config, out, tables=tables, until_ci=DEMO_UNTIL_CI, max_passes=DEMO_MAX_PASSES, stop_on_verdict=True,
            executor=executor, exit_step=lambda run: finish(config, run, executor))


demo_command.__doc__ = f"""Run the built-in demo: installs what it needs, then compares the arms of the demo file.

{EXIT_CODES_HELP}
"""
