"""``bakeoff promote RUN_DIR ARM`` and ``bakeoff promote --revert``: the winner on the live endpoint, and back."""

from __future__ import annotations

from pathlib import Path

import typer

from ..run.promote import promote, revert
from .console import make_console

__all__ = ["promote_command"]

console = make_console()


def promote_command(
    run_dir: Path | None = typer.Argument(None, help="The run directory the arm was measured in"),
    arm: str | None = typer.Argument(None, help="The arm to put on the live endpoint"),
    port: int | None = typer.Option(None, "--port", min=1, max=65535, help="Port to serve on (default: live.port)"),
    served_name: str | None = typer.Option(None, "--served-name", help="Model name clients ask for "
                                           "(default: live.model)"),
    gate_requests: int = typer.Option(3, "--gate-requests", min=1, help="Smoke requests the new server must "
                                      "answer on the live port"),
    gate_timeout: float = typer.Option(300.0, "--gate-timeout", min=1, help="Seconds the new server has to be "
                                       "healthy on the live port"),
    dry_run: bool = typer.Option(False, "--dry-run", help="Write the launch definition and print every command; "
                                 "run none"),
    undo: bool = typer.Option(False, "--revert", help="Stop the promoted server and restore what was live before"),
) -> None:
    """Put an arm of a run on the live endpoint behind a health gate; --revert goes back.

    Writes the arm's launch definition with the live port and model name, then switches the live service to it
    behind a health gate, rolling back on failure."""
    say = lambda msg: console.print(msg, highlight=False, soft_wrap=True)  # noqa: E731
    if undo:
        revert(port, say)
        return
    if run_dir is None or arm is None:
        raise typer.BadParameter("give RUN_DIR and ARM (or --revert)")
    promote(run_dir, arm, port=port, served_name=served_name, gate_requests=gate_requests,
            gate_timeout_s=gate_timeout, dry_run=dry_run, say=say)
