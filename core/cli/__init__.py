"""Layer 10, cli: the ``bakeoff`` command line, a thin typer app with one module per command."""

from __future__ import annotations

import os
import sys

import typer

# Tables piped to a file or another program must not wrap at 80 columns: people paste them.
# Rich reads COLUMNS when each module's Console is created, so this comes before those imports.
# Some launchers export COLUMNS=80 to children, so a pipe gets BAKEOFF_WIDTH (default 200) instead.
if not sys.stdout.isatty():
    os.environ["COLUMNS"] = os.environ.get("BAKEOFF_WIDTH", "200")

from . import (
    bundle,
    calibrate,
    compare,
    demo,
    engines,
    export,
    gate,
    gpu,
    merge,
    promote,
    report,
    run,
    runs,
    schema,
    selftest,
)
from .boundary import guard_commands

__all__ = ["app", "main"]

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Head-to-head speed of LLM engines with speculative decoding, from true token counts.")
app.command("run")(run.run_command)
app.command("calibrate")(calibrate.calibrate_command)
app.command("demo")(demo.demo_command)
app.command("schema")(schema.schema_command)
app.command("report")(report.report_command)
app.command("runs")(runs.runs_command)
app.command("compare")(compare.compare_command)
app.command("selftest")(selftest.selftest_command)
app.command("promote")(promote.promote_command)
app.command("gpu")(gpu.gpu_command)
app.command("gate")(gate.gate_command)
app.command("bundle")(bundle.bundle_command)
app.command("verify")(bundle.verify_command)
app.command("merge")(merge.merge_command)
app.command("export")(export.export_command)
app.add_typer(engines.app, name="engines")

# What still holds after Ctrl-C or a write failure, and the way on (the boundary's one line says it).
_AFTER_STOP = {
    "run": "engines stopped; samples stored so far are kept; `bakeoff run --resume RUN_DIR` finishes the run",
    "calibrate": "engines stopped; samples stored so far are kept; `bakeoff run --resume RUN_DIR` finishes the run",
    "demo": "engines stopped",
    "gate": "engines stopped; samples stored so far are kept; `bakeoff run --resume RUN_DIR` finishes the run, "
            "then run the gate again",
}
guard_commands(app, _AFTER_STOP)


def main() -> None:
    app()
