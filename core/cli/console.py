"""The consoles of the command line: output that outlives its reader (``bakeoff run … | head``).

rich's default answer to a broken pipe is ``SystemExit(1)`` at the next print, which in the middle of a run
abandons the arms still to measure, writes no report and says nothing (FAULTS-2 R8). Here the console goes
quiet instead (stdout pointed at /dev/null, so no later print or the interpreter's final flush fails) and the
command carries on; its exit code is what it measured. No line ends in spaces.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.segment import Segment

__all__ = ["QuietOnBrokenPipe", "make_console"]


# spaces before a line's end, and any style codes after them: rich pads every cell of a table or grid to its
# column's width, so a wrapped warning or an 80-column line would carry invisible spaces into what people paste
_TRAILING = re.compile(r" +((?:\x1b\[[0-9;]*m)*)(?=\n)")


class QuietOnBrokenPipe(Console):
    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return _TRAILING.sub(r"\1", super()._render_buffer(buffer))

    def on_broken_pipe(self) -> None:
        self.quiet = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)


def make_console(**kwargs: Any) -> Console:
    return QuietOnBrokenPipe(**kwargs)
