"""Reading a run changes nothing in it: ``bakeoff report``, ``compare``, ``runs`` and resume's reading phase
leave a real run directory's files, sizes and mtimes as they were, with no SQLite -wal/-shm files or journal
left beside its index (core/results/db.py reads the index read-only)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bakeoff.core.cli import app
from bakeoff.core.results.db import DB_NAME

SIM = """\
name: ro
arms:
  - {name: base, engine: sim, model: sim, options: {itl_ms: 4}}
  - {name: fast, engine: sim, model: sim, options: {itl_ms: 4, tokens_per_event: 2}}
workload: {prompts: [prose], reps: 2, max_tokens: 32, warmup: 0, gates: []}
"""


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Size and mtime of every path under root; directories too, since a file made and removed again
    changes its directory's mtime."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in [root, *root.rglob("*")]}


def _set_writable(root: Path, writable: bool) -> None:
    for p in [root, *root.rglob("*")]:
        mode = p.stat().st_mode
        os.chmod(p, mode | stat.S_IWUSR if writable else mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A finished run of the sim engine, made read-only (`chmod -R a-w`) for the tests that read it."""
    tmp = tmp_path_factory.mktemp("ro")
    (tmp / "sim.yaml").write_text(SIM)
    result = CliRunner().invoke(app, ["run", str(tmp / "sim.yaml"), "--out", str(tmp / "runs")],
                                env={"COLUMNS": "200", "BAKEOFF_RUNNING_DIR": str(tmp / "running")})
    assert result.exit_code == 0, result.output
    [run] = (tmp / "runs").iterdir()
    assert (run / DB_NAME).exists() and (run / "samples.jsonl").read_text().count("\n") == 4
    _set_writable(tmp / "runs", False)
    yield tmp / "runs"
    _set_writable(tmp / "runs", True)  # so pytest can remove it


def _unchanged_by(runs: Path, *args: str, exit_code: int = 0) -> str:
    before = _tree(runs)
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exit_code == exit_code, result.output
    assert _tree(runs) == before
    assert not [p.name for p in runs.rglob(f"{DB_NAME}-*")]  # no -wal, -shm or -journal left behind
    return result.output


def test_report_to_another_directory_reads_the_run_only(runs: Path, tmp_path: Path) -> None:
    [run] = runs.iterdir()
    output = _unchanged_by(runs, "report", str(run), "--out", str(tmp_path / "report"))
    assert "base" in output and "fast" in output
    assert {"report.md", "summary.json", "report.html"} <= {p.name for p in (tmp_path / "report").iterdir()}


def test_report_json_and_compare_and_runs_read_the_run_only(runs: Path) -> None:
    [run] = runs.iterdir()
    assert '"arms"' in _unchanged_by(runs, "report", str(run), "--json", "--no-files")
    assert "fast" in _unchanged_by(runs, "compare", str(run), str(run))
    assert run.name in _unchanged_by(runs, "runs", str(runs))


def test_resume_refused_after_reading_changes_nothing(runs: Path, tmp_path: Path) -> None:
    [run] = runs.iterdir()
    changed = tmp_path / "changed.yaml"
    changed.write_text(SIM.replace("reps: 2", "reps: 3"))
    output = _unchanged_by(runs, "run", str(changed), "--resume", str(run), exit_code=2)
    assert "differs from the configuration recorded" in output
