"""results/sample.py: Sample's named sections, a line's flat layout, and the published schema of a line.

Every committed samples.jsonl under evidence/ is validated against the schema ``bakeoff schema samples`` prints,
so a field renamed, retyped or made required without a new schema_version fails here on files people hold.
"""

from __future__ import annotations

import copy
import json
import shutil
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from bakeoff.core.reports.export import EXPORT_NAMES, export_run
from bakeoff.core.results.sample import SAMPLE_SECTIONS, SCHEMA_VERSION, Sample, sample_json_schema
from bakeoff.core.results.sample_lines import parse_sample

ROOT = Path(__file__).resolve().parents[3]
SAMPLE_FILES = sorted(ROOT.glob("evidence/**/samples.jsonl"))


@cache
def _validator() -> jsonschema.Draft202012Validator:
    schema = sample_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _errors(line: dict[str, Any]) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in _validator().iter_errors(line)]


def test_every_field_is_in_one_section_in_the_order_of_a_line() -> None:
    names = [n for n, _ in SAMPLE_SECTIONS]
    assert len(set(names)) == len(names)
    assert {"stream", "server", "acceptance", "point", "load", "multi_turn", "gpu"} <= set(names)
    declared = [f for _, section in SAMPLE_SECTIONS for f in section.model_fields]
    assert declared == list(Sample.model_fields)  # no field twice, none outside a section, in section order


def test_a_line_is_flat_and_keeps_the_key_order_of_committed_lines() -> None:
    line = json.loads(Sample(arm="a", engine="e", prompt="p", mode="greedy", rep=0).model_dump_json())
    assert list(line) == list(Sample.model_fields)
    assert all(not isinstance(v, dict) or k in ("acceptance_unavailable", "acceptance_derived") for k, v in
               line.items())  # flat: no section nests its fields
    order = {name: i for i, name in enumerate(Sample.model_fields)}
    assert SAMPLE_FILES
    for path in SAMPLE_FILES:
        first = list(_lines(path)[0])
        assert [order[k] for k in first] == sorted(order[k] for k in first), path  # the same relative order


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: str(p.relative_to(ROOT / "evidence")))
def test_every_committed_sample_line_validates(path: Path) -> None:
    lines = _lines(path)
    assert lines
    for number, line in enumerate(lines, start=1):
        assert _errors(line) == [], f"{path} line {number}"
        parse_sample(json.dumps(line))  # and the reader reads it


def _committed_line() -> dict[str, Any]:
    return _lines(SAMPLE_FILES[0])[0]


def test_a_line_without_schema_version_is_version_one() -> None:
    line = _committed_line()
    del line["schema_version"]
    assert _errors(line) == []
    assert parse_sample(json.dumps(line)).schema_version == 1 == SCHEMA_VERSION


@pytest.mark.parametrize(("change", "where"), [
    ({"schema_version": SCHEMA_VERSION + 1}, "schema_version"),
    ({"ttft_s": "fast"}, "ttft_s"),
    ({"status": "maybe"}, "status"),
    ({"n_first_source": "guessed"}, "n_first_source"),
    ({"gpu": {"energy_j": "lots"}}, "gpu"),
    ({"decode_rate": 12.0}, ""),  # a key no section declares
])
def test_the_schema_refuses_what_the_line_must_not_hold(change: dict[str, Any], where: str) -> None:
    line = _committed_line() | change
    errors = _errors(line)
    assert errors and errors[0].startswith(f"{where}:"), errors


def test_a_line_missing_a_required_field_is_refused() -> None:
    line = copy.deepcopy(_committed_line())
    del line["arm"]
    assert any("'arm' is a required property" in e for e in _errors(line))


def test_the_schema_names_each_section_with_its_fields() -> None:
    schema = sample_json_schema()
    assert schema["schema_version"] == SCHEMA_VERSION and schema["additionalProperties"] is False
    assert list(schema["properties"]) == list(Sample.model_fields)  # every key, in a line's order
    sections = [schema["$defs"][part["$ref"].rsplit("/", 1)[1]] for part in schema["allOf"]]
    assert [s["title"] for s in sections] == [n for n, _ in SAMPLE_SECTIONS]
    stream = next(s for s in sections if s["title"] == "stream")
    assert "decode_tps" in stream["properties"] and stream["description"].startswith("The client's own account")
    assert "(N - n_first)" in stream["properties"]["decode_tps"]["description"]


def test_the_sections_table_in_the_docs_is_the_codes() -> None:
    rows = [line.split("|")[1:3] for line in (ROOT / "docs" / "schemas.md").read_text().splitlines()
            if line.startswith("| `")]
    table = [(name.strip().strip("`"), [f.strip().strip("`") for f in fields.split(",")]) for name, fields in rows]
    assert table == [(name, list(section.model_fields)) for name, section in SAMPLE_SECTIONS]


def test_the_export_keeps_one_flat_column_per_field(tmp_path: Path) -> None:
    """bakeoff export's samples table: every field a column of its own, in a line's order, sections never nested."""
    run = tmp_path / "run"
    shutil.copytree(ROOT / "evidence" / "examples" / "structured-cpu" / "run", run)
    (path,) = [p for p in export_run(run, "jsonl", tmp_path / "out") if p.name.startswith("samples")]
    row = json.loads(path.read_text().splitlines()[0])
    own = [k for k in row if not k.startswith(("arm.", "engine.", "gpu.")) and k != "sample_flag_names"]  # derived
    assert own == [EXPORT_NAMES.get(f, f) for f in Sample.model_fields if f != "gpu"]
    line = _lines(run / "samples.jsonl")[0]
    assert all(row[EXPORT_NAMES.get(k, k)] == v for k, v in line.items() if k != "gpu" and not isinstance(v, dict))
