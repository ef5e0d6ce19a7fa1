"""Progress of a run: a live bar on a terminal, plain lines in a log.

Piped or under ``nohup`` a live bar is drawn once, at the end, so a long run looked dead until it finished.
Off a terminal, :class:`PlainProgress` prints one line per event instead: an arm starting, measuring, and each
request as it completes (``[0:01:23] ngram: request 7 of 18``). Both offer the same calls, so the run loop does not
care which it got.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

__all__ = ["PlainProgress", "run_progress"]


class PlainProgress(Progress):
    """rich's Progress with the live display off, printing a plain line for each change instead."""

    def __init__(self, console: Console) -> None:
        super().__init__(console=console, disable=True)
        self._started = time.monotonic()
        self._said: str | None = None

    def _line(self, text: str) -> None:
        elapsed = int(time.monotonic() - self._started)
        stamp = f"{elapsed // 3600}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d}"
        self.console.print(f"[{stamp}] {text}", markup=False, highlight=False)

    def update(self, task_id: TaskID, **kwargs: Any) -> None:
        super().update(task_id, **kwargs)
        description = kwargs.get("description")
        if description and description != self._said:
            self._said = description
            self._line(description)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        task = self._tasks[task_id]
        arm = (self._said or task.description).split(" (")[0].split(":")[0]
        total = f" of {int(task.total)}" if task.total else ""
        self._line(f"{arm}: request {int(task.completed)}{total}")


def run_progress(console: Console) -> Progress:
    """The progress display for a run on ``console``: a bar on a terminal, plain lines otherwise."""
    if console.is_terminal:
        return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=console, transient=False)
    return PlainProgress(console)
