"""FAULTS-2 (issue 33) faults seen only through the command line: a run directory that vanishes mid-run (R3),
and a reader that goes away (``bakeoff run … | head``, R8). Sim engines only."""

from __future__ import annotations

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
