"""Progress of a run: a live bar on a terminal, plain lines in a log, both with the decode rate and an ETA.

Piped or under ``nohup`` a live bar is drawn once, at the end, so a long run looked dead until it finished.
Off a terminal, :class:`PlainProgress` prints one line per event instead: an arm starting, measuring, and each
request as it completes (``[0:01:23] ngram: request 7 of 18, 14.2 tok/s, about 0:00:41 left``). Both offer the
same calls, so the run loop does not care which it got.

The counts are the run's: requests done of all it plans (adaptive passes add theirs as they are added). The rate
is the arm's live decode rate, the median of its last :data:`RATE_WINDOW` requests that have one. The ETA is
the requests still planned at the pace this run has kept since it started (or was resumed), engine starts
included, so it is rough while the first arm runs and settles as arms take turns; it says nothing until
:data:`ETA_AFTER` requests are done.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

__all__ = ["ETA_AFTER", "RATE_WINDOW", "Pace", "PlainProgress", "run_progress", "warning_printer"]

RATE_WINDOW = 5  # requests per arm the live decode rate is the median of
ETA_AFTER = 2  # requests done before an ETA is said


def clock_text(seconds: float) -> str:
    s = max(0, round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class Pace:
    """Each arm's recent decode rate, and the run's pace for an ETA."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._started: float | None = None
        self._done = 0  # requests done since the start (a resumed run's earlier ones are not this pace)
        self._rates: dict[str, deque[float]] = {}

    def start(self) -> None:
        self._started = self._clock()
        self._done = 0

    def sample(self, arm: str, decode_tps: float | None) -> None:
        if self._started is None:
            self.start()
        self._done += 1
        if decode_tps is not None and decode_tps > 0:
            self._rates.setdefault(arm, deque(maxlen=RATE_WINDOW)).append(decode_tps)

    def rate(self, arm: str) -> str:
        """``14.2 tok/s``: the arm's live decode rate, or '' before it has one."""
        recent = self._rates.get(arm)
        return f"{statistics.median(recent):.1f} tok/s" if recent else ""

    def eta(self, completed: float, total: float | None) -> str:
        """``about 0:02:10 left``, or '' while too few requests are done to say."""
        if self._started is None or self._done < ETA_AFTER or not total:
            return ""
        left = max(0.0, total - completed)
        per_request = (self._clock() - self._started) / self._done
        return f"about {clock_text(left * per_request)} left"


class PlainProgress(Progress):
    """rich's Progress with the live display off, printing a plain line for each change instead."""

    def __init__(self, console: Console, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(console=console, disable=True)
        self._clock = clock
        self._started = clock()
        self._said: str | None = None

    def _line(self, text: str) -> None:
        self.console.print(f"[{clock_text(self._clock() - self._started)}] {text}", markup=False, highlight=False)

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
        said = [f"{arm}: request {int(task.completed)}{total}"]
        said += [text for key in ("rate", "eta") if (text := task.fields.get(key))]
        self._line(", ".join(said))


def sample_done(progress: Progress, task: TaskID, pace: Pace, arm: str, decode_tps: float | None) -> None:
    """One request done: the arm's rate and the ETA updated, then the count advanced (a plain line said)."""
    pace.sample(arm, decode_tps)
    current = progress.tasks[0] if progress.tasks else None
    completed = (current.completed + 1) if current is not None else 0
    progress.update(task, rate=pace.rate(arm), eta=pace.eta(completed, current.total if current else None))
    progress.advance(task)


def run_progress(console: Console) -> Progress:
    """The progress display for a run on ``console``: a bar on a terminal, plain lines otherwise. Its tasks
    carry the fields ``rate`` and ``eta`` (give them, empty, to ``add_task``)."""
    if console.is_terminal:
        return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TextColumn("{task.fields[eta]}"),
                        console=console, transient=False)
    return PlainProgress(console)


def warning_printer(console: Console) -> Callable[[str], None]:
    """Print a run's warnings, each distinct one once: an engine start says the same thing in every pass (a
    server that reports no slots, a refused depth), which the run's reader needs only the first time."""
    said: set[str] = set()

    def warn(msg: str) -> None:
        if msg not in said:
            said.add(msg)
            console.print(f"[bold yellow]WARNING[/bold yellow] {escape(msg)}", highlight=False)
    return warn
