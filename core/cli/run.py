"""``bakeoff run FILE``: run a bakeoff and print the closing table."""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..analysis.stats import needs_more_passes
from ..common.errors import BakeoffError, ConfigError, RunDirError
from ..config.checks import check_phases_config
from ..config.loader import load_bakeoff
from ..config.schema import BakeoffFile
from ..engine.launcher import stop_leftover_engines
from ..results.sample import Sample
from ..results.store import RunDir, new_run_dir
from ..run.executor import Executor, LocalExecutor, executor_for
from ..run.live import LiveRun, dry_run_lines
from ..run.phases import run_phases
from ..run.plan import plan_run, run_metadata
from ..run.protocol import ProtocolEvents, is_write_failure, run_extra_pass
from ..run.resume import Resume, load_resume
from .exit_codes import EXIT_CODES_HELP, ExitCode, failed_arms, run_outcome
from .report import print_tables

__all__ = ["run_command", "execute", "finish", "run_loaded"]

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


# Signals that end a run like Ctrl-C does: engines stopped, samples kept. SIGHUP is a closed terminal or SSH.
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _signal_as_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _new_run(out: Path, config: BakeoffFile, meta: dict[str, object]) -> RunDir:
    """The run directory under ``--out``; a path that cannot hold it is a one-line error, before any launch."""
    try:
        run = RunDir(new_run_dir(out, config.name))
        run.write_run(meta)
    except RunDirError as exc:
        raise ConfigError(f"--out {out}: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot create the run directory: {exc.strerror or exc} "
                          f"({exc.filename or out})") from None
    return run


def execute(config: BakeoffFile, out: Path, until_ci: float | None = None, max_passes: int = 10,
            resume: Resume | None = None, executor: Executor | None = None,
            stop_on_verdict: bool = False) -> RunDir:
    """Plan, run and report one bakeoff (or finish ``resume``'s); engines are stopped on every way out."""
    executor = executor or LocalExecutor()
    if stop_on_verdict and until_ci is None:
        raise ConfigError("--stop-on-verdict ends the passes --until-ci adds: give --until-ci too (e.g. 20%)")
    if until_ci is not None and executor.name != "local":
        raise ConfigError("--until-ci adds passes on this machine; it cannot be combined with --executor ray")
    check_phases_config(config)
    plan = plan_run(config)
    for line in stop_leftover_engines():  # engines a killed bakeoff could not stop (its port, its memory)
        console.print(f"[bold yellow]WARNING[/bold yellow] {line}", highlight=False, soft_wrap=True)
    if resume is None:
        run = _new_run(out, config, run_metadata(plan))
    else:  # same directory, recorded orders, stored samples skipped
        run = resume.run
        resume.apply(plan)
    done = resume.done if resume else set()
    console.print(f"run directory: [bold]{run.path}[/bold]")
    live = LiveRun(config, run, console.print)  # live: and phases: (docs/live.md); a no-op without them
    # A signal the caller ignores stays ignored: `nohup bakeoff run` must survive a closed terminal.
    previous = {sig: signal.signal(sig, _signal_as_interrupt) for sig in _STOP_SIGNALS
                if signal.getsignal(sig) is not signal.SIG_IGN}
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
                on_arm_failed=lambda arm, why: progress.console.print(
                    f"[red]{'failed' if why.startswith(f'arm {arm!r}') else f'arm {arm} failed'}:[/red] {why}",
                    highlight=False, soft_wrap=True),
                on_warning=lambda msg: progress.console.print(f"[bold yellow]WARNING[/bold yellow] {msg}"),
            )
            if config.phases is not None:
                assert live.guard is not None  # open() arms the undo guard whenever phases: is set
                run_phases(plan, run, events, live.guard)
            else:
                executor.run(plan, run, events, done)
            while until_ci is not None and config.phases is None:  # adaptive passes: --until-ci
                more, why = needs_more_passes(run.samples(), len(plan.orders), until_ci, max_passes,
                                              baseline=config.baseline_arm, seed=config.workload.seed,
                                              stop_on_verdict=stop_on_verdict)
                progress.console.print(why, highlight=False)
                if not more:
                    break
                per_pass = plan.requests_total // config.workload.passes
                progress.update(task, total=(progress.tasks[0].total or 0) + per_pass)
                run_extra_pass(plan, run, events)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        live.close()
    try:
        print_tables(run.path, console)
    except (BakeoffError, OSError, ValueError) as exc:  # the samples are stored; `bakeoff report` can retry
        # not the boundary's business: the run itself succeeded, so this is a warning and the exit code stands
        console.print(f"[bold yellow]WARNING[/bold yellow] the report could not be written "
                      f"({type(exc).__name__}: {escape(str(exc))}); the samples are in {run.path}; "
                      "`bakeoff report RUN_DIR` retries", highlight=False, soft_wrap=True)
    console.print(f"run directory: [bold]{run.path}[/bold]")
    return run


def _explain_empty(run: RunDir, arm: str, samples: list[Sample]) -> str:
    """Why an arm has no valid sample, in a few words: its failure, its first error, or its flags."""
    records = run.arm_records().get(arm, [])
    if any(r.get("status") == "failed" for r in records):
        return "the arm failed (above)"
    mine = [s for s in samples if s.arm == arm]
    if not mine:
        return "no request was sent"
    errors = [s.error for s in mine if s.error]
    if errors:
        return f"{len(errors)} of {len(mine)} requests failed, e.g. {errors[0]}"
    flags = sorted({f.split(":")[0] for s in mine for f in s.flags})
    return f"none of {len(mine)} samples has a decode rate (flags: {', '.join(flags) or 'none'})"


