"""Runs that say what they did (issue 40 item 4): a run stopped mid-pass reports itself incomplete, planned
against measured, in summary.json, report.md, report.html, the terminal and ``bakeoff runs``, with the command
that finishes it; once resumed, the same run reports itself complete.

Seen on a GPU run cut at its deadline (SIGTERM): "2 pass(es)", ``warnings: []``, half the samples per arm.
Engines: bakeoff's simulated one (engine: sim), two arms, two passes of three requests each.
"""

from __future__ import annotations

import dataclasses
import html
import json
import signal
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bakeoff.core.cli import app
from bakeoff.core.cli.exit_codes import ExitCode
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.measure import definitions as measure
from bakeoff.core.reports import summarize_run
from bakeoff.core.reports.completeness import run_progress
from bakeoff.core.results.record import ArmAttempt, RunRecord
from bakeoff.core.run import arm as arm_module
from bakeoff.core.run.bakeoff import StopSignal
from bakeoff.core.run.executor import LocalExecutor
from bakeoff.core.run.protocol import run_plan

runner = CliRunner()

FILE = """name: cut
arms:
  - {name: base, engine: sim, model: sim, options: {itl_ms: 3}}
  - {name: fast, engine: sim, model: sim, options: {itl_ms: 3, tokens_per_event: 2}}
workload: {prompts: [prose], max_tokens: 8, reps: 3, passes: 2, warmup: 0, gates: [], seed: 1}
baseline: base
"""


def cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "400"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def run_cut_at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nth: int, stop: BaseException) -> tuple[int, Path]:
    """``bakeoff run`` stopped by ``stop`` as its ``nth`` sample is made (nth - 1 samples are stored)."""
    file = tmp_path / "b.yaml"
    file.write_text(FILE)
    real, made = measure.make_sample, [0]  # what the arm session calls

    def cut(*args: Any, **kwargs: Any) -> Any:
        made[0] += 1
        if made[0] == nth:
            raise stop
        return real(*args, **kwargs)

    monkeypatch.setattr(arm_module, "make_sample", cut)
    code, _ = cli("run", str(file), "--out", str(tmp_path / "runs"))
    monkeypatch.setattr(arm_module, "make_sample", real)
    [run] = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    return code, run


def test_a_run_stopped_mid_pass_says_so_everywhere_and_resume_completes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, run = run_cut_at(tmp_path, monkeypatch, 8, KeyboardInterrupt())  # pass 2, its first arm's 2nd request
    assert code == 130
    second = json.loads((run / "run.json").read_text())["orders"][1][0]
    lead = (f"INCOMPLETE RUN: 1 of 2 passes complete (7 of 12 samples); stopped in pass 2 at arm {second}: "
            f"interrupted (Ctrl-C); `bakeoff run --resume {run}` measures the rest")
    design = "1 of 2 passes complete (7 of 12 samples), each 3 rep(s) × 1 prompt(s)"

    code, out = cli("report", str(run))
    assert code == 0, out
    assert " ".join(lead.split()) in " ".join(out.split()) and design in out and "2 pass(es)" not in out
    assert out.index("INCOMPLETE RUN") < out.index(design)  # it leads the block
    code, out = cli("report", str(run), "--tables", "--no-files")
    assert code == 0 and out.index("INCOMPLETE RUN") < out.index("decode tok/s —") and out.count("INCOMPLETE") == 1

    summary = json.loads((run / "report/summary.json").read_text())
    assert summary["complete"] is False and summary["warnings"][0] == lead
    progress = summary["progress"]
    assert (progress["passes_planned"], progress["passes_complete"]) == (2, 1)
    assert (progress["samples_measured"], progress["samples_planned"]) == (7, 12)
    arms = {a["arm"]: a for a in progress["arms"]}
    assert arms[second] == {"arm": second, "passes_planned": 2, "passes_complete": 1, "samples_planned": 6,
                            "samples_measured": 4}
    [other] = set(arms) - {second}
    assert (arms[other]["passes_complete"], arms[other]["samples_measured"]) == (1, 3)

    markdown = (run / "report/report.md").read_text()
    assert markdown.index(f"> **{lead}**") < markdown.index("| arm")  # before the table it qualifies
    assert markdown.count(lead) == 1 and design in markdown and "2 pass(es)" not in markdown
    page = (run / "report/report.html").read_text()
    assert html.escape(lead) in page and "2 pass(es)" not in page
    assert page.index('id="incomplete"') < page.index('id="verdict"')

    code, out = cli("runs", str(tmp_path / "runs"))
    assert code == 0, out
    assert "incomplete: 1 of 2 passes complete (7 of 12 samples)" in out
    assert f"(interrupted (Ctrl-C)):\nbakeoff run --resume {run}\n" in out  # the command on a line of its own

    code, out = cli("run", "--resume", str(run))
    assert code == 0, out
    assert "INCOMPLETE" not in out and "2 pass(es) × 3 rep(s)" in out
    summary = json.loads((run / "report/summary.json").read_text())
    assert summary["complete"] is True and not any("INCOMPLETE" in w for w in summary["warnings"])
    assert (summary["progress"]["samples_measured"], summary["progress"]["passes_complete"]) == (12, 2)
    assert "stopped" not in json.loads((run / "run.json").read_text()) or \
        json.loads((run / "run.json").read_text())["stopped"] is None
    assert "INCOMPLETE" not in (run / "report/report.md").read_text()
    code, out = cli("runs", str(tmp_path / "runs"))
    assert "finished" in out and "incomplete" not in out and "--resume" not in out


