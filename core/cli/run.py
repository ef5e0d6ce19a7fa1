"""``bakeoff run FILE``: run a bakeoff and print the closing table (core/cli/running.py does the running)."""

from __future__ import annotations

from pathlib import Path

import typer

from ..common.errors import ConfigError
from ..config.loader import load_bakeoff
from ..run.resume import load_resume
from .exit_codes import EXIT_CODES_HELP
from .running import TABLES_HELP, console, percent, run_loaded

__all__ = ["run_command"]


def run_command(
    file: Path | None = typer.Argument(None, help="Bakeoff YAML file (optional with --resume)"),
    out: Path = typer.Option(Path("runs"), "--out", help="Directory that receives the run directory"),
    until_ci: str | None = typer.Option(None, "--until-ci", help="Add passes until every arm's 95 % CI half-width "
                                        "(its ratio to the baseline; one arm: its median) is at most this, e.g. 3%"),
    max_passes: int = typer.Option(10, "--max-passes", help="Most passes with --until-ci"),
    stop_on_verdict: bool = typer.Option(False, "--stop-on-verdict", help="With --until-ci: also stop once every "
                                         "arm's verdict is clear (its ratio interval, at a level that spends 5 % "
                                         "over all passes, excludes 1), even if still wider than the target"),
    resume: Path | None = typer.Option(None, "--resume", help="Finish an interrupted run in RUN_DIR with the "
                                       "configuration recorded there, skipping samples already stored"),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print every command the run would run (live service, "
                                 "engines, knobs) and run none"),
    executor_kind: str | None = typer.Option(None, "--executor", help="local (default) or ray: each host's block "
                                             "of arms on a Ray cluster (hosts: in the file; docs/ray.md)"),
    address: str | None = typer.Option(None, "--address", help="Ray cluster address (with --executor ray; "
                                       "default: $RAY_ADDRESS, else a Ray instance on this machine)"),
    tables: bool = typer.Option(False, "--tables", "-v", help=TABLES_HELP),
    llama_bench: bool = typer.Option(False, "--llama-bench", help="llama.cpp arms: after the run, also run the "
                                     "same build's llama-bench on the same GGUF and settings, and print its tg "
                                     "beside each arm's decode rate (docs/guide.md)"),
) -> None:
    resumed = None
    if resume is not None:
        resumed = load_resume(resume, file)
        console.print(f"resuming: {len(resumed.done)} measurement points already stored")
        for msg in resumed.warnings:
            console.print(f"[bold yellow]WARNING[/bold yellow] {msg}", highlight=False)
        config = resumed.config
    elif file is None:
        raise ConfigError("give a bakeoff FILE, or --resume RUN_DIR")
    else:
        config = load_bakeoff(file)
    run_loaded(config, out, dry_run=dry_run, until_ci=percent(until_ci), max_passes=max_passes,
               executor_kind=executor_kind, address=address, stop_on_verdict=stop_on_verdict, resume=resumed,
               tables=tables, llama_bench=llama_bench)


run_command.__doc__ = f"""Run every arm of a bakeoff file and print the comparison table.

{EXIT_CODES_HELP}
"""
