"""Layer 10, cli: the ``bakeoff`` command line, a thin typer app with one module per command.

``main`` (the console script and ``python -m bakeoff``) imports a command's module only when that command runs,
so ``bakeoff --help`` and ``bakeoff --version`` answer at once; ``app`` (core/cli/full_app.py) is the same command
line with every command imported, for tests and documentation.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

# Output piped to a file or another program is laid out for 80 columns, or the width COLUMNS names (a table too wide
# for it prints as records: core/reports/layout.py); BAKEOFF_WIDTH overrides both, for tables pasted whole.
# Rich reads COLUMNS when each module's Console is created, so this comes before those imports.
if sys.stdout is not None and not sys.stdout.isatty():  # None: stdout closed (>&-)
    os.environ["COLUMNS"] = os.environ.get("BAKEOFF_WIDTH") or os.environ.get("COLUMNS") or "80"

# A narrow output encoding (PYTHONIOENCODING=ascii, a C locale) cannot write the tables' × ≈ ★ –: without this
# the first table after a run raises UnicodeEncodeError, and so does the warning printed about it (FAULTS-2 R8).
# What the stream cannot encode becomes '?', never an error.
for _stream in (sys.stdout, sys.stderr):
    if _stream is not None and hasattr(_stream, "reconfigure"):
        _stream.reconfigure(errors="replace")

if TYPE_CHECKING:
    from .full_app import app

__all__ = ["app", "main"]


def main() -> None:
    from .lazy import lazy_command

    try:
        lazy_command()()
    finally:
        _ignore_stop_signals_once_done()


def _ignore_stop_signals_once_done() -> None:
    """SIGTERM or SIGHUP once the command is over has nothing left to stop: the process ends with the command's own
    exit code. The interpreter's teardown after a run (numpy, matplotlib loaded) takes a few tenths of a second on
    a busy machine, and a deadline's SIGTERM there killed a finished run by the signal (143; FAULTS-3 R9). Python
    resets its own handlers before the end of teardown, but keeps an ignored signal ignored."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


def __getattr__(name: str) -> Any:
    if name == "app":
        from .full_app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