def _measured_names(config: BakeoffFile, run: RunDir) -> list[str]:
    """The names samples are stored under: the arms, or with ``phases:`` each phase's setting."""
    record = run.read_record()
    if record.placement is not None and record.placement.arm_order:  # Ray: an arm run on several hosts is
        return list(record.placement.arm_order)                      # stored once per host
    if config.phases is None:
        return [a.name for a in config.arms]
    settings = [str(p.get("setting")) for p in record.phases]
    return list(dict.fromkeys(settings)) or [a.name for a in config.arms]


def _exit_code(run: RunDir, arms: list[str]) -> ExitCode:
    samples = run.samples()
    failed = failed_arms(run.arm_records())
    code, empty = run_outcome(samples, arms, failed)
    for arm in empty:
        console.print(f"[red]arm {arm!r} has no valid sample:[/red] {_explain_empty(run, arm, samples)}",
                      highlight=False, soft_wrap=True)
    if code is ExitCode.NOTHING_MEASURED:
        console.print("[red]nothing valid was measured[/red] (exit 3)")
    elif code is ExitCode.PARTIAL:
        midway = [a for a in failed if a not in empty]
        console.print(f"[yellow]partial result (exit 4):[/yellow] {len(empty)} of {len(arms)} arms without a valid "
                      f"sample" + (f"; failed midway: {', '.join(midway)} (`bakeoff run --resume {run.path}` "
                                   "retries the missing points)" if midway else ""), highlight=False, soft_wrap=True)
    return code


def run_command(
    file: Path | None = typer.Argument(None, help="Bakeoff YAML file (optional with --resume)"),
    out: Path = typer.Option(Path("runs"), "--out", help="Directory that receives the run directory"),
    until_ci: str | None = typer.Option(None, "--until-ci", help="Add passes until every arm's 95 % CI half-width "
                                        "(its ratio to the baseline; one arm: its median) is at most this, e.g. 3%"),
    max_passes: int = typer.Option(10, "--max-passes", min=1, help="Most passes with --until-ci"),
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
) -> None:
    try:
        if resume is not None:
            resumed = load_resume(resume, file)
            console.print(f"resuming: {len(resumed.done)} measurement points already stored")
            for msg in resumed.warnings:
                console.print(f"[bold yellow]WARNING[/bold yellow] {msg}", highlight=False)
            config = resumed.config
            executor = executor_for(config, executor_kind, address)
            run = execute(config, out, _percent(until_ci), max_passes, resume=resumed, executor=executor,
                          stop_on_verdict=stop_on_verdict)
        else:
            if file is None:
                raise ConfigError("give a bakeoff FILE, or --resume RUN_DIR")
            run_loaded(load_bakeoff(file), out, dry_run=dry_run, until_ci=_percent(until_ci), max_passes=max_passes,
                       executor_kind=executor_kind, address=address, stop_on_verdict=stop_on_verdict)
            return
    except OSError as exc:  # a write that failed outside RunDir: the boundary reports it like one inside
        if not is_write_failure(exc):
            raise
        raise RunDirError(f"cannot write {exc.filename or 'the run directory'}: {exc.strerror or exc}") from exc
    finish(config, run, executor)


def run_loaded(config: BakeoffFile, out: Path, *, dry_run: bool = False, until_ci: float | None = None,
               max_passes: int = 10, executor_kind: str | None = None, address: str | None = None,
               stop_on_verdict: bool = False) -> None:
    """Run a loaded bakeoff (``bakeoff run FILE`` and ``bakeoff calibrate`` share this): its dry run, or the
    run, its reports and its exit code."""
    if dry_run:
        for line in dry_run_lines(config):
            typer.echo(line)
        return
    executor = executor_for(config, executor_kind, address)
    try:
        run = execute(config, out, until_ci, max_passes, executor=executor, stop_on_verdict=stop_on_verdict)
    except OSError as exc:  # a write that failed outside RunDir: the boundary reports it like one inside
        if not is_write_failure(exc):
            raise
        raise RunDirError(f"cannot write {exc.filename or 'the run directory'}: {exc.strerror or exc}") from exc
    finish(config, run, executor)


def finish(config: BakeoffFile, run: RunDir, executor: Executor) -> None:
    """The exit code of a finished run (typer.Exit unless every arm has a valid sample)."""
    code = _exit_code(run, _measured_names(config, run))
    lost = getattr(executor, "failed_hosts", {})
    if lost and code is ExitCode.OK:  # every arm has samples, but a host's block stopped short
        console.print(f"[yellow]partial result (exit 4):[/yellow] the block of {', '.join(sorted(lost))} stopped "
                      f"before its end; `bakeoff run --resume {run.path}` measures the rest",
                      highlight=False, soft_wrap=True)
        code = ExitCode.PARTIAL
    if code is not ExitCode.OK:
        raise typer.Exit(code)


run_command.__doc__ = f"""Run every arm of a bakeoff file and print the comparison table.

{EXIT_CODES_HELP}
"""
