"""Running a loaded bakeoff from the command line: progress, signals, the closing tables and the exit code.

Shared by the commands that run a bakeoff (``run``, ``calibrate``, ``demo``); the run itself is the library
call core/run/bakeoff.py ``run_bakeoff``.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import typer
from rich.markup import escape
from rich.progress import Progress

from ..analysis.stats import no_rate_reason
from ..common.errors import BakeoffError, ConfigError, RunDirError, is_write_failure
from ..config.schema import BakeoffFile
from ..reports import completeness, print_run
from ..results.record import failed_arms
from ..results.sample import Sample
from ..results.store import RunDir
from ..run.bakeoff import StopSignal, check_stopping_rule, measured_nothing, run_bakeoff
from ..run.events import RunEvents
from ..run.executor import Executor, executor_for
from ..run.live import dry_run_lines
from ..run.resume import Resume
from .boundary import name_run_dir
from .console import make_console
from .exit_codes import ExitCode, run_outcome
from .progress import Pace, run_progress, sample_done, warning_printer

__all__ = ["TABLES_HELP", "execute", "finish", "percent", "progress_events", "run_loaded",
           "stop_signals_as_interrupt"]

console = make_console()
TABLES_HELP = "Print every table (main, sweeps, acceptance, decision map, accounting, correctness, roofline) " \
              "instead of the verdict block; the report files always hold everything."


def percent(text: str | None) -> float | None:
    """'3%' or '0.03' -> 0.03."""
    if text is None:
        return None
    try:
        return float(text.strip().rstrip("%")) / (100 if text.strip().endswith("%") else 1)
    except ValueError:
        raise ConfigError(f"--until-ci {text!r}: give a percentage such as 3%") from None


# Signals that end a run like Ctrl-C does: engines stopped, samples kept. SIGHUP is a closed terminal or SSH.
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _signal_as_interrupt(signum: int, frame: FrameType | None) -> None:
    raise StopSignal(signum)


@contextmanager
def stop_signals_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP end what runs inside like Ctrl-C does (engines stopped, samples kept), then the caller's
    handlers come back; a signal the caller ignores stays ignored: `nohup bakeoff run` must survive a closed
    terminal."""
    previous = {sig: signal.signal(sig, _signal_as_interrupt) for sig in _STOP_SIGNALS
                if signal.getsignal(sig) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def progress_events() -> tuple[Progress, RunEvents]:
    """The progress bar (started once the run directory exists) and the run's events drawn on it."""
    # The bar appears once the run directory exists: a file refused before that is one error line, nothing more.
    progress = run_progress(console)  # a bar on a terminal, plain lines in a log
    task = progress.add_task("starting", total=0, rate="", eta="")
    pace = Pace()  # the arm's live decode rate and the ETA

    def started(run: RunDir, total: int, done: int) -> None:
        progress.console.print(f"run directory: [bold]{run.path}[/bold]")
        progress.update(task, total=total, completed=done)
        pace.start()
        progress.start()

    warn = warning_printer(progress.console)
    events = RunEvents(
        on_run_start=started,
        on_note=lambda msg: progress.console.print(msg, highlight=False),
        on_pass_added=lambda n: progress.update(task, total=(progress.tasks[0].total or 0) + n),
        on_arm_start=lambda arm, p: progress.update(task, description=f"{arm} (pass {p + 1}): starting"),
        on_arm_ready=lambda arm, eff, boot: progress.update(
            task, description=f"{arm}: measuring" + (f" (boot {boot:.1f} s)" if boot else "")),
        on_sample=lambda sample: sample_done(progress, task, pace, sample.arm, sample.decode_tps),
        on_arm_failed=lambda arm, why: progress.console.print(
            f"[red]{'failed' if why.startswith(f'arm {arm!r}') else f'arm {arm} failed'}:[/red] {why}",
            highlight=False),
        on_warning=warn,
    )
    return progress, events


def _run_dir_made(events: RunEvents) -> Callable[[], Path | None]:
    """The run directory, once the run has made (or reopened) it: chained onto ``events.on_run_start``, since
    run_bakeoff returns it only when the run ends well."""
    made: list[Path] = []
    announce = events.on_run_start

    def started(run: RunDir, total: int, done: int) -> None:
        made.append(run.path)
        announce(run, total, done)

    events.on_run_start = started
    return lambda: made[-1] if made else None


def execute(config: BakeoffFile, out: Path, until_ci: float | None = None, max_passes: int = 10,
            resume: Resume | None = None, executor: Executor | None = None,
            stop_on_verdict: bool = False, tables: bool = False,
            more_passes: Callable[[RunDir, int], tuple[bool, str]] | None = None,
            exit_step: Callable[[RunDir], None] | None = None, llama_bench: bool = False) -> RunDir:
    """Run one bakeoff (core/run/bakeoff.py) with a progress bar, print its tables and write its reports, then
    take the command's ``exit_step`` (its exit code, which reads every sample again: about a second on a big run);
    a stop signal anywhere in that, up to the exit, is an interruption like Ctrl-C (exit 130)."""
    with stop_signals_as_interrupt():
        progress, events = progress_events()
        made = _run_dir_made(events)
        try:
            run = run_bakeoff(config, out, until_ci=until_ci, max_passes=max_passes, resume=resume,
                              executor=executor, stop_on_verdict=stop_on_verdict, events=events,
                              more_passes=more_passes)
        except (KeyboardInterrupt, RunDirError) as exc:  # the boundary's line names the directory --resume takes
            name_run_dir(exc, made())
            raise
        finally:
            if progress.live.is_started:
                progress.stop()
        if llama_bench:
            _references(config, run)
        try:
            if not measured_nothing(run):  # nothing to compare: the exit step says so, without a report
                print_run(run.path, console, tables=tables)
        except (BakeoffError, OSError, ValueError) as exc:  # the samples are stored; `bakeoff report` can retry
            # not the boundary's business: the run itself succeeded, so this is a warning and the exit code stands
            console.print(f"[bold yellow]WARNING[/bold yellow] the report could not be written "
                          f"({type(exc).__name__}: {escape(str(exc))}); the samples are in {run.path}; "
                          f"`bakeoff report {run.path}` retries", highlight=False)
        console.print(f"run directory: [bold]{run.path}[/bold]")
        if exit_step is not None:
            try:
                exit_step(run)
            except KeyboardInterrupt as exc:
                raise name_run_dir(exc, run.path) from None
        return run


def _references(config: BakeoffFile, run: RunDir) -> None:
    """The engine's own benchmark beside each arm, once its engines are stopped (core/run/reference.py)."""
    from ..run.reference import write_run_references

    refs = write_run_references(config, run, lambda msg: console.print(f"[dim]{escape(msg)}[/dim]",
                                                                       highlight=False, soft_wrap=True))
    if not refs:
        console.print("[bold yellow]WARNING[/bold yellow] --llama-bench: no arm's engine has its own benchmark "
                      "(llama.cpp arms only)", highlight=False)


def _explain_empty(run: RunDir, arm: str, samples: list[Sample]) -> str:
    """Why an arm has no valid sample, in a few words: its failure, its first error, or its flags."""
    records = run.arm_records().get(arm, [])
    if any(r.failed for r in records):
        return "the arm failed (above)"
    mine = [s for s in samples if s.arm == arm]
    if not mine:
        return "no request was sent"
    errors = [s.error for s in mine if s.error]
    if errors:
        return f"{len(errors)} of {len(mine)} requests failed, e.g. {errors[0]}"
    reasons = Counter(why for s in mine if (why := no_rate_reason(s)) is not None)
    if reasons:  # a rate the statistics leave out (a count-witness mismatch) or none at all
        shown = ", ".join(f"{why} ×{n}" for why, n in reasons.most_common())
        return f"none of {len(mine)} samples enters the statistics ({shown})"
    flags = sorted({f.split(":")[0] for s in mine for f in s.flags})
    return f"none of {len(mine)} samples has a decode rate (flags: {', '.join(flags) or 'none'})"


def _measured_names(config: BakeoffFile, run: RunDir) -> list[str]:
    """The names samples are stored under: the arms, or with ``phases:`` each phase's setting."""
    record = run.read_record()
    if record.placement is not None and record.placement.arm_order:  # Ray: an arm run on several hosts is
        return list(record.placement.arm_order)                      # stored once per host
    if config.phases is None:
        return [a.name for a in config.arms]
    settings = [p.setting for p in record.phases]
    return list(dict.fromkeys(settings)) or [a.name for a in config.arms]


def _short_of_plan(run: RunDir, samples: list[Sample]) -> str | None:
    """The incomplete-run warning of a run that returned before measuring its plan (None: it measured it)."""
    progress = completeness.run_progress(run.read_record(), [(s.arm, s.pass_index) for s in samples],
                                         run.arm_records(), run.path)
    return progress.warning


def _exit_code(run: RunDir, arms: list[str]) -> ExitCode:
    samples = run.samples()
    failed = failed_arms(run.arm_records())
    code, empty = run_outcome(samples, arms, failed)
    if code is ExitCode.OK and (short := _short_of_plan(run, samples)):  # valid samples, but not all planned
        console.print(f"[yellow]partial result (exit 4):[/yellow] {escape(short)}", highlight=False)
        return ExitCode.PARTIAL
    for arm in empty:
        console.print(f"[red]arm {arm!r} has no valid sample:[/red] {_explain_empty(run, arm, samples)}",
                      highlight=False)
    if code is ExitCode.NOTHING_MEASURED:
        console.print("[red]nothing valid was measured[/red] (exit 3); no report written", highlight=False)
    elif code is ExitCode.PARTIAL:
        midway = [a for a in failed if a not in empty]
        console.print(f"[yellow]partial result (exit 4):[/yellow] {len(empty)} of {len(arms)} arms without a valid "
                      f"sample" + (f"; failed midway: {', '.join(midway)} (`bakeoff run --resume {run.path}` "
                                   "retries the missing points)" if midway else ""), highlight=False)
    return code


def run_loaded(config: BakeoffFile, out: Path, *, dry_run: bool = False, until_ci: float | None = None,
               max_passes: int = 10, executor_kind: str | None = None, address: str | None = None,
               stop_on_verdict: bool = False, resume: Resume | None = None, tables: bool = False,
               llama_bench: bool = False) -> None:
    """Run a loaded bakeoff (or finish ``resume``'s): its dry run (nothing launched, also with a resume), or
    the run, its reports and its exit code."""
    check_stopping_rule(until_ci, max_passes, stop_on_verdict)  # a dry run too: the same file and flags run later
    if dry_run:
        for line in dry_run_lines(config):
            typer.echo(line)
        return
    executor = executor_for(config, executor_kind, address)
    try:
        execute(config, out, until_ci, max_passes, resume=resume, executor=executor, stop_on_verdict=stop_on_verdict,
                tables=tables, exit_step=lambda run: finish(config, run, executor), llama_bench=llama_bench)
    except OSError as exc:  # a write that failed outside RunDir: the boundary reports it like one inside
        if not is_write_failure(exc):
            raise
        raise RunDirError(f"cannot write {exc.filename or 'the run directory'}: {exc.strerror or exc}") from exc


def finish(config: BakeoffFile, run: RunDir, executor: Executor) -> None:
    """The exit code of a finished run (typer.Exit unless every arm has a valid sample)."""
    code = _exit_code(run, _measured_names(config, run))
    lost = getattr(executor, "failed_hosts", {})
    if lost and code is ExitCode.OK:  # every arm has samples, but a host's block stopped short
        console.print(f"[yellow]partial result (exit 4):[/yellow] the block of {', '.join(sorted(lost))} stopped "
                      f"before its end; `bakeoff run --resume {run.path}` measures the rest",
                      highlight=False)
        code = ExitCode.PARTIAL
    if code is not ExitCode.OK:
        raise typer.Exit(code)