def test_a_deadline_signal_is_recorded_as_why_the_run_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # SIGTERM is how a deadline ends a run (`timeout`, the live watchdog): the CLI raises StopSignal for it
    code, run = run_cut_at(tmp_path, monkeypatch, 3, StopSignal(signal.SIGTERM))
    assert code == 130  # stopped short, some samples measured: never 0
    stopped = json.loads((run / "run.json").read_text())["stopped"]
    assert (stopped["why"], stopped["detail"]) == ("signal", "SIGTERM")
    summary = summarize_run(run)
    assert summary.complete is False and summary.progress is not None
    assert summary.progress.stopped_why == "stopped by SIGTERM"
    assert summary.warnings[0].startswith("INCOMPLETE RUN: 0 of 2 passes complete (2 of 12 samples); stopped in "
                                          "pass 1 at arm ")


def _record(**changes: Any) -> RunRecord:
    return RunRecord(config=parse_bakeoff(FILE), orders=[["base", "fast"], ["fast", "base"]],
                     prompts=[{"name": "prose"}], **changes)


def _samples(passes: dict[tuple[str, int], int]) -> list[tuple[str, int]]:
    return [key for key, n in passes.items() for _ in range(n)]


def test_why_a_run_stopped_is_what_its_record_can_tell() -> None:
    # killed outright (SIGKILL): nothing could write why
    killed = run_progress(_record(), _samples({("base", 0): 3, ("fast", 0): 1}), {})
    assert not killed.complete and killed.stopped_at == "in pass 1 at arm fast"
    assert killed.stopped_why == "the run record does not say why (bakeoff was killed, or the run is still going)"
    # ended, but an arm failed midway: the failure is why, and --resume retries it
    failed = {"fast": [ArmAttempt(status="ok", pass_index=0), ArmAttempt(status="failed", pass_index=1)]}
    ended = run_progress(_record(finished_at=1.0), _samples({("base", 0): 3, ("fast", 0): 3, ("fast", 1): 1,
                                                             ("base", 1): 3}), failed, Path("/r un"))
    assert not ended.complete and ended.stopped_why == "arm fast failed in pass 2"
    assert ended.line == "1 of 2 passes complete (10 of 12 samples)" and ended.resume == "bakeoff run --resume '/r un'"
    # every point stored: complete, no warning
    whole = run_progress(_record(finished_at=1.0), _samples({(a, p): 3 for a in ("base", "fast") for p in (0, 1)}), {})
    assert whole.complete and whole.warning is None and whole.line == "2 of 2 passes complete (12 of 12 samples)"


def test_a_run_that_returns_short_of_its_plan_exits_4_not_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a stop that does not raise (what a budget or a lost host does): valid samples, half the plan
    def first_pass_only(self: Any, plan: Any, run: Any, events: Any, done: Any) -> None:
        run_plan(dataclasses.replace(plan, orders=plan.orders[:1]), run, events, done)

    monkeypatch.setattr(LocalExecutor, "run", first_pass_only)
    file = tmp_path / "b.yaml"
    file.write_text(FILE)
    code, out = cli("run", str(file), "--out", str(tmp_path / "runs"))
    assert code == ExitCode.PARTIAL, out
    assert "partial result (exit 4): INCOMPLETE RUN: 1 of 2 passes complete (6 of 12 samples)" in " ".join(out.split())
