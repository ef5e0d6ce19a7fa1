"""Progress that helps on a long run (issue 42 item 8): requests done of all the run plans, the arm's live decode
rate and an ETA, one plain line per request when piped (USER-3: "count and elapsed time but no ETA")."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from bakeoff.core.cli.progress import Pace, PlainProgress, sample_done


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_say_done_of_planned_the_live_rate_and_an_eta() -> None:
    clock, out = Clock(), io.StringIO()
    progress = PlainProgress(Console(file=out, width=80), clock=clock)
    task = progress.add_task("starting", total=10, rate="", eta="")
    pace = Pace(clock)
    pace.start()
    progress.update(task, description="a: measuring")
    for seconds, rate in ((2.0, 10.0), (2.0, 30.0), (2.0, 20.0), (2.0, None)):
        clock.now += seconds
        sample_done(progress, task, pace, "a", rate)
    lines = out.getvalue().splitlines()
    assert lines[1] == "[0:00:02] a: request 1 of 10, 10.0 tok/s"  # one request: no ETA yet
    assert lines[2] == "[0:00:04] a: request 2 of 10, 20.0 tok/s, about 0:00:16 left"  # 8 left at 2 s each
    assert lines[3] == "[0:00:06] a: request 3 of 10, 20.0 tok/s, about 0:00:14 left"  # median of 10, 30, 20
    assert lines[4] == "[0:00:08] a: request 4 of 10, 20.0 tok/s, about 0:00:12 left"  # an error has no rate
    progress.update(task, description="b: measuring")
    clock.now += 8.0  # an engine start between arms slows the pace, and the ETA says so
    sample_done(progress, task, pace, "b", 50.0)
    assert out.getvalue().splitlines()[-1] == "[0:00:16] b: request 5 of 10, 50.0 tok/s, about 0:00:16 left"


def test_a_resumed_run_paces_only_what_it_measures() -> None:
    clock = Clock()
    pace = Pace(clock)
    pace.start()  # 90 of 100 were measured before: they took no time of this process
    for _ in range(2):
        clock.now += 3.0
        pace.sample("a", 5.0)
    assert pace.eta(92, 100) == "about 0:00:24 left"


def _piped_run(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``bakeoff run f.yaml`` in ``tmp_path`` with its output piped (no terminal width given)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "BAKEOFF_WIDTH")}
    return subprocess.run([sys.executable, "-m", "bakeoff", "run", "f.yaml", "--out", "runs"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env={**env, "NO_COLOR": "1"})


def test_a_piped_run_prints_rate_and_eta_lines(tmp_path: Path) -> None:
    (tmp_path / "f.yaml").write_text(
        "arms:\n  - {name: a, engine: sim, model: sim, options: {itl_ms: 1}}\n"
        "  - {name: b, engine: sim, model: sim, options: {itl_ms: 1}}\n"
        "workload: {prompts: [prose], max_tokens: 8, reps: 2, warmup: 0, gates: []}\n")
    done = _piped_run(tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    said = [line for line in done.stdout.splitlines() if re.match(r"\[\d:\d\d:\d\d\] .*: request ", line)]
    assert len(said) == 4, said
    assert re.fullmatch(r"\[0:\d\d:\d\d\] a: request 1 of 4, [\d.]+ tok/s", said[0]), said
    assert all(re.fullmatch(r"\[0:\d\d:\d\d\] [ab]: request \d of 4, [\d.]+ tok/s, about 0:\d\d:\d\d left", line)
               for line in said[1:]), said


def test_a_warning_every_engine_start_gives_is_printed_once_per_run(tmp_path: Path) -> None:
    # the sim reports no slots: each of the 2 passes' starts warns that concurrency levels are unchecked
    (tmp_path / "f.yaml").write_text(
        "arms:\n  - {name: a, engine: sim, model: sim, options: {itl_ms: 1}}\n"
        "workload: {prompts: [prose], max_tokens: 4, reps: 1, warmup: 0, passes: 2, concurrency: [1, 2], "
        "gates: []}\n")
    done = _piped_run(tmp_path)
    assert done.returncode in (0, 4), done.stdout[-2000:] + done.stderr[-2000:]
    said = [line for line in done.stdout.splitlines() if "does not report its slots" in line]
    assert len(said) == 1 and said[0].startswith("WARNING a: the engine does not report its slots"), said
