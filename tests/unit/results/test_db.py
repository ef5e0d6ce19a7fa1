"""The run's SQLite index: one write path with samples.jsonl, no duplicates, crash recovery, resume keys,
owner-only files, and ``bakeoff runs``."""

from __future__ import annotations

import json
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bakeoff.core.cli import app
from bakeoff.core.cli.runs import list_runs
from bakeoff.core.common.errors import ConfigError, DuplicateSampleError
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.results.db import DB_NAME, RunDB
from bakeoff.core.results.record import RunRecord, failed_arms
from bakeoff.core.results.sample import Sample
from bakeoff.core.results.store import RunDir, read_samples
from bakeoff.core.run.plan import Plan, PlannedArm
from bakeoff.core.run.resume import load_resume
from bakeoff.engines.sim import SimAdapter

CONFIG = """\
name: t
arms:
  - {name: a, engine: sim, model: sim}
  - {name: b, engine: sim, model: sim, options: {tokens_per_event: 2}}
workload: {prompts: [prose], reps: 2, passes: 2}
"""


def _sample(run: RunDir, arm: str = "a", rep: int = 0, **kw: Any) -> Sample:
    return Sample(run_id=run.run_id, arm=arm, engine="sim", prompt="prose", mode="greedy", rep=rep, **kw)


def _lines(run: RunDir) -> list[str]:
    return run.samples_path.read_text().splitlines()


