"""One run, one truth on disk (issue 19 item 4, FAULTS.md D4, D5, D11-D14, D18): a run is its recorded id,
samples.jsonl and the index are reconciled whenever a run is read, damage is repaired or reported, never a
crash or a silent loss, and bookkeeping is append-only."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bakeoff.core.cli import app
from bakeoff.core.common.errors import BakeoffError, ConfigError, NewerSchemaError, RunDirError
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.config.schema import ARM_NAME_MAX
from bakeoff.core.reports.model import summarize_run
from bakeoff.core.results.db import DB_NAME
from bakeoff.core.results.record import ArmAttempt, RunRecord
from bakeoff.core.results.sample import Sample
from bakeoff.core.results.store import SET_ASIDE, RunDir, read_samples
from bakeoff.core.run import plan as plan_module
from bakeoff.core.run import protocol
from bakeoff.core.run.plan import run_record
from bakeoff.core.run.resume import load_resume
from bakeoff.engines.sim import SimAdapter

CONFIG = """\
name: t
arms:
  - {name: a, engine: sim, model: sim}
  - {name: b, engine: sim, model: sim}
workload: {prompts: [prose], reps: 3}
"""
ROOT = Path(__file__).resolve().parents[3]


def _run(path: Path, reps: int = 3, prompt: str = "prose") -> RunDir:
    """A run of arms a and b, ``reps`` samples each, written the way `bakeoff run` writes one."""
    run = RunDir(path)
    run.write_record(RunRecord.model_validate({
        "config": parse_bakeoff(CONFIG).model_dump(mode="json"), "orders": [["a", "b"]],
                   "started_at": 1.0}))
    for arm in ("a", "b"):
        for rep in range(reps):
            run.append(Sample(arm=arm, engine="sim", prompt=prompt, mode="greedy", rep=rep,
                              decode_tps=100.0 + rep, completion_tokens=64, n_first=1, decode_s=0.6))
    return run


def _lines(run: RunDir) -> list[bytes]:
    return [line for line in run.samples_path.read_bytes().split(b"\n") if line]


def _n(path: Path, arm: str) -> int:
    stats = summarize_run(path, n_boot=200).arm(arm)
    assert stats is not None
    return stats.n


# -- D4: the run is its recorded id ------------------------------------------------------------------
def test_run_json_records_the_run_id(tmp_path: Path) -> None:
    run = _run(tmp_path / "20260101-000000-t")
    assert json.loads(run.run_json.read_text())["run_id"] == "20260101-000000-t"


@pytest.mark.parametrize("how", ["copy", "rename"])
def test_a_copied_or_renamed_run_resumes_as_the_same_run(tmp_path: Path, how: str) -> None:
    original = _run(tmp_path / "20260101-000000-t")
    moved = tmp_path / "my-run"
    shutil.copytree(original.path, moved) if how == "copy" else original.path.rename(moved)
    resume = load_resume(moved)
    assert len(resume.done) == 6  # main: 0 stored, every point measured again
    assert resume.run.run_id == "20260101-000000-t"
    with pytest.raises(BakeoffError, match="already stored"):  # a second sample for a point is refused
        resume.run.append(Sample(arm="a", engine="sim", prompt="prose", mode="greedy", rep=0))
    assert _n(moved, "a") == 3 and summarize_run(moved, n_boot=200).run_id == "20260101-000000-t"


def test_reports_keep_only_the_runs_own_lines_and_say_so(tmp_path: Path) -> None:
    run = _run(tmp_path / "r")
    stranger = Sample(run_id="another-run", arm="a", engine="sim", prompt="prose", mode="greedy", rep=0,
                      decode_tps=1.0)
    with run.samples_path.open("a") as f:
        f.write(stranger.model_dump_json() + "\n")
    assert len(read_samples(run.path)) == 6  # main: 7, the other run's line counted as this run's
    assert _n(run.path, "a") == 3
    assert any("1 line(s) of another run (another-run)" in w for w in summarize_run(run.path, n_boot=200).warnings)


def test_an_old_run_without_a_recorded_id_keeps_the_id_its_samples_carry() -> None:
    fixture = ROOT / "tests" / "fixtures" / "reports" / "llamacpp-run"
    run = RunDir(fixture, create=False)
    assert run.run_id == "20261129-204632-stats-real" != fixture.name
    assert len(read_samples(fixture)) == len(_lines(run)) == 72


# -- D5: samples.jsonl and the index are one truth -----------------------------------------------------
def test_a_corrupt_line_is_restored_from_the_index_for_report_and_resume(tmp_path: Path) -> None:
    run = _run(tmp_path / "r")
    lines = _lines(run)
    lines[1] = lines[1][: len(lines[1]) // 2]  # half a line, as a crash or a bad disk leaves it
    run.samples_path.write_bytes(b"\n".join(lines) + b"\n")
    assert _n(run.path, "a") == 3  # main: 2, the sample silently gone
    warnings = summarize_run(run.path, n_boot=200).warnings
    assert any("1 unreadable line(s) (line 2" in w and "restored" in w for w in warnings), warnings
    resume = load_resume(run.path)
    assert len(resume.done) == 6 and any("repaired" in w for w in resume.warnings)
    assert len(_lines(run)) == 6 and len(read_samples(run.path)) == 6  # the file holds it again
    assert (run.path / SET_ASIDE).read_bytes() == lines[1] + b"\n"  # the damaged bytes are kept aside
    assert not any("unreadable" in w for w in summarize_run(run.path, n_boot=200).warnings)


def test_a_deleted_samples_file_is_restored_from_the_index(tmp_path: Path) -> None:
    run = _run(tmp_path / "r")
    run.samples_path.unlink()
    assert _n(run.path, "b") == 3  # main: an empty report
    resume = load_resume(run.path)
    assert len(resume.done) == 6
    assert len(_lines(run)) == 6


def test_a_line_the_index_lacks_is_read_by_the_report_and_indexed_by_resume(tmp_path: Path) -> None:
    run = _run(tmp_path / "r", reps=2)
    extra = Sample(run_id=run.run_id, arm="a", engine="sim", prompt="prose", mode="greedy", rep=2,
                   decode_tps=99.0)
    with run.samples_path.open("a") as f:  # a crash between the fsync and the commit
        f.write(extra.model_dump_json() + "\n")
    assert _n(run.path, "a") == 3
    assert len(load_resume(run.path).done) == 5 and len(run.db.samples(run.run_id)) == 5


def test_an_unindexed_line_for_a_stored_point_is_not_counted_twice(tmp_path: Path) -> None:
    run = _run(tmp_path / "r")
    twin = Sample(run_id=run.run_id, arm="a", engine="sim", prompt="prose", mode="greedy", rep=0,
                  decode_tps=5.0)
    with run.samples_path.open("a") as f:
        f.write(twin.model_dump_json() + "\n")
    assert _n(run.path, "a") == 3
    assert any("repeat a measurement point" in w for w in summarize_run(run.path, n_boot=200).warnings)
    (run.path / DB_NAME).unlink()  # without the index, the file alone still holds one sample per point
    assert _n(run.path, "a") == 3
    assert len(load_resume(run.path).done) == 6 and len(read_samples(run.path)) == 6


# -- D11: bytes that are not UTF-8 ----------------------------------------------------------------
def test_non_utf8_bytes_and_a_torn_multibyte_line_never_crash(tmp_path: Path) -> None:
    run = _run(tmp_path / "r", prompt="résumé-prompt")
    lines = _lines(run)
    cut = lines[-1][: lines[-1].index("é".encode()) + 1]  # ends inside the two bytes of é
    lines = [*lines[:2], b"\xff\xfe\x00 binary garbage \x80", *lines[2:-1], cut]
    run.samples_path.write_bytes(b"\n".join(lines))
    assert len(read_samples(run.path)) == 6  # main: UnicodeDecodeError; the torn last sample is in the index
    warnings = summarize_run(run.path, n_boot=200).warnings
    assert any("2 unreadable line(s) (line 3, 7" in w for w in warnings), warnings
    assert len(load_resume(run.path).done) == 6
    result = CliRunner().invoke(app, ["compare", str(run.path), str(run.path)])
    assert result.exit_code == 0, result.output


def test_a_torn_line_the_index_never_committed_is_reported_not_restored(tmp_path: Path) -> None:
    run = _run(tmp_path / "r", reps=1)
    with run.samples_path.open("ab") as f:
        f.write(b'{"schema_version": 1, "arm": "a", "eng')  # the request the crash cut off
    stored = run.stored_samples()
    assert len(stored.samples) == 2
    assert any("holds no sample for them" in w for w in stored.warnings)


# -- D12: written by a newer bakeoff ---------------------------------------------------------------
def test_unknown_fields_of_a_known_schema_are_ignored_and_named(tmp_path: Path) -> None:
    run = _run(tmp_path / "r")
    lines = [json.loads(line) | {"energy_joules": 1.0} for line in _lines(run)]
    run.samples_path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    (run.path / DB_NAME).unlink()  # the file alone, as a newer bakeoff's run copied without its index
    assert _n(run.path, "a") == 3  # main: every line dropped, an empty report, exit 0
    assert any("energy_joules" in w for w in summarize_run(run.path, n_boot=200).warnings)


def test_a_newer_sample_schema_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    run = _run(tmp_path / "r")
    lines = [json.loads(line) | {"schema_version": 99} for line in _lines(run)]
    run.samples_path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with pytest.raises(NewerSchemaError, match=r"samples.jsonl line 1: sample schema_version 99.*upgrade bakeoff"):
        read_samples(run.path)
    result = CliRunner().invoke(app, ["report", str(run.path), "--no-files"])
    assert result.exit_code == 2 and "schema_version 99" in result.output
    assert "Traceback" not in result.output
    (run.path / DB_NAME).unlink()
    listed = CliRunner().invoke(app, ["runs", str(tmp_path)])
    assert listed.exit_code == 0 and listed.exception is None, listed.output


# -- D14: a truncated run.json ---------------------------------------------------------------------
def test_a_truncated_run_json_is_read_from_the_index_copy(tmp_path: Path) -> None:
    run = _run(tmp_path / "r")
    run.run_json.write_bytes(run.run_json.read_bytes()[:300])
    summary = summarize_run(run.path, n_boot=200)  # main: JSONDecodeError
    assert summary.name == "t" and summary.arm("a") is not None
    assert any("run.json is damaged" in w and "copy kept in bakeoff.sqlite" in w for w in summary.warnings)
    resume = load_resume(run.path)
    arms = [plan_module.PlannedArm(a, SimAdapter(), i) for i, a in enumerate(resume.config.arms)]
    resume.apply(plan_module.Plan(resume.config, arms, [], {}, []))  # resuming writes run.json whole again
    assert json.loads(run.run_json.read_text())["config"]["name"] == "t"


def test_a_truncated_run_json_without_an_index_copy(tmp_path: Path) -> None:
    run = _run(tmp_path / "r")
    run.run_json.write_bytes(run.run_json.read_bytes()[:300])
    (run.path / DB_NAME).unlink()
    with pytest.raises(ConfigError, match=r"run.json is damaged .*holds no copy"):
        load_resume(run.path)
    summary = summarize_run(run.path, n_boot=200)  # the samples are intact: the report still reads them
    assert summary.arm("a") is not None and summary.arm("a").n == 3  # type: ignore[union-attr]
    assert any("run.json is damaged" in w for w in summary.warnings)


# -- D18: append-only bookkeeping ------------------------------------------------------------------
def test_arm_records_are_appended_and_run_json_is_written_only_at_the_end(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    arms = "\n".join(f"  - {{name: a{i}, engine: sim, model: sim}}" for i in range(40))
    plan = plan_module.plan_run(parse_bakeoff(f"name: big\narms:\n{arms}\nworkload: {{prompts: [prose]}}\n"))
    monkeypatch.setattr(protocol, "_run_arm", lambda plan, planned, run, pass_index, *a: ArmAttempt(
        status="failed" if planned.arm.name == "a7" else "ok", pass_index=pass_index, boot_s=1.0,
        error="boom" if planned.arm.name == "a7" else None))
    run = RunDir(tmp_path / "r")
    run.write_record(run_record(plan))
    writes: list[float] = []
    real_write = RunDir.write_record  # the one way run.json is written

    def write_record(self: RunDir, record: RunRecord) -> None:
        writes.append(1)
        real_write(self, record)

    monkeypatch.setattr(RunDir, "write_record", write_record)
    protocol.run_plan(plan, run)
    assert len(writes) == 1  # main: one rewrite of the whole run.json (and its index copy) per arm
    assert len(run.records_path.read_text().splitlines()) == 40
    summary = summarize_run(run.path, n_boot=200)
    assert [(f.arm, f.error) for f in summary.failures] == [("a7", "boom")]
    assert json.loads(run.run_json.read_text())["arm_records"]["a7"][0]["status"] == "failed"


def test_records_of_an_older_run_move_to_the_append_only_file_on_resume(tmp_path: Path) -> None:
    run = _run(tmp_path / "r")
    run.update_record(arm_records={"a": [{"status": "failed", "pass": 0, "error": "old"}]})
    run.append_attempt("a", ArmAttempt.model_validate({"status": "ok", "pass": 0}))
    assert [r.status for r in run.arm_records()["a"]] == ["failed", "ok"]
    assert [r.status for r in RunDir(run.path, create=False).arm_records()["a"]] == ["failed", "ok"]


# -- D13: file-system errors -------------------------------------------------------------------------
def test_an_out_path_under_a_file_is_a_one_line_error_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "outfile"
    blocker.write_text("")
    with pytest.raises(RunDirError, match=r"cannot create the run directory .*outfile/x: Not a directory"):
        RunDir(blocker / "x")
    bakeoff = tmp_path / "b.yaml"
    bakeoff.write_text(CONFIG)
    for out in (blocker, blocker / "sub"):
        result = CliRunner().invoke(app, ["run", str(bakeoff), "--out", str(out)])
        assert result.exit_code == 2, result.output
        assert "cannot create the run directory" in result.output and "outfile" in result.output


def test_a_full_disk_mid_run_is_an_error_naming_the_file_and_keeps_what_was_stored(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    run = _run(tmp_path / "r", reps=1)
    before = run.samples_path.read_bytes()

    real_write = os.write

    def full(fd: int, data: Any) -> int:  # half the line reaches the disk, then it is full
        if len(data) > 8:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(RunDirError, match=r"cannot write .*samples.jsonl: No space left on device"):
        run.append(Sample(arm="a", engine="sim", prompt="prose", mode="greedy", rep=5))
    monkeypatch.undo()
    assert run.samples_path.read_bytes() == before  # no torn line left behind
    assert len(read_samples(run.path)) == 2 and len(run.db.samples(run.run_id)) == 2
    monkeypatch.setattr(os, "write", full)
    with pytest.raises(RunDirError, match=r"cannot write .*arm_records\.jsonl"):
        run.append_attempt("a", ArmAttempt.model_validate({"status": "ok"}))
    monkeypatch.undo()
    assert not run.records_path.read_bytes()  # nothing half-written


def test_arm_names_are_capped_and_an_over_long_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"at most {ARM_NAME_MAX}"):
        parse_bakeoff(f"arms: [{{name: {'x' * 300}, engine: sim, model: sim}}]\n")
    with pytest.raises(RunDirError, match="cannot create the directory of arm"):
        RunDir(tmp_path / "r").arm_dir("y" * 300)


def test_a_read_only_run_directory_is_an_error_naming_the_file(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    run = _run(tmp_path / "r", reps=1)
    real_open = Path.open

    def read_only(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if any(c in mode for c in "wa+x"):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        return real_open(self, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "open", read_only)
    with pytest.raises(RunDirError, match=r"cannot write .*run.json: Read-only file system"):
        run.update_record(finished_at=2.0)
