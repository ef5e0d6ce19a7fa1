"""Issue 33: a run directory is held by one bakeoff at a time."""

from __future__ import annotations

from pathlib import Path

import pytest

from bakeoff.core.common.errors import ConfigError, RunDirError
from bakeoff.core.results.store import RunDir
from bakeoff.core.run.resume import load_resume


def test_a_second_resume_of_a_run_in_progress_is_refused_before_anything_launches(tmp_path: Path) -> None:
    running = RunDir(tmp_path / "run")
    running.hold()  # the first bakeoff, still measuring
    (tmp_path / "run" / "run.json").write_text("{}")
    with pytest.raises(ConfigError, match="in use by another bakeoff"):
        load_resume(tmp_path / "run")
    running.release()
    with pytest.raises(ConfigError, match="records no configuration"):  # free again: it gets past the lock
        load_resume(tmp_path / "run")


def test_a_resumed_run_directory_deleted_mid_run_is_an_error(tmp_path: Path) -> None:
    RunDir(tmp_path / "run", create=True)
    reopened = RunDir(tmp_path / "run", create=False)
    reopened.hold()
    (tmp_path / "run").rename(tmp_path / "moved")
    (tmp_path / "run").mkdir()  # something else took the path
    with pytest.raises(RunDirError, match="deleted or moved"):
        reopened.arm_dir("a")
