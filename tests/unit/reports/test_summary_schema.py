"""reports/summary_schema.py and ``bakeoff schema``: the published schemas of summary.json and a sample line.

Every committed summary.json under evidence/ (run summaries of schema 1 and 2, and a merged report) is validated
against the schema ``bakeoff schema summary`` prints; so is a summary this bakeoff writes now.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from bakeoff.core.cli import app
from bakeoff.core.config.schema import BakeoffFile
from bakeoff.core.reports.merge import MERGE_SCHEMA
from bakeoff.core.reports.model import REPORT_SCHEMA_VERSION, summarize_run
from bakeoff.core.reports.summary_schema import summary_json_schema
from bakeoff.core.results.sample import SCHEMA_VERSION, sample_json_schema

ROOT = Path(__file__).resolve().parents[3]
SUMMARIES = sorted(ROOT.glob("evidence/**/summary.json"))
Maker = Callable[..., Path]
runner = CliRunner()


@cache
def _validator() -> jsonschema.Draft202012Validator:
    schema = summary_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _valid(doc: dict[str, Any]) -> bool:
    return bool(_validator().is_valid(doc))


def _committed(kind: str, version: int | None = None) -> dict[str, Any]:
    for path in SUMMARIES:
        doc: dict[str, Any] = json.loads(path.read_text())
        if doc.get("kind") == kind and (version is None or doc.get("schema_version") == version):
            return doc
    raise AssertionError(f"no committed summary.json of kind {kind} version {version}")


@pytest.mark.parametrize("path", SUMMARIES, ids=lambda p: str(p.relative_to(ROOT / "evidence")))
def test_every_committed_summary_validates(path: Path) -> None:
    doc = json.loads(path.read_text())
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in _validator().iter_errors(doc)]
    assert errors == [], path


def test_the_committed_summaries_span_both_kinds_and_both_versions() -> None:
    seen = {(d.get("kind"), d.get("schema_version")) for d in (json.loads(p.read_text()) for p in SUMMARIES)}
    assert {("bakeoff-run-summary", 1), ("bakeoff-run-summary", REPORT_SCHEMA_VERSION),
            ("bakeoff-merge", MERGE_SCHEMA)} <= seen


def test_a_summary_written_now_validates_and_carries_its_version(make_run: Maker) -> None:
    path = make_run({"base": 100.0, "fast": 130.0}, speculative={"fast": {"method": "ngram"}},
                    acceptance={"fast": 0.7}, swept={"fast": {"speculative.n_max": 4}})
    doc = json.loads(summarize_run(path).model_dump_json())
    assert doc["schema_version"] == REPORT_SCHEMA_VERSION and "path" not in doc
    assert doc["sweep"]["rows"][1]["acceptance"]["arm"] == "fast"  # a row's acceptance, as ArmAcceptance now
    assert _valid(doc)


def test_both_shapes_of_a_rows_acceptance_read_and_no_other() -> None:
    doc = next(d for d in (json.loads(p.read_text()) for p in SUMMARIES)
               if d.get("sweep") and any(set(r.get("acceptance") or {}) == {"drafted", "accepted", "drafts", "rate",
                                                                             "mean_accepted_len"}
                                         for r in d["sweep"]["rows"]))
    assert _valid(doc)  # the shape before ArmAcceptance, in a committed schema-2 summary
    row = next(r for r in doc["sweep"]["rows"] if r.get("acceptance"))
    row["acceptance"] = {"drafted": 10, "accepted": 5, "drafts": 0, "rate": "half", "mean_accepted_len": None}
    assert not _valid(doc)


def test_a_summary_without_schema_version_is_version_one() -> None:
    doc = _committed("bakeoff-run-summary", 1)
    del doc["schema_version"]
    assert _valid(doc)
    merged = _committed("bakeoff-merge")
    del merged["schema_version"]
    assert _valid(merged)


def _mutations() -> list[tuple[str, Callable[[dict[str, Any]], None]]]:
    def set_at(*path: Any, value: Any) -> Callable[[dict[str, Any]], None]:
        def change(doc: dict[str, Any]) -> None:
            node = doc
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
        return change

    def drop(key: str) -> Callable[[dict[str, Any]], None]:
        return lambda doc: doc.pop(key)

    return [
        ("newer version", set_at("schema_version", value=REPORT_SCHEMA_VERSION + 1)),
        ("unknown kind", set_at("kind", value="bakeoff-something")),
        ("no run id", drop("run_id")),
        ("ratio as text", set_at("comparisons", 0, "ratio", "estimate", value="fast")),
        ("no such verdict", set_at("comparisons", 0, "verdict", value="probably faster")),
        ("arms not a list", set_at("arms", value={"a": 1})),
    ]


@pytest.mark.parametrize(("what", "change"), _mutations(), ids=[m[0] for m in _mutations()])
def test_the_summary_schema_refuses_a_broken_summary(what: str, change: Callable[[dict[str, Any]], None]) -> None:
    doc = copy.deepcopy(_committed("bakeoff-run-summary", REPORT_SCHEMA_VERSION))
    assert doc["comparisons"], "the first committed summary of this version must hold a comparison"
    change(doc)
    assert not _valid(doc), what


def test_a_merged_report_is_checked_inside_too() -> None:
    merged = _committed("bakeoff-merge")
    broken = copy.deepcopy(merged)
    broken["summary"]["arms"] = "none"
    assert not _valid(broken)
    broken = copy.deepcopy(merged)
    broken["schema_version"] = MERGE_SCHEMA + 1
    assert not _valid(broken)


@pytest.mark.parametrize(("args", "schema"), [
    ([], BakeoffFile.model_json_schema()),
    (["config"], BakeoffFile.model_json_schema()),
    (["samples"], sample_json_schema()),
    (["summary"], summary_json_schema()),
])
def test_bakeoff_schema_prints_each_schema(args: list[str], schema: dict[str, Any]) -> None:
    result = runner.invoke(app, ["schema", *args])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == schema


def test_the_result_schemas_say_their_version() -> None:
    assert sample_json_schema()["schema_version"] == SCHEMA_VERSION
    assert summary_json_schema()["schema_version"] == REPORT_SCHEMA_VERSION


def test_bakeoff_schema_of_an_unknown_file_names_the_known_ones() -> None:
    result = runner.invoke(app, ["schema", "run"])
    assert result.exit_code == 2 and "config, samples, summary" in result.output
