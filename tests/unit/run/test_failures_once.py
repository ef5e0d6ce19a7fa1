"""Issue 42 item 7: a failure is said once. An arm whose engine cannot load (exit 127: a missing binary or shared
library) is not relaunched in every later pass; the same failure in several passes is one line of the verdict;
a run that measured nothing writes no report (the CLI exits 3, the Python API returns the summary without files).

The sim engine (engines/sim) crashes on start as configured: a real process, no real engine.
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

import bakeoff
from bakeoff.core.cli import app
from bakeoff.core.cli.exit_codes import ExitCode
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.reports.model import summarize_run
from bakeoff.core.reports.verdict import verdict_of
from bakeoff.core.run.bakeoff import run_bakeoff
from bakeoff.core.run.events import RunEvents

LOAD_ERROR = "error while loading shared libraries: libcuda.so.1"


def _file(crash_exit: int, with_baseline: bool = True, passes: int = 3, error: str = LOAD_ERROR) -> str:
    base = "  - {name: base, engine: sim, model: x}\n" if with_baseline else ""
    return (f"name: t\narms:\n{base}  - {{name: cand, engine: sim, model: x, options: {{crash_on_start: "
            f"'{error}', crash_exit_code: {crash_exit}}}}}\n"
            f"workload: {{prompts: [prose], max_tokens: 8, reps: 1, warmup: 0, passes: {passes}, gates: []}}\n")


def _run(tmp_path: Path, text: str) -> tuple[list[int], list[str]]:
    """The passes in which cand was started, and the warnings the run gave."""
    warnings: list[str] = []
    run = run_bakeoff(parse_bakeoff(text), tmp_path / "runs", events=RunEvents(on_warning=warnings.append))
    return [a.pass_index for a in run.arm_records()["cand"]], warnings


def test_an_engine_that_cannot_load_is_started_once_and_the_skip_said_once(tmp_path: Path) -> None:
    started, warnings = _run(tmp_path, _file(crash_exit=127))
    assert started == [0]
    skips = [w for w in warnings if "not relaunched" in w]
    assert skips == ["arm cand: not relaunched in pass 2 or later: its engine cannot load (it failed in pass 1)"]


def test_a_fixed_port_held_by_another_process_is_not_relaunched_either(tmp_path: Path) -> None:
    # the port was free when the run was planned (plan.py refuses a taken one) and taken by its first start
    started, warnings = _run(tmp_path, _file(crash_exit=1, error="bind on 127.0.0.1: Address already in use"))
    assert started == [0]
    assert [w for w in warnings if "not relaunched" in w] == [
        "arm cand: not relaunched in pass 2 or later: its fixed port is held by another process (free it, or leave "
        "settings.port out) (it failed in pass 1)"]


def test_a_start_that_may_succeed_next_time_is_retried_every_pass_and_its_failure_listed_once(
        tmp_path: Path) -> None:
    started, warnings = _run(tmp_path, _file(crash_exit=1))
    assert started == [0, 1, 2] and not [w for w in warnings if "not relaunched" in w]
    [run] = (tmp_path / "runs").iterdir()
    failures = verdict_of(summarize_run(run)).failures
    assert [f for f in failures if f.startswith("cand:")] == [
        f"cand: failed in passes 1, 2, 3: sim failed to start (crashed): the sim crashed on start as configured. "
        f"Log: E sim: {LOAD_ERROR}"]


def test_a_run_that_measured_nothing_exits_3_with_no_verdict_block_and_no_report(tmp_path: Path) -> None:
    path = tmp_path / "b.yaml"
    path.write_text(_file(crash_exit=127, with_baseline=False))
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "runs")], env={"COLUMNS": "250"})
    assert result.exit_code == ExitCode.NOTHING_MEASURED, result.output
    assert result.output.count(LOAD_ERROR) == 1  # the live line; no failure list, no second start
    assert "nothing to compare" not in result.output and "report:" not in result.output
    assert "nothing valid was measured (exit 3); no report written" in result.output
    [run] = (tmp_path / "runs").iterdir()
    assert not (run / "report").exists()


def test_the_python_api_writes_no_report_for_a_run_that_measured_nothing(tmp_path: Path) -> None:
    path = tmp_path / "b.yaml"
    path.write_text(_file(crash_exit=127, with_baseline=False, passes=2))
    summary = bakeoff.run(path, out=tmp_path / "runs")
    assert summary.path is not None and not (summary.path / "report").exists()
    assert [(f.arm, f.pass_index) for f in summary.failures] == [("cand", 0)]