def test_append_writes_the_line_and_the_row(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r")
    run.append(_sample(run, decode_tps=50.0, completion_tokens=64))
    run.append(_sample(run, rep=1, status="error", error="boom", flags=["timeout"]))
    assert len(_lines(run)) == 2
    stored = run.db.samples(run.run_id)
    assert [(s.rep, s.status) for s in stored] == [(0, "ok"), (1, "error")]
    assert stored == read_samples(run.path)
    with sqlite3.connect(run.path / DB_NAME) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT decode_tps, flags FROM samples WHERE rep=0").fetchone() == (50.0, "[]")


def test_a_second_sample_for_a_point_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r")
    run.append(_sample(run))
    with pytest.raises(DuplicateSampleError, match="already stored"):
        run.append(_sample(run, decode_tps=99.0))
    assert len(_lines(run)) == 1 and len(run.db.samples(run.run_id)) == 1
    run.append(_sample(run, arm="b"))  # another arm's point is not a duplicate
    assert len(_lines(run)) == 2


def test_a_concurrency_point_holds_one_sample_per_stream(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r")
    for _ in range(3):
        run.append(_sample(run, concurrency=3, batch_id="x"))
    with pytest.raises(DuplicateSampleError):
        run.append(_sample(run, concurrency=3, batch_id="y"))
    assert run.done_keys() == {("a", "prose", "greedy", 0, 0, None, 3)}


def test_equal_lines_are_reconciled_as_a_multiset(tmp_path: Path) -> None:
    """Two streams of a batch can write byte-equal lines; each is its own sample."""
    run = RunDir(tmp_path / "r")
    line = _sample(run, concurrency=2, status="error", error="HTTP 503").model_dump_json() + "\n"
    run.append(Sample.model_validate_json(line))
    with run.samples_path.open("a") as f:
        f.write(line)  # the second stream's line, written just before a crash
    run.done_keys()
    assert len(run.db.samples(run.run_id)) == 2
    assert run.db.reconcile(run.run_id, _lines(run)) == 0


def test_a_line_the_index_missed_is_reconciled_before_resume(tmp_path: Path) -> None:
    """A crash between the jsonl fsync and the commit leaves a line without a row; resume adds it back."""
    run = RunDir(tmp_path / "r")
    run.append(_sample(run))
    orphan = _sample(run, rep=1)
    with run.samples_path.open("a") as f:
        f.write(orphan.model_dump_json() + "\n")
        f.write('{"schema_version": 1, "arm": "a", "eng')  # torn by the crash
    assert len(run.db.samples(run.run_id)) == 1
    assert run.done_keys() == {("a", "prose", "greedy", 0, 0), ("a", "prose", "greedy", 1, 0)}
    assert len(run.db.samples(run.run_id)) == 2
    assert run.db.reconcile(run.run_id, _lines(run)) == 0  # idempotent
    with pytest.raises(DuplicateSampleError):
        run.append(orphan)


def test_append_after_a_torn_line_keeps_the_new_line_whole(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r")
    run.samples_path.write_text('{"arm": "a", "tor')
    run.append(_sample(run))
    samples = read_samples(run.path)
    assert [s.arm for s in samples] == ["a"]
    assert _lines(run)[0] == '{"arm": "a", "tor'  # the fragment is kept, not rewritten


def test_an_unusable_index_never_costs_a_sample(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r")
    (run.path / DB_NAME).mkdir()  # SQLite cannot open a directory
    run.append(_sample(run))
    run.append(_sample(run, rep=1))
    assert [s.rep for s in read_samples(run.path)] == [0, 1]


def test_run_dir_and_index_are_owner_only(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r")
    run.write_record(RunRecord.model_validate({
        "config": {"name": "t", "arms": [{"name": "a", "engine": "sim", "model": "m"}]},
                   "started_at": 1.0}))
    run.append(_sample(run))
    assert stat.S_IMODE(run.path.stat().st_mode) == 0o700
    assert stat.S_IMODE((run.path / DB_NAME).stat().st_mode) == 0o600


def test_write_run_is_mirrored_in_the_runs_table(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r")
    run.write_record(RunRecord.model_validate({
        "config": {"name": "t", "arms": [{"name": "a", "engine": "sim", "model": "m"}]}, "started_at": 5.0,
                   "tool": {"version": "9"}}))
    run.update_record(finished_at=7.0, arm_records={"a": [{"status": "failed", "pass": 0}]})
    summary = run.db.summary(run.run_id, run.path)
    assert (summary.name, summary.started_at, summary.finished_at) == ("t", 5.0, 7.0)
    assert summary.arms == ["a"] and summary.failed_arms == ["a"]


def test_failed_arms_looks_at_the_latest_attempt_of_each_pass() -> None:
    record = RunRecord.model_validate({"arm_records": {
        "a": [{"status": "failed", "pass": 0}, {"status": "ok", "pass": 0}],
        "b": [{"status": "ok", "pass": 0}, {"status": "failed", "pass": 1}],
        "c": [{"status": "failed", "pass": 0}, {"status": "skipped (already complete)", "pass": 0}],
    }})
    assert failed_arms(record.arm_records) == record.failed_arms() == ["b"]


# -- resume --------------------------------------------------------------------------------------
def _started_run(tmp_path: Path) -> RunDir:
    config = parse_bakeoff(CONFIG)
    run = RunDir(tmp_path / "runs" / "r1")
    run.write_record(RunRecord.model_validate({
        "config": config.model_dump(mode="json"), "orders": [["b", "a"], ["a", "b"]],
                   "started_at": 1.0}))
    run.append(_sample(run))
    return run


def _plan(config: Any) -> Plan:
    arms = [PlannedArm(a, SimAdapter(), i) for i, a in enumerate(config.arms)]
    return Plan(config, arms, [], {}, [["a", "b"], ["a", "b"]])


def test_resume_uses_the_recorded_config_orders_and_stored_samples(tmp_path: Path) -> None:
    run = _started_run(tmp_path)
    resume = load_resume(run.path)
    assert resume.done == {("a", "prose", "greedy", 0, 0)}
    assert [a.name for a in resume.config.arms] == ["a", "b"]
    plan = _plan(resume.config)
    resume.apply(plan)
    assert plan.orders == [["b", "a"], ["a", "b"]]
    meta = run.read_record().to_json()
    assert meta["finished_at"] is None and len(meta["resumed_at"]) == 1


def test_resume_accepts_the_same_file_and_refuses_a_different_one(tmp_path: Path) -> None:
    run = _started_run(tmp_path)
    same = tmp_path / "same.yaml"
    same.write_text(CONFIG)
    assert load_resume(run.path, same).config.name == "t"
    changed = tmp_path / "changed.yaml"
    changed.write_text(CONFIG.replace("reps: 2", "reps: 3"))
    with pytest.raises(ConfigError, match="differs from the configuration recorded"):
        load_resume(run.path, changed)


def test_resume_refuses_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no run\.json"):
        load_resume(tmp_path)


def test_resume_refuses_orders_that_do_not_match_the_arms(tmp_path: Path) -> None:
    run = _started_run(tmp_path)
    run.update_record(orders=[["a", "zzz"]])
    resume = load_resume(run.path)
    with pytest.raises(ConfigError, match="pass orders"):
        resume.apply(_plan(resume.config))


# -- bakeoff runs --------------------------------------------------------------------------------
def test_runs_lists_indexed_and_legacy_runs_with_their_state(tmp_path: Path) -> None:
    base = tmp_path / "runs"
    done = RunDir(base / "20250101-000000-done")
    done.write_record(RunRecord.model_validate({
        "config": {"name": "done", "arms": [{"name": "a", "engine": "sim", "model": "m"}]},
                    "started_at": 1.0, "finished_at": 2.0}))
    done.append(_sample(done))
    legacy = base / "20250102-000000-old"  # written before the index existed: jsonl only
    legacy.mkdir(parents=True)
    arms = [{"name": "a", "engine": "sim", "model": "m"}]
    (legacy / "run.json").write_text(json.dumps({"config": {"name": "old", "arms": arms}, "started_at": 3.0}))
    sample = Sample(run_id=legacy.name, arm="a", engine="sim", prompt="p", mode="greedy", rep=0, status="error")
    (legacy / "samples.jsonl").write_text(sample.model_dump_json() + "\n")
    (base / "not-a-run").mkdir()

    runs = list_runs(base)
    assert [(r.name, r.samples, r.errors, r.indexed) for r in runs] == [("done", 1, 0, True), ("old", 1, 1, False)]
    assert not (legacy / DB_NAME).exists()  # listing never writes

    result = CliRunner().invoke(app, ["runs", str(base)])
    assert result.exit_code == 0, result.output
    assert "finished" in result.output and "incomplete" in result.output
    assert f"bakeoff run --resume {legacy}" in result.output
    rows = json.loads(CliRunner().invoke(app, ["runs", str(base), "--json"]).output)
    assert [r["state"] for r in rows] == ["finished", "incomplete"]


def test_runs_on_an_empty_directory_says_so(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["runs", str(tmp_path)])
    assert result.exit_code == 0 and "no runs" in result.output


def test_db_reads_an_existing_index_without_a_run_dir_object(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r")
    run.append(_sample(run))
    assert RunDB(run.path).points(run.run_id) == [("a", "prose", "greedy", 0, 0, None, None)]


def test_a_reader_sees_what_a_writer_with_the_index_open_committed(tmp_path: Path) -> None:
    # A finished index is read as an immutable file; while a writer holds it open (a run going on), the
    # newest samples live in the -wal file only, and the reader must read through it.
    run = RunDir(tmp_path / "r")
    run.append(_sample(run, rep=0))
    with run.db._connect():  # the writer keeps the index open, so the next commit is not checkpointed
        run.append(_sample(run, rep=1))
        assert (run.path / f"{DB_NAME}-wal").exists()
        assert len(run.db.rows(run.run_id)) == 2
    assert not (run.path / f"{DB_NAME}-wal").exists()  # the last writer checkpointed and removed it
    assert len(run.db.rows(run.run_id)) == 2
