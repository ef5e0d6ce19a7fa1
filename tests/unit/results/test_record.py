"""run.json through the typed RunRecord: old shapes read, newer versions refused, one write path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bakeoff.core.common.errors import NewerRunRecordError, NewerSchemaError, RunRecordError
from bakeoff.core.results.record import RUN_SCHEMA_VERSION, RunRecord, parse_run_record
from bakeoff.core.results.store import RunDir

FIXTURE = Path(__file__).parents[2] / "fixtures" / "reports" / "llamacpp-run"


def _copy_fixture(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    return run


def test_the_committed_version_1_run_reads_as_a_typed_record(tmp_path: Path) -> None:
    raw = json.loads((FIXTURE / "run.json").read_text())
    assert raw["schema_version"] == 1 and "run_id" not in raw  # the old shape: untyped, no recorded id
    record = RunDir.open(FIXTURE).read_record()
    assert record.schema_version == RUN_SCHEMA_VERSION
    assert record.config is not None and record.name == "stats-real"
    assert record.arm_names == ["spec-off", "spec-off-twin", "ngram-mod", "draft"]
    assert record.baseline == "spec-off" and record.seed == 7 and len(record.orders) == 3
    assert record.engines["draft"].engine == "llamacpp"
    attempt = record.arm_records["draft"][0]  # stored with "pass", read as pass_index
    assert attempt.status == "ok" and attempt.pass_index == 0 and attempt.boot_s and attempt.boot_s > 1
    assert [a.pass_index for a in record.arm_records["draft"]] == [0, 1, 2]
    assert record.failed_arms() == []


def test_a_run_json_without_schema_version_or_with_keys_it_does_not_model_reads_and_keeps_them() -> None:
    record = parse_run_record({"config": {"name": "x", "arms": [{"name": "a", "engine": "fake", "model": "m"}]},
                               "orders": [["a"]], "someone_elses": {"kept": True},
                               "arm_records": {"a": [{"status": "failed", "pass": 1, "retired_field": {"g": 1}}]}})
    assert record.name == "x" and record.failed_arms() == ["a"]
    out = record.to_json()
    assert out["someone_elses"] == {"kept": True}  # a feature's own key survives a rewrite
    assert out["arm_records"]["a"][0] == {"status": "failed", "pass": 1, "retired_field": {"g": 1}}


def test_config_keys_of_an_older_bakeoff_are_dropped_with_a_warning_not_a_refusal() -> None:
    warnings: list[str] = []
    record = parse_run_record({"schema_version": 1, "config": {
        "name": "old", "arms": [{"name": "a", "engine": "fake", "model": "m", "launch": "native", "retired_knob": 3}]}},
        "old/run.json", warnings)
    assert record.arm_names == ["a"]
    assert warnings and "old/run.json" in warnings[0] and "arms.0.retired_knob" in warnings[0]


def test_a_run_json_from_a_newer_bakeoff_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    run = _copy_fixture(tmp_path)
    data = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**data, "schema_version": RUN_SCHEMA_VERSION + 1}))
    with pytest.raises(NewerRunRecordError, match=rf"run.json: schema_version {RUN_SCHEMA_VERSION + 1}, this "
                                                  rf"bakeoff reads run records up to {RUN_SCHEMA_VERSION}; "
                                                  r"upgrade bakeoff"):
        RunDir.open(run).read_record()
    assert issubclass(NewerRunRecordError, NewerSchemaError)  # callers that refuse newer samples refuse this too

    from bakeoff.core.cli import app

    result = CliRunner().invoke(app, ["report", str(run), "--no-files"])
    assert result.exit_code == 2 and "upgrade bakeoff to read this run" in result.output


def test_a_field_of_the_wrong_type_is_named() -> None:
    with pytest.raises(RunRecordError, match=r"run.json: orders.0: "):
        parse_run_record({"orders": ["not-a-list"]})
    with pytest.raises(RunRecordError, match=r"run.json: config.arms.0.settings.ctx: "):
        arm = {"name": "a", "engine": "f", "model": "m", "settings": {"ctx": "big"}}
        parse_run_record({"config": {"name": "x", "arms": [arm]}})
    with pytest.raises(RunRecordError, match=r"schema_version 'two' is not a whole number"):
        parse_run_record({"schema_version": "two"})


def test_writing_stamps_the_record_version_and_run_id_and_round_trips(tmp_path: Path) -> None:
    run = _copy_fixture(tmp_path)
    rd = RunDir.open(run)
    record = rd.read_record()
    rd.write_record(record.model_copy(update={"finished_at": 123.0}))
    raw = json.loads((run / "run.json").read_text())
    assert raw["schema_version"] == RUN_SCHEMA_VERSION and raw["finished_at"] == 123.0
    assert raw["run_id"] == "20261129-204632-stats-real"  # the id its samples carry, now recorded
    again = RunDir.open(run).read_record()
    assert again.model_dump() == {**record.model_dump(), "finished_at": 123.0, "run_id": raw["run_id"]}


def test_update_record_validates_the_change(tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "r")
    rd.write_record(RunRecord(orders=[["a"]]))
    assert rd.update_record(resumed_at=[1.0]).resumed_at == [1.0]
    with pytest.raises(RunRecordError, match="resumed_at"):
        rd.update_record(resumed_at="yesterday")
    assert rd.read_record().resumed_at == [1.0]  # a refused change leaves run.json as it was


def test_an_empty_directory_reads_as_an_empty_record_and_opening_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "not-there"
    assert RunDir.open(missing).read_record() == RunRecord()
    assert not missing.exists()


REPO = Path(__file__).resolve().parents[3]
COMMITTED_RUNS = sorted(p.parent for root in ("evidence", "tests/fixtures") for p in (REPO / root).rglob("run.json"))


@pytest.mark.parametrize("run", COMMITTED_RUNS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_committed_run_directory_reads_as_a_typed_record(run: Path) -> None:
    rd = RunDir.open(run)
    record = rd.read_record()
    assert record.config is not None and record.arm_names and not rd.warnings
    assert set(record.arm_records) <= set(record.arm_names)
    assert all(a.status for attempts in record.arm_records.values() for a in attempts)
