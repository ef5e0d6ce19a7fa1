"""Issue 33: the report written at the end of a run.

SIGTERM or SIGHUP while ``bakeoff run`` writes its report, or reads its exit code after it, is an interruption
(exit 130), not death by the signal. A report that cannot be written (a full disk) is one error line and a
non-zero exit, and leaves the previous report files whole and the samples untouched.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import bakeoff
from bakeoff.core.cli import running
from bakeoff.core.cli.boundary import stop_message
from bakeoff.core.cli.exit_codes import run_outcome as real_run_outcome
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.reports import print_run as real_print_run
from bakeoff.core.results.store import RunDir

# tokens 1 ms apart: a stream delivered all at once has no rate, and a run with no rate writes no report
FILE = """name: r
arms:
  - {name: base, engine: sim, model: sim, options: {itl_ms: 1}}
  - {name: fast, engine: sim, model: sim, options: {itl_ms: 1, tokens_per_event: 2}}
workload: {prompts: [prose], max_tokens: 8, reps: 2, warmup: 0, gates: []}
baseline: base
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_while_the_report_is_written_is_an_interruption(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: signal.Signals) -> None:
    reached_caller: list[int] = []

    def callers_handler(signum: int, frame: FrameType | None) -> None:  # what the signal did before the fix
        reached_caller.append(signum)

    def signalled_print_run(*args: Any, **kwargs: Any) -> None:
        os.kill(os.getpid(), sig)  # the PROC-01 probe: the signal arrives after the last sample
        real_print_run(*args, **kwargs)

    monkeypatch.setattr(running, "print_run", signalled_print_run)
    before = signal.signal(sig, callers_handler)
    try:
        with pytest.raises(KeyboardInterrupt):  # the CLI boundary turns it into "interrupted", exit 130
            running.execute(parse_bakeoff(FILE), tmp_path)
        assert reached_caller == [], "the signal reached the caller's handler: a plain bakeoff would die by it"
        assert signal.getsignal(sig) is callers_handler  # restored once the command is done
    finally:
        signal.signal(sig, before)
    [run_path] = tmp_path.iterdir()
    assert len(RunDir(run_path).samples()) == 4  # every sample kept (2 arms x 2 reps)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_while_the_exit_code_is_read_is_an_interruption(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: signal.Signals) -> None:
    # the reports are written; the exit step reads every sample again (about a second on a big run): a signal
    # there must still be an interruption naming the run directory, not death by the signal
    reached_caller: list[int] = []

    def callers_handler(signum: int, frame: FrameType | None) -> None:
        reached_caller.append(signum)

    def signalled_outcome(*args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), sig)
        return real_run_outcome(*args, **kwargs)

    monkeypatch.setattr(running, "run_outcome", signalled_outcome)
    before = signal.signal(sig, callers_handler)
    try:
        with pytest.raises(KeyboardInterrupt) as stopped:  # the CLI boundary: "interrupted", exit 130
            running.run_loaded(parse_bakeoff(FILE), tmp_path)
        assert reached_caller == [], "the signal reached the caller's handler: a plain bakeoff would die by it"
        assert signal.getsignal(sig) is callers_handler
    finally:
        signal.signal(sig, before)
    [run_path] = tmp_path.iterdir()
    assert "RUN_DIR" not in stop_message(stopped.value, "`bakeoff run --resume RUN_DIR`")
    assert (run_path / "report").is_dir()


def test_a_stop_signal_once_the_command_is_done_leaves_its_exit_code() -> None:
    # the interpreter's teardown after a run takes a few tenths of a second: a deadline's SIGTERM there must not
    # kill the finished command by the signal (143); an atexit hook stands in for the teardown
    script = ("import atexit, os, signal, sys, time\n"
              "from bakeoff.core.cli import main\n"
              "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(0.2)))\n"
              "sys.argv = ['bakeoff', '--version']\n"
              "main()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stderr)


def _report(run: Path, *, max_file_bytes: int | None = None) -> subprocess.CompletedProcess[str]:
    def limit_file_size() -> None:  # a disk that fills up: writes past the limit fail with EFBIG
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        if max_file_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))

    return subprocess.run([sys.executable, "-c", "from bakeoff.core.cli import main; main()", "report", str(run)],
                          capture_output=True, text=True, preexec_fn=limit_file_size, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})


def test_a_report_that_cannot_be_written_leaves_the_previous_one_whole(tmp_path: Path) -> None:
    summary = bakeoff.run(parse_bakeoff(FILE), out=tmp_path)
    assert summary.path is not None
    report = summary.path / "report"
    before = {p.name: p.read_bytes() for p in report.iterdir()}
    samples_before = (summary.path / "samples.jsonl").read_bytes()
    assert {"report.md", "summary.json", "report.html"} <= set(before)
    assert max(len(b) for b in before.values()) > 20_000  # the limit below cuts at least one file short

    result = _report(summary.path, max_file_bytes=20_000)
    assert result.returncode == 5, result.stdout + result.stderr  # the documented "could not be written"
    assert f"cannot write reports into {report}" in result.stderr and "Traceback" not in result.stderr
    after = {p.name: p.read_bytes() for p in report.iterdir()}
    assert after == before  # no truncated file, no half-new set, no temporary file left
    assert (summary.path / "samples.jsonl").read_bytes() == samples_before

    again = _report(summary.path)  # with room again, the report is rebuilt
    assert again.returncode == 0, again.stdout + again.stderr
    assert set(p.name for p in report.iterdir()) == set(before)
