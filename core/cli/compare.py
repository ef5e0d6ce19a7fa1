"""``bakeoff compare RUN_A RUN_B``: did anything change between two runs made at different times?"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from ..common.errors import ConfigError
from ..reports.compare import compare_runs, comparison_table, render_comparison_markdown
from ..reports.layout import print_rows
from .console import make_console

__all__ = ["compare_command"]

console = make_console()


def _mapping(pairs: list[str]) -> dict[str, str]:
    out = {}
    for p in pairs:
        a, sep, b = p.partition("=")
        if not sep or not a or not b:
            raise ConfigError(f"--pair {p!r}: write it as A_ARM=B_ARM")
        out[a] = b
    return out


def compare_command(
    run_a: Path = typer.Argument(help="The earlier run directory (A)"),
    run_b: Path = typer.Argument(help="The later run directory (B)"),
    pair: list[str] = typer.Option([], "--pair", help="Match arm A_ARM of run A with B_ARM of run B (A_ARM=B_ARM); "
                                                      "repeatable. Arms with equal names match by default."),
    markdown: bool = typer.Option(False, "--markdown", help="Print markdown instead of the table."),
    json_out: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
) -> None:
    """Compare each arm's decode rate between two runs (ratio B/A with a 95 % interval and a verdict)."""
    for d in (run_a, run_b):
        if not (d / "samples.jsonl").exists():
            raise ConfigError(f"{d} is not a bakeoff run directory (no samples.jsonl)")
    result = compare_runs(run_a, run_b, _mapping(pair), seed=seed)
    if json_out:
        typer.echo(result.model_dump_json(indent=2))
        return
    if markdown:
        typer.echo(render_comparison_markdown(result))
        return
    header, rows = comparison_table(result)
    print_rows(console, escape(f"decode tok/s: {run_b.name} (B) vs {run_a.name} (A)"), header,
               [[escape(cell) for cell in row] for row in rows],
               right=[col not in ("arm", "verdict") for col in header])
    console.print(f"[dim]prompts both runs measured: {', '.join(result.prompts)}; runs are resampled independently "
                  "(passes, then requests).[/dim]", highlight=False)
    for diff in result.differences:
        console.print(f"[yellow]differs:[/yellow] {diff}", highlight=False)
    for line in result.comparable:
        console.print(line, highlight=False, soft_wrap=True)
    if result.unmatched_a or result.unmatched_b:
        console.print(f"not matched: A {result.unmatched_a or '–'}, B {result.unmatched_b or '–'} (use --pair)")
