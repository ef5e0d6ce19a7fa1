"""``bakeoff tune FILE``: race the tune: section's candidates against spec-off within its budget, verify the named
setting under changing load, compile it for the engine (core/run/tune.py does the work; docs/tune.md)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from ..analysis.racing import TuneResult
from ..common.errors import BakeoffError, ConfigError
from ..config.loader import load_bakeoff
from ..config.tune import race_config, tune_arms
from ..reports import write_reports
from ..run.executor import LocalExecutor
from ..run.tune import promote_winner, run_tune
from .console import make_console
from .exit_codes import ExitCode
from .running import finish, progress_events, stop_signals_as_interrupt

__all__ = ["tune_command", "tune_lines"]

console = make_console()

TUNE_EXIT_HELP = ("Exit codes: 0 decided: the named setting is faster than spec-off, or spec-off is kept because "
                  "no candidate can be faster by more than the equivalence margin (and verified: no collapse; "
                  "promoted with --promote); 1 the named setting collapses under the verification's load "
                  "(separably slower than spec-off at some level; never promoted); 2 configuration error, nothing "
                  "ran, or --promote refused (spec-off won, undecided, unverified) or rolled back; 3 nothing valid "
                  "measured (the baseline included); 4 some arm of the race produced no valid sample; 6 "
                  "inconclusive: the budget ran out before the intervals could tell (as a gate's); 130 "
                  "interrupted.")


def tune_lines(t: TuneResult) -> list[str]:
    """What the tuner found, in a few plain lines."""
    lines = [f"tune: {t.passes} pass(es), {t.spent_s:.0f} s of {t.budget_s:.0f} s; stopped: {t.stopped}"]
    for c in t.candidates:
        ci = c.interval()
        ratio = "no paired ratio" if ci is None else f"{ci.ratio_text('x')} {c.verdict}"
        drop = f", dropped after {c.dropped_after_requests} requests vs {c.dropped_vs}" if c.status == "dropped" \
            else ""
        lines.append(f"  {c.arm}: {c.status}, {ratio} vs {t.baseline}{drop}")
    if t.decision == "no verdict":
        return [*lines, f"no setting named: {t.decision_why}"]
    w = t.winner
    lines.append(f"named: {w.get('arm')} ({w.get('chosen_by')})" + (" - spec-off: nothing to deploy"
                                                                     if w.get("spec_off") else ""))
    lines.append(f"{t.decision}: {t.decision_why}" if t.decision == "decided"
                 else f"no recommendation: inconclusive: {t.decision_why}")
    config = w.get("engine_config") or {}
    if config.get("flags"):
        lines.append(f"{config.get('engine')} flags: {' '.join(config['flags'])}")
    for name, path in (config.get("config_files") or {}).items():
        lines.append(f"{config.get('engine')} {name}: {path}")
    if sched := w.get("n_max_schedule"):
        levels = ", ".join(f"{lv['streams']}: {lv['n_max']}" for lv in sched["levels"])
        lines.append(f"n_max by stream count ({levels}): " + (f"schedule {sched['schedule']}" if sched["compiled"]
                                                              else f"no schedule: {sched.get('reason')}"))
    if w.get("winner_file"):
        lines.append(f"re-check: bakeoff run {w['winner_file']}")
    if t.undecided:
        lines.append("undecided when the budget ran out: " + ", ".join(t.undecided))
    if t.verify is not None:
        for p in t.verify.points:
            cells = ", ".join(f"{arm} {ci.estimate:.2f}x ({ci.lo:.2f}-{ci.hi:.2f})" if ci else f"{arm} -"
                              for arm, ci in p.ratios.items())
            lines.append(f"verify {p.streams} stream(s): {cells}" + ("  COLLAPSE" if p.collapse else ""))
        if (nd := t.verify.nothing_drafted) is not None:
            lines.append("nothing drafted: " + (f"{nd.ratio:.2f}x ({nd.ci_low:.2f}-{nd.ci_high:.2f}) over "
                                                f"{nd.requests} requests vs {t.baseline}" if nd.ratio is not None
                                                else f"not measured: {nd.reason}"))
    return lines


def tune_command(
    file: Path = typer.Argument(help="Bakeoff YAML file with a tune: section (its arms: the baseline first, then "
                                "any fixed candidates)"),
    out: Path = typer.Option(Path("runs"), "--out", help="Directory that receives the run directories"),
    verify: bool = typer.Option(True, "--verify/--no-verify", help="Replay the named setting, the runner-up and "
                                "spec-off at tune.verify_streams (default on)"),
    promote: bool = typer.Option(False, "--promote", help="Hand a verified winner without collapse to `bakeoff "
                                 "promote` (the file's live: section; health-gated, `bakeoff promote --revert` "
                                 "goes back)"),
) -> None:
    config = load_bakeoff(file)
    if promote and config.live is None:
        raise ConfigError(f"{file}: tune --promote switches the service named in a live: section; the file has "
                          "none (docs/live.md)")
    race = race_config(config, tune_arms(config, str(file)))  # a bad tune: section fails here, before any bar
    progress, events = progress_events()
    try:
        with stop_signals_as_interrupt():
            outcome = run_tune(config, out, source=str(file), events=events, verify=verify)
    finally:
        if progress.live.is_started:
            progress.stop()
    for run in (outcome.race, outcome.verify):
        if run is not None:
            try:
                files = write_reports(run.path)
                console.print(f"report: {files.markdown}", highlight=False)
            except (BakeoffError, OSError, ValueError) as exc:
                console.print(f"[bold yellow]WARNING[/bold yellow] no report for {run.path}: {escape(str(exc))}",
                              highlight=False)
    for line in tune_lines(outcome.result):
        console.print(escape(line), highlight=False)
    finish(race, outcome.race, LocalExecutor())  # an arm without a valid sample: exit 3 or 4
    if outcome.result.verify is not None and outcome.result.verify.collapse:
        console.print("[red]the named setting collapses under the verification's load[/red]", highlight=False)
        if promote:
            console.print("not promoted", highlight=False)
        raise typer.Exit(1)
    if outcome.result.decision == "no verdict":
        raise typer.Exit(ExitCode.NOTHING_MEASURED)
    if outcome.result.decision == "inconclusive":
        console.print("[yellow]tune: inconclusive[/yellow] (raise tune.budget_s or tune.max_passes)",
                      highlight=False)
        if promote:
            console.print("not promoted", highlight=False)
        raise typer.Exit(ExitCode.INCONCLUSIVE)
    if promote:
        promote_winner(outcome, lambda msg: console.print(escape(msg), highlight=False))


tune_command.__doc__ = f"""Race speculative settings against spec-off within a time budget, verify the winner
under changing load, and compile it for the engine.

{TUNE_EXIT_HELP}
"""
