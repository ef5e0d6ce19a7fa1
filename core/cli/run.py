"""``bakeoff run FILE``: run a bakeoff and print the closing table."""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..config import BakeoffFile, load_bakeoff
from ..errors import BakeoffError, ConfigError
from ..live import LiveRun, dry_run_lines
from ..phases import check_phases_config, run_phases
from ..protocol import ProtocolEvents, plan_run, run_extra_pass, run_metadata, run_plan
from ..resume import Resume, load_resume
from ..stats import needs_more_passes
from ..store import RunDir, new_run_dir
from .report import print_tables

console = Console()


def _percent(text: str | None) -> float | None:
    """'3%' or '0.03' -> 0.03."""
    if text is None:
        return None
    try:
        value = float(text.strip().rstrip("%")) / (100 if text.strip().endswith("%") else 1)
    except ValueError:
        raise ConfigError(f"--until-ci {text!r}: give a percentage such as 3%") from None
    if not 0 < value < 1:
        raise ConfigError(f"--until-ci {text!r}: give a percentage between 0 and 100 %")
    return value


def _sigterm_as_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def execute(config: BakeoffFile, out: Path, until_ci: float | None = None, max_passes: int = 10,
            resume: Resume | None = None) -> RunDir:
    """Plan, run and report one bakeoff (or finish ``resume``'s); engines are stopped on every way out."""
    check_phases_config(config)
    plan = plan_run(config)
    if resume is None:
        run = RunDir(new_run_dir(out, config.name))
        run.write_run(run_metadata(plan))
    else:  # same directory, recorded orders, stored samples skipped
        run = resume.run
        resume.apply(plan)
    done = resume.done if resume else set()
    console.print(f"run directory: [bold]{run.path}[/bold]")
    live = LiveRun(config, run, console.print)  # live: and phases: (docs/live.md); a no-op without them
    previous = signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    try:
        live.open()
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=False) as progress:
            task = progress.add_task("starting", total=plan.requests_total, completed=len(done))

            def on_sample(sample: object) -> None:
                progress.advance(task)

            events = ProtocolEvents(
                on_arm_start=lambda arm, p: progress.update(task, description=f"{arm} (pass {p + 1}): starting"),
                on_arm_ready=lambda arm, eff, boot: progress.update(
                    task, description=f"{arm}: measuring" + (f" (boot {boot:.1f} s)" if boot else "")),
                on_sample=on_sample,
                on_arm_failed=lambda arm, why: progress.console.print(f"[red]arm {arm} failed:[/red] {why}"),
                on_warning=lambda msg: progress.console.print(f"[bold yellow]WARNING[/bold yellow] {msg}"),
            )
            if config.phases is not None:
                run_phases(plan, run, events, live.guard)
            else:
                run_plan(plan, run, events, done)
            while until_ci is not None and config.phases is None:  # adaptive passes: --until-ci
                more, why = needs_more_passes(run.samples(), len(plan.orders), until_ci, max_passes,
                                              seed=config.workload.seed)
                progress.console.print(why, highlight=False)
                if not more:
                    break
                per_pass = plan.requests_total // config.workload.passes
                progress.update(task, total=(progress.tasks[0].total or 0) + per_pass)
                run_extra_pass(plan, run, events)
    finally:
        signal.signal(signal.SIGTERM, previous)
        live.close()
    print_tables(run.path, console)
    console.print(f"run directory: [bold]{run.path}[/bold]")
    return run


def run_command(
    file: Path | None = typer.Argument(None, help="Bakeoff YAML file (optional with --resume)"),
    out: Path = typer.Option(Path("runs"), "--out", help="Directory that receives the run directory"),
    until_ci: str | None = typer.Option(None, "--until-ci", help="Add passes until every arm's median 95 % CI "
                                        "half-width is at most this, e.g. 3%"),
    max_passes: int = typer.Option(10, "--max-passes", min=1, help="Most passes with --until-ci"),
    resume: Path | None = typer.Option(None, "--resume", help="Finish an interrupted run in RUN_DIR with the "
                                       "configuration recorded there, skipping samples already stored"),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print every command the run would run (live service, "
                                 "engines, knobs) and run none"),
) -> None:
    """Run every arm of a bakeoff file and print the comparison table."""
    try:
        if resume is not None:
            resumed = load_resume(resume, file)
            console.print(f"resuming: {len(resumed.done)} measurement points already stored")
            for msg in resumed.warnings:
                console.print(f"[bold yellow]WARNING[/bold yellow] {msg}", highlight=False)
            execute(resumed.config, out, _percent(until_ci), max_passes, resume=resumed)
            return
        if file is None:
            raise ConfigError("give a bakeoff FILE, or --resume RUN_DIR")
        if dry_run:
            for line in dry_run_lines(load_bakeoff(file)):
                typer.echo(line)
            return
        execute(load_bakeoff(file), out, _percent(until_ci), max_passes)
    except BakeoffError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: engines stopped; samples so far are in the run directory[/yellow]")
        raise typer.Exit(130) from None
