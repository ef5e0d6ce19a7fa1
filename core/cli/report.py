"""``bakeoff report RUN_DIR``: tables from a run directory's samples."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from ..store import RunDir, read_samples
from ..summary import community_rows, summarize

console = Console()


def print_tables(run_path: Path, out: Console) -> None:
    run = RunDir(run_path)
    meta = run.read_run()
    samples = read_samples(run_path)
    arm_order = [a["name"] for a in meta.get("config", {}).get("arms", [])]
    prompts = [p["name"] for p in meta.get("prompts", [])] or sorted({s.prompt for s in samples})
    summaries = summarize(samples, arm_order)
    header, rows = community_rows(summaries, prompts)
    table = Table(title=f"decode tok/s (median per prompt) — {meta.get('config', {}).get('name', run_path.name)}")
    for col in header:
        table.add_column(col, justify="left" if col == "arm" else "right")
    for row in rows:
        table.add_row(*row)
    out.print(table)
    audit = Table(title="token accounting")
    for col in ("arm", "n", "errors", "flagged", "server decode (median)", "event-counting client (median)",
                "max tokens/event", "TTFT s", "prefill tok/s"):
        audit.add_column(col, justify="right")
    for s in summaries:
        audit.add_row(s.arm, str(s.n), str(s.errors), str(s.flagged), _f(s.server_median), _f(s.event_count_median),
                      str(s.max_tokens_per_event or "–"), _f(s.ttft_median, 3), _f(s.prefill_median))
    out.print(audit)
    for name, records in meta.get("arm_records", {}).items():
        for rec in records:
            if rec.get("status") == "failed":
                out.print(f"[red]arm {name} failed (pass {rec.get('pass', 0) + 1}):[/red] {rec.get('error')}")


def _f(v: float | None, digits: int = 1) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def report_command(run_dir: Path = typer.Argument(help="A run directory made by `bakeoff run`")) -> None:
    """Print the tables of a finished (or interrupted) run."""
    if not (run_dir / "samples.jsonl").exists() and not (run_dir / "run.json").exists():
        console.print(f"[red]error:[/red] {run_dir} is not a bakeoff run directory")
        raise typer.Exit(2)
    print_tables(run_dir, console)
