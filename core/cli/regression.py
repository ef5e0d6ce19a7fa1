"""``bakeoff gate FILE``: a regression gate between two engine builds, for CI (docs/sharing.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import typer
from rich.markup import escape

from ..analysis.regression import OVERALL, GateVerdict, judge_gate
from ..analysis.stats import Comparison
from ..common.errors import ConfigError
from ..config.loader import load_bakeoff
from ..config.schema import BakeoffFile, GateSpec, parse_share
from ..reports import report_dir, summarize_run
from ..reports.model import RunSummary
from ..results.store import RunDir
from ..run.executor import LocalExecutor
from ..run.regression import gate_config
from .console import make_console
from .exit_codes import ExitCode
from .running import execute, finish

__all__ = ["gate_command", "gate_points", "GATE_EXIT_HELP"]

console = make_console()

GATE_EXIT_HELP = ("Exit codes: 0 a slowdown beyond --max-slowdown is excluded (the interval's lower bound is at "
                  "or above 1 - it); 1 such a slowdown is shown (the upper bound is below; or the candidate fails a "
                  "quality gate the reference passes); 2 configuration error, nothing ran; 3 no verdict (nothing "
                  "valid measured, or a point without paired requests); 4 an arm failed or has no valid sample; "
                  "6 inconclusive: after gate.max_passes the interval still straddles the limit, or a point has too "
                  "few paired requests for a verdict; 130 interrupted.")


def gate_points(summary: RunSummary, candidate: str) -> list[tuple[str, Comparison | None]]:
    """Where the gate looks: each depth and stream count the run swept, else the run as a whole."""
    points: list[tuple[str, Comparison | None]] = []
    for table, unit in ((summary.depth, "depth"), (summary.concurrency, "streams")):
        for row in table.rows if table else []:
            if row.arm == candidate:
                value = next(iter(row.point.values()), None)
                points.append((f"depth {value}" if unit == "depth" else f"{value} streams", row.vs_baseline))
    return points or [(OVERALL, summary.comparison(candidate))]


def _broken_gates(summary: RunSummary, reference: str, candidate: str) -> list[str]:
    ref, cand = summary.arm(reference), summary.arm(candidate)
    if ref is None or cand is None:
        return []
    return [g for g in cand.failed_gates if g not in ref.failed_gates]


def _busy(summary: RunSummary, reference: str, candidate: str) -> str | None:
    """'11 of 12 samples' of the two arms during which the machine was busy; None when it never was."""
    arms = [a for a in (summary.arm(reference), summary.arm(candidate)) if a is not None]
    busy, total = sum(a.busy for a in arms), sum(a.n + a.errors for a in arms)
    return f"{busy} of {total} samples" if busy else None


def _verdict(summary: RunSummary, reference: str, candidate: str, max_slowdown: float,
             passes: int | None = None) -> GateVerdict:
    return judge_gate(reference, candidate, max_slowdown, gate_points(summary, candidate),
                      _broken_gates(summary, reference, candidate), passes=passes,
                      busy=_busy(summary, reference, candidate))


def until_decided(gate: GateSpec) -> Callable[[RunDir, int], tuple[bool, str]]:
    """The gate's stopping rule after the planned passes: another interleaved pass while the verdict is
    inconclusive, up to ``gate.max_passes`` (a decided gate, either way, stops at once)."""
    def more(run: RunDir, passes: int) -> tuple[bool, str]:
        v = _verdict(summarize_run(run.path), gate.reference, gate.candidate, gate.max_slowdown, passes)
        if v.outcome != "inconclusive":
            return False, f"gate: {v.outcome} after {passes} pass(es)"
        if passes >= gate.max_passes:
            return False, f"gate: still inconclusive after {passes} passes (gate.max_passes)"
        return True, f"gate: inconclusive after {passes} pass(es); adding one (at most {gate.max_passes})"
    return more


def gate_command(
    file: Path = typer.Argument(help="Bakeoff YAML file with a gate: section (two arms, two builds)"),
    out: Path = typer.Option(Path("runs"), "--out", help="Directory that receives the run directory"),
    max_slowdown: str | None = typer.Option(None, "--max-slowdown", help="Fail when the candidate is slower than "
                                            "this with confidence (the interval's upper bound below 1 - it), e.g. "
                                            "3%; default: the file's gate.max_slowdown (3 %)"),
) -> None:
    try:
        share = parse_share(max_slowdown, "--max-slowdown") if max_slowdown is not None else None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    config, gate, notes = gate_config(load_bakeoff(file), share)
    for note in notes:
        console.print(escape(note), highlight=False)
    executor = LocalExecutor()
    execute(config, out, executor=executor, more_passes=until_decided(gate),
            exit_step=lambda run: _judge(config, run, executor, gate))


def _judge(config: BakeoffFile, run: RunDir, executor: LocalExecutor, gate: GateSpec) -> None:
    """The gate's exit step: the run's own exit code when an arm has no valid sample, else the verdict's (written
    to gate.json beside the report)."""
    try:
        finish(config, run, executor)  # an arm without a valid sample: exit 3 or 4, no verdict
    except typer.Exit as stop:
        console.print(f"[red]gate: no verdict[/red]: the run is incomplete (exit {stop.exit_code})", highlight=False)
        raise
    verdict = _verdict(summarize_run(run.path), gate.reference, gate.candidate, gate.max_slowdown,
                       len(run.read_record().orders))
    target = report_dir(run.path)
    target.mkdir(parents=True, exist_ok=True)
    (target / "gate.json").write_text(verdict.model_dump_json(indent=2) + "\n")
    style = {"passed": "green", "failed": "red", "inconclusive": "yellow", "no verdict": "yellow"}[verdict.outcome]
    console.print(f"[{style}]{escape(verdict.line)}[/{style}]", highlight=False)
    if verdict.outcome == "failed":
        raise typer.Exit(1)
    if verdict.outcome == "no verdict":
        raise typer.Exit(ExitCode.NOTHING_MEASURED)
    if verdict.outcome == "inconclusive":
        raise typer.Exit(ExitCode.INCONCLUSIVE)


gate_command.__doc__ = f"""Run a regression gate: the gate: section's reference and candidate builds, interleaved and
paired on this machine, and judge whether the candidate is slower than allowed.

{GATE_EXIT_HELP}
"""
