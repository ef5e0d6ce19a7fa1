"""``bakeoff`` command line: a thin typer app, one module per command."""

from __future__ import annotations

import typer

from . import demo, engines, report, run, schema

__all__ = ["app", "main"]

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Head-to-head speed of LLM engines with speculative decoding, from true token counts.")
app.command("run")(run.run_command)
app.command("demo")(demo.demo_command)
app.command("schema")(schema.schema_command)
app.command("report")(report.report_command)
app.add_typer(engines.app, name="engines")


def main() -> None:
    app()
