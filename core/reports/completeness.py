"""Planned against measured: did a run do what it planned, and where and why did it stop if not.

Read from what the run already holds, never a second bookkeeping: run.json ``orders`` are the passes planned
(adaptive ones included), the workload gives the samples one arm writes per pass (the count the progress bar
uses), the stored samples carry their pass, the arm records say which starts ended well, and run.json
``stopped`` says why a run was cut short where bakeoff could still write it (core/run/bakeoff.py).
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, Field

from ..common.errors import BakeoffError
from ..measure.points import samples_expected
from ..results.record import ArmAttempt, RunRecord, StopRecord
from ..run.plan import effective_workload

__all__ = ["ArmProgress", "RunProgress", "passes_design", "passes_said", "run_progress"]


class ArmProgress(BaseModel):
    arm: str
    passes_planned: int
    passes_complete: int
    samples_planned: int | None = Field(None, description="None: the plan's count cannot be read (e.g. a "
                                        "sessions file no longer there).")
    samples_measured: int = Field(0, description="Samples stored in the planned passes (failed requests too).")


class RunProgress(BaseModel):
    """Per arm and in all: passes and samples planned against those measured, and where the run stopped."""

    complete: bool
    passes_planned: int = 0
    passes_complete: int = Field(0, description="Planned passes in which every arm measured every point.")
    samples_planned: int | None = None
    samples_measured: int = 0
    arms: list[ArmProgress] = Field(default_factory=list)
    stopped_at: str | None = Field(None, description="The first pass and arm short of its plan (incomplete only).")
    stopped_why: str | None = Field(None, description="Why, as far as the run can tell (incomplete only).")
    resume: str | None = Field(None, description="The command that measures the rest (incomplete only).")

    @property
    def line(self) -> str:
        """``1 of 2 passes complete (45 of 72 samples)``."""
        planned = "?" if self.samples_planned is None else str(self.samples_planned)
        return (f"{self.passes_complete} of {self.passes_planned} passes complete "
                f"({self.samples_measured} of {planned} samples)")

    @property
    def warning(self) -> str | None:
        """The line that leads every report of an incomplete run (the same words in each)."""
        if self.complete:
            return None
        where = f"; stopped {self.stopped_at}" if self.stopped_at else ""
        return f"INCOMPLETE RUN: {self.line}{where}: {self.stopped_why}; `{self.resume}` measures the rest"


def passes_said(passes: int, progress: RunProgress | None) -> str:
    """``2 pass(es)``; for an incomplete run what it did instead of what it planned."""
    return progress.line if progress is not None and not progress.complete else f"{passes} pass(es)"


def passes_design(passes: int, progress: RunProgress | None) -> str:
    """The head of a design line, before ``3 rep(s) × ...``: ``2 pass(es) ×``, or ``1 of 2 passes complete
    (45 of 72 samples), each``."""
    said = passes_said(passes, progress)
    return f"{said}, each" if progress is not None and not progress.complete else f"{said} ×"


def _why(record: RunRecord, attempts: dict[str, list[ArmAttempt]]) -> str:
    stop = record.stopped
    if stop is not None:
        return _stop_words(stop)
    failed = [(arm, a) for arm, recs in attempts.items() for a in recs if a.failed]
    if record.finished_at is not None and failed:
        arm, a = failed[-1]
        return f"arm {arm} failed in pass {a.pass_index + 1}"
    return "the run record does not say why (bakeoff was killed, or the run is still going)"


def _stop_words(stop: StopRecord) -> str:
    if stop.why == "signal":
        return "interrupted (Ctrl-C)" if stop.detail == "Ctrl-C" else f"stopped by {stop.detail}"
    return f"stopped by an error: {stop.detail}"


def _per_pass(record: RunRecord, arm: str) -> int | None:
    """Samples the arm writes per pass, as planned (None: the workload cannot say)."""
    config = record.config
    by_name = {a.name: a for a in config.arms} if config else {}
    if config is None or arm not in by_name:
        return None
    w = effective_workload(config.workload, by_name[arm])
    try:
        return samples_expected(w, len(record.prompts), len(w.modes))
    except (OSError, ValueError, BakeoffError):
        return None


def _pass_done(count: int, per_pass: int | None, attempts: list[ArmAttempt], pass_index: int) -> bool:
    """Every point stored, or the arm's latest start at that pass ended well (it may have refused points)."""
    latest = next((a for a in reversed(attempts) if a.pass_index == pass_index), None)
    return (per_pass is not None and count >= per_pass) or (latest is not None and not latest.failed)


def run_progress(record: RunRecord, samples: Iterable[tuple[str, int]], attempts: dict[str, list[ArmAttempt]],
                 path: Path | None = None) -> RunProgress:
    """Planned against measured for one run.

    :param samples: (arm, pass_index) of every stored sample.
    :param attempts: per arm, its starts (arm_records.jsonl).
    """
    counts = Counter(samples)
    if record.config is None or record.config.phases is not None or not record.orders:
        # no passes to hold it against (a phase run, which records no finished_at; a record without a config):
        # incomplete only when it says it stopped
        return _finish(RunProgress(complete=record.stopped is None), record, attempts, path)
    names = list(record.placement.arm_order) if record.placement and record.placement.arm_order \
        else record.arm_names
    progress = RunProgress(complete=True, passes_planned=len(record.orders))
    short: dict[int, set[str]] = {}
    for name in names:
        base = name if name in record.arm_names else name.rsplit("@", 1)[0]  # Ray stores arm@host
        passes = [i for i, order in enumerate(record.orders) if base in order]
        per_pass = _per_pass(record, base)
        done = [p for p in passes if _pass_done(counts[(name, p)], per_pass, attempts.get(name, []), p)]
        for p in set(passes) - set(done):
            short.setdefault(p, set()).add(base)
        progress.arms.append(ArmProgress(
            arm=name, passes_planned=len(passes), passes_complete=len(done),
            samples_planned=None if per_pass is None else per_pass * len(passes),
            samples_measured=sum(counts[(name, p)] for p in passes)))
    progress.passes_complete = len(record.orders) - len(short)
    progress.samples_measured = sum(a.samples_measured for a in progress.arms)
    planned = [a.samples_planned for a in progress.arms]
    progress.samples_planned = None if None in planned else sum(p or 0 for p in planned)
    progress.complete = not short and record.stopped is None
    if short:
        first = min(short)
        arm = next(a for a in record.orders[first] if a in short[first])
        progress.stopped_at = f"in pass {first + 1} at arm {arm}"
    return _finish(progress, record, attempts, path)


def _finish(progress: RunProgress, record: RunRecord, attempts: dict[str, list[ArmAttempt]],
            path: Path | None) -> RunProgress:
    if not progress.complete:
        progress.stopped_why = _why(record, attempts)
        progress.resume = f"bakeoff run --resume {shlex.quote(str(path)) if path is not None else 'RUN_DIR'}"
    return progress
