"""Issue 33: faults seen only through the command line: a run directory that vanishes mid-run,
and a reader that goes away (``bakeoff run … | head``). Sim engines only."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

BAKEOFF = [sys.executable, "-m", "bakeoff"]


def _write(tmp: Path, text: str) -> Path:
    cfg = tmp / "b.yaml"
    cfg.write_text(text)
    return cfg


def _run_dir(out: Path) -> Path | None:
    found = [p for p in out.glob("*") if p.is_dir()] if out.exists() else []
    return found[0] if found else None


def _samples(run: Path | None) -> int:
    try:
        return len((run / "samples.jsonl").read_text().splitlines()) if run else 0
    except OSError:
        return 0


def test_run_directory_deleted_mid_run_is_an_error_not_recreated(tmp_path: Path) -> None:
    cfg = _write(tmp_path, "arms: [{name: a, engine: sim, model: x, options: {itl_ms: 10}}]\n"
                           "workload: {prompts: [prose], max_tokens: 16, reps: 40, warmup: 0, gates: []}\n")
    out = tmp_path / "runs"
    proc = subprocess.Popen([*BAKEOFF, "run", str(cfg), "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while _samples(run := _run_dir(out)) < 3:
            assert proc.poll() is None and time.monotonic() < deadline, "the run ended before 3 samples"
            time.sleep(0.05)
        assert run is not None
        shutil.rmtree(run)
        _stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 5, (proc.returncode, stderr[-800:])
    assert str(run) in stderr and "deleted or moved" in stderr, stderr[-800:]
    assert not run.exists(), "the deleted run directory was recreated"
    assert "Traceback" not in stderr


def test_a_reader_that_goes_away_does_not_abort_the_remaining_arms(tmp_path: Path) -> None:
    """``bakeoff run … | head -n 1`` (CFG-18b): rich used to exit 1 at the next print, silently, arms unmeasured."""
    cfg = _write(tmp_path, "arms:\n"
                           "  - {name: a1, engine: sim, model: x, options: {itl_ms: 5}}\n"
                           "  - {name: b, engine: sim, model: x, options: {crash_on_start: boom}}\n"
                           "  - {name: a2, engine: sim, model: x, options: {itl_ms: 6}}\n"
                           "workload: {prompts: [prose], max_tokens: 16, reps: 4, warmup: 0, gates: [], seed: 3}\n")
    out = tmp_path / "runs"
    proc = subprocess.Popen([*BAKEOFF, "run", str(cfg), "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdout.readline()
        proc.stdout.close()  # the reader is gone: every later write to stdout is a broken pipe
        stderr = proc.stderr.read().decode(errors="replace")
        proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    run = _run_dir(out)
    assert run is not None
    arms = [line.split('"arm":"')[1].split('"')[0] for line in (run / "samples.jsonl").read_text().splitlines()]
    assert arms.count("a1") == 4 and arms.count("a2") == 4, (arms, stderr[-800:])
    assert proc.returncode == 4, (proc.returncode, stderr[-800:])  # one arm failed: partial, not "a bakeoff bug"
    assert "Traceback" not in stderr


def test_a_closed_stdout_still_measures(tmp_path: Path) -> None:
    """``bakeoff run … >&-`` (CFG-19): an AttributeError at import, nothing run."""
    cfg = _write(tmp_path, "arms: [{name: a, engine: sim, model: x, options: {itl_ms: 2}}]\n"
                           "workload: {prompts: [prose], max_tokens: 8, reps: 2, warmup: 0, gates: []}\n")
    out = tmp_path / "runs"
    argv = " ".join([sys.executable, "-m", "bakeoff", "run", str(cfg), "--out", str(out)])
    done = subprocess.run(["bash", "-c", f"{argv} >&-"], capture_output=True, text=True, timeout=180)
    assert "Traceback" not in done.stderr, done.stderr[-800:]
    assert _samples(_run_dir(out)) == 2 and done.returncode == 0, (done.returncode, done.stderr[-800:])


def test_an_ascii_stdout_gets_its_tables_without_a_traceback(tmp_path: Path) -> None:
    """``PYTHONIOENCODING=ascii bakeoff run …`` (CFG-20): every sample stored, then a UnicodeEncodeError on the
    first table and another on the warning about it: a traceback, exit 1, no report."""
    cfg = _write(tmp_path, "arms: [{name: a, engine: sim, model: x, options: {itl_ms: 2}}]\n"
                           "workload: {prompts: [prose], max_tokens: 8, reps: 2, warmup: 0, gates: []}\n")
    out = tmp_path / "runs"
    done = subprocess.run([*BAKEOFF, "run", str(cfg), "--out", str(out)], capture_output=True, timeout=180,
                          env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert b"Traceback" not in done.stderr, done.stderr[-800:]
    assert done.returncode == 0 and _samples(_run_dir(out)) == 2, (done.returncode, done.stderr[-800:])
    run = _run_dir(out)
    assert run is not None and (run / "report" / "report.md").is_file()
