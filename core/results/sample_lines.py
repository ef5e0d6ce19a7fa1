"""Reading ``samples.jsonl`` (and ``arm_records.jsonl``) line by line, whatever a crash or a newer bakeoff left.

The file is read as bytes and each line decoded on its own: one torn or non-UTF-8 line is counted, never
a crash and never a silent loss of the lines around it. Lines written by a newer bakeoff of the same
sample schema may carry fields this one does not know; they are read with those fields ignored (and
named). A line of a newer *schema* is refused with a clear error: its fields may mean something else.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common.errors import NewerSchemaError
from .sample import SCHEMA_VERSION, Sample

__all__ = ["Line", "LineScan", "parse_sample", "read_json_lines", "scan_lines"]


@dataclass
class Line:
    """One readable sample line: its text (what the index hashes) and the sample it holds."""

    number: int
    text: str
    sample: Sample


@dataclass
class LineScan:
    """What one pass over samples.jsonl found."""

    good: list[Line] = field(default_factory=list)
    bad: list[int] = field(default_factory=list)  # 1-based numbers of unreadable lines
    bad_bytes: list[bytes] = field(default_factory=list)
    other_runs: Counter[str] = field(default_factory=Counter)  # run id -> lines of another run
    other_bytes: list[bytes] = field(default_factory=list)
    unknown_fields: set[str] = field(default_factory=set)


def parse_sample(text: str, unknown: set[str] | None = None) -> Sample:
    """One sample from its JSON text, reading forward: unknown fields of a known schema are dropped.

    :param unknown: receives the names of the fields that were dropped.
    :raises NewerSchemaError: the line declares a newer sample schema than this bakeoff reads.
    :raises ValueError: not a JSON object, or not a valid sample.
    """
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    version = data.get("schema_version", 1)
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise NewerSchemaError(f"sample schema_version {version}: this bakeoff reads up to {SCHEMA_VERSION}; "
                               f"upgrade bakeoff to read this run")
    extra = set(data) - set(Sample.model_fields)
    if extra:
        if unknown is not None:
            unknown.update(extra)
        data = {k: v for k, v in data.items() if k not in extra}
    return Sample.model_validate(data)


def scan_lines(path: Path, run_id: str) -> LineScan:
    """Every line of a samples.jsonl, sorted into readable lines of this run, unreadable ones and others'.

    A line with an empty ``run_id`` (a sample stored without one) counts as this run's.

    :raises NewerSchemaError: a line of a newer sample schema, named by file and line number.
    :raises OSError: the file exists but cannot be read.
    """
    scan = LineScan()
    if not path.exists():
        return scan
    for number, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
            sample = parse_sample(text, scan.unknown_fields)
        except NewerSchemaError as exc:
            raise NewerSchemaError(f"{path} line {number}: {exc}") from None
        except ValueError:  # UnicodeDecodeError, JSONDecodeError and ValidationError are ValueErrors
            scan.bad.append(number)
            scan.bad_bytes.append(raw)
            continue
        if sample.run_id and sample.run_id != run_id:
            scan.other_runs[sample.run_id] += 1
            scan.other_bytes.append(raw)
            continue
        scan.good.append(Line(number, text, sample))
    return scan


def read_json_lines(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The JSON objects of an append-only .jsonl file and the number of unreadable lines."""
    out: list[dict[str, Any]] = []
    bad = 0
    if not path.exists():
        return out, bad
    for raw in path.read_bytes().split(b"\n"):
        if not raw.strip():
            continue
        try:
            item = json.loads(raw.decode("utf-8"))
        except ValueError:
            bad += 1
            continue
        if isinstance(item, dict):
            out.append(item)
        else:
            bad += 1
    return out, bad
