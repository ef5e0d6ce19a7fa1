"""The Python API: ``bakeoff.run`` runs a file and returns the typed summary; ``bakeoff.read_run`` reads one back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import bakeoff
from bakeoff.core.config.loader import parse_bakeoff

FILE = """name: api
arms:
  - {name: base, engine: sim, model: sim, options: {itl_ms: 2}}
  - {name: fast, engine: sim, model: sim, options: {itl_ms: 1}}
workload: {prompts: [prose, code_bash], max_tokens: 16, reps: 2, warmup: 0, gates: []}
baseline: base
"""


def test_run_a_file_and_read_its_directory_back(tmp_path: Path) -> None:
    path = tmp_path / "api.yaml"
    path.write_text(FILE)
    summary = bakeoff.run(path, out=tmp_path / "runs")
    assert summary.path is not None and summary.path.parent == tmp_path / "runs"
    assert [a.arm for a in summary.arms] == ["base", "fast"] and all(a.n == 4 for a in summary.arms)
    [fast] = summary.comparisons
    assert fast.arm == "fast" and fast.reference == "base" and fast.ratio.estimate > 1
    assert (summary.path / "report" / "summary.json").is_file()  # the same report files as `bakeoff run`
    again = bakeoff.read_run(summary.path)
    assert again.model_dump() == summary.model_dump()


def test_run_takes_a_loaded_file_too(tmp_path: Path) -> None:
    summary = bakeoff.run(parse_bakeoff(FILE), out=tmp_path, reports=False)
    assert summary.name == "api" and summary.path is not None and not (summary.path / "report").exists()


def test_importing_bakeoff_loads_nothing_of_the_run() -> None:
    code = "import sys, bakeoff; print(sorted(m for m in sys.modules if m.startswith('bakeoff.core')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
