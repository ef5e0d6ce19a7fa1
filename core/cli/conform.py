"""``bakeoff conform FILE|URL``: is this server's accounting true? A fixed battery, each check pass / fail / n/a.

FILE: every arm of a bakeoff file is launched (or attached) and tested; URL: one server that is already running,
read through the adapter ``--engine`` names (``openai`` by default: usage only; ``llamacpp`` also reads its
timings and /metrics). core/run/conform.py runs the battery through the normal protocol and
core/measure/conform.py judges it. Prints one short table per arm (80 columns) and writes the same to
``summary.json`` in the conform directory, beside the battery's run directories. docs/conform.md lists the checks.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from ..common.errors import ConfigError
from ..config.loader import load_bakeoff
from ..config.schema import Arm, BakeoffFile
from ..measure.conform import ArmConformance, ConformSummary
from ..results.store import new_run_dir
from .console import make_console
from .exit_codes import ExitCode

__all__ = ["conform_command", "conform_lines", "exit_code_of"]

console = make_console(highlight=False)
CHECK_WIDTH, RESULT_WIDTH = 28, 5


def conform_lines(arm: ArmConformance, width: int = 80) -> list[str]:
    """One arm's table as plain lines, none wider than ``width``: check, result, the engine's figures."""
    counts = {r: sum(c.result == r for c in arm.checks) for r in ("pass", "fail", "n/a")}
    head = f"{arm.arm} ({arm.engine}{', ' + arm.version if arm.version else ''}" \
           f"{', speculative' if arm.speculative else ''})"
    out = [*textwrap.wrap(head, width), f"  {counts['pass']} pass, {counts['fail']} fail, {counts['n/a']} n/a"]
    if not arm.started:
        return out + textwrap.wrap(f"not tested: {arm.error}", width, initial_indent="  ",
                                   subsequent_indent="    ")
    figures_width = width - 2 - CHECK_WIDTH - RESULT_WIDTH - 2
    out.append(f"  {'check':<{CHECK_WIDTH}}{'':1}{'ok?':<{RESULT_WIDTH}} figures")
    for c in arm.checks:
        lines = textwrap.wrap(c.figures, figures_width) or [""]
        result = c.result.upper() if c.result == "fail" else c.result
        out.append(f"  {c.title:<{CHECK_WIDTH}} {result:<{RESULT_WIDTH}} {lines[0]}".rstrip())
        pad = " " * (2 + CHECK_WIDTH + 1 + RESULT_WIDTH + 1)
        out += [pad + line for line in lines[1:]]
    if arm.error:
        out += textwrap.wrap(f"note: {arm.error}", width, initial_indent="  ", subsequent_indent="    ")
    return out


def exit_code_of(summary: ConformSummary) -> ExitCode:
    """0 when every applicable check of every arm passed; 7 when one failed or an arm could not be tested."""
    if any(a.failed or not a.started for a in summary.arms):
        return ExitCode.NONCONFORMING
    return ExitCode.OK


def print_summary(summary: ConformSummary, out: Console) -> None:
    for arm in summary.arms:
        for line in conform_lines(arm, min(out.width, 100) if out.width >= 60 else 80):
            out.print(line, markup=False)
        out.print("")


def _target(target: str, engine: str, name: str) -> tuple[BakeoffFile, str]:
    if target.startswith(("http://", "https://")):
        return BakeoffFile(name="conform", arms=[Arm(name=name, engine=engine, url=target)]), target
    path = Path(target)
    if not path.exists():
        raise ConfigError(f"{target}: no such bakeoff file (give a FILE, or a URL starting with http://)")
    return load_bakeoff(path), str(path)


def conform_command(
    target: str = typer.Argument(help="Bakeoff YAML file (its arms are launched) or the URL of a running server"),
    engine: str = typer.Option("openai", "--engine", help="With a URL: the adapter that reads the server "
                               "(llamacpp also reads timings and /metrics; openai: usage only)"),
    name: str = typer.Option("server", "--name", help="With a URL: the arm's name in the table"),
    out: Path = typer.Option(Path("runs"), "--out", help="Directory that receives the conform directory"),
    max_tokens: int = typer.Option(32, "--max-tokens", min=4, max=4096, help="Tokens per plain answer"),
    llama_bench: bool = typer.Option(False, "--llama-bench", help="llama.cpp arms: also run the same build's "
                                     "llama-bench on the same GGUF and settings (engines/llamacpp/bench.py)"),
) -> None:
    """Check a server's token, cache and acceptance counters with a fixed battery: each check pass, fail or n/a.

    Checks: include_usage honoured; usage against the tokens delivered (token ids, logprobs or the engine's
    tokenizer); streamed events against tokens; reasoning <= completion; accepted <= drafted and <= completion
    - 1; drafted <= draft steps x n_max; acceptance agreeing across the response, /metrics and the log;
    cached_tokens > 0 on a repeated prefix and equal to the engine's own cache counter; drafting under a JSON
    schema and tools. Exit 0: every applicable check passed; 7: one failed, or an arm could not be tested;
    2: the file or URL cannot be tested at all.
    """
    from ..run.conform import conform_arms

    config, source = _target(target, engine, name)
    directory = new_run_dir(out, "conform")
    directory.mkdir(parents=True, exist_ok=True)
    def log(msg: str) -> None:
        console.print(f"[dim]{escape(msg)}[/dim]")

    summary, batteries = conform_arms(config, source, directory, log, max_tokens)
    if llama_bench:
        from ..run.reference import bench_references

        summary.references = bench_references(config, [s for b in batteries.values() for s in b.samples], log)
    summary.exit_code = int(exit_code_of(summary))
    print_summary(summary, console)
    for arm, ref in summary.references.items():
        for line in textwrap.wrap(f"{arm}: {ref.line}", 80, subsequent_indent="  "):
            console.print(line, markup=False)
    (directory / "summary.json").write_text(json.dumps(summary.model_dump(mode="json"), indent=2) + "\n")
    table = "\n\n".join("\n".join(conform_lines(a)) for a in summary.arms) + "\n"
    for arm_name, ref in summary.references.items():
        table += "\n" + "\n".join(textwrap.wrap(f"{arm_name}: {ref.line}", 80,
                                                subsequent_indent="  ")) + "\n"
    (directory / "conform.txt").write_text(table)
    console.print(f"summary: {directory / 'summary.json'}", markup=False)
    if summary.exit_code:
        raise typer.Exit(summary.exit_code)
