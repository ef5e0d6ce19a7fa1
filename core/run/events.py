"""What a run tells its caller as it goes (the CLI draws a progress bar from it; the library API may ignore it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..engine.effective import Effective
from ..results.sample import Sample
from ..results.store import RunDir

__all__ = ["RunEvents"]


@dataclass
class RunEvents:
    """Callbacks for progress display; all optional."""

    on_run_start: Callable[[RunDir, int, int], None] = lambda run, requests, done: None
    on_note: Callable[[str], None] = lambda msg: None  # what the run decided (another pass, the live service)
    on_pass_added: Callable[[int], None] = lambda requests: None
    on_arm_start: Callable[[str, int], None] = lambda arm, pass_index: None
    on_arm_ready: Callable[[str, Effective, float | None], None] = lambda arm, eff, boot: None
    on_sample: Callable[[Sample], None] = lambda s: None
    on_arm_failed: Callable[[str, str], None] = lambda arm, why: None
    on_warning: Callable[[str], None] = lambda msg: None
