"""The published JSON schema of ``summary.json`` (``bakeoff schema summary``), drawn from the models that write it.

A summary.json is one of two documents, told apart by ``kind``: a run's summary (:class:`RunSummary`,
``bakeoff-run-summary``, written by every report) or a merged report (:class:`MergedReport`, ``bakeoff-merge``,
written by ``bakeoff merge``). Each carries its own ``schema_version``; a file without one is version 1.

The schema is what a reader may rely on, for every version this bakeoff has written: a field added later has a
default, so an older file without it stays valid, and the figures bakeoff computes as it writes (a comparison's
``passes_to_decide``) are listed read-only, never required. One shape changed without a new version: an n-max,
depth or concurrency row's ``acceptance`` was ``{drafted, accepted, drafts, rate, mean_accepted_len}`` in the
summaries written before the arm's acceptance became one model (``ArmAcceptance``); both shapes are valid.
"""

from __future__ import annotations

from typing import Any

from .merge import MERGE_SCHEMA, MergedReport
from .model import REPORT_SCHEMA_VERSION, RunSummary

__all__ = ["summary_json_schema"]

_REF = "#/$defs/{model}"

# The row acceptance of schema-2 summaries written before ArmAcceptance (core/reports/points.py's Acceptance).
_ROW_ACCEPTANCE_BEFORE = {
    "title": "PointRowAcceptanceBefore",
    "description": "An n-max, depth or concurrency row's acceptance in summaries written before ArmAcceptance "
                   "(schema_version 2): the engine's own counts pooled over the row's requests.",
    "type": "object",
    "properties": {
        "drafted": {"type": "integer", "default": 0},
        "accepted": {"type": "integer", "default": 0},
        "drafts": {"type": "integer", "default": 0},
        "rate": {"anyOf": [{"type": "number"}, {"type": "null"}], "description": "accepted / drafted."},
        "mean_accepted_len": {"anyOf": [{"type": "number"}, {"type": "null"}],
                              "description": "1 + accepted / drafts: tokens per verify step."},
    },
    "additionalProperties": False,
}


def _def(defs: dict[str, Any], name: str) -> dict[str, Any]:
    """A model's subschema, by name; one the models no longer define is an error here, not a silent no-op."""
    if name not in defs:
        raise KeyError(f"summary schema: the models define no {name} (core/reports/summary_schema.py is behind)")
    schema: dict[str, Any] = defs[name]
    return schema


def _version(schema: dict[str, Any], newest: int, what: str) -> None:
    prop = schema["properties"]["schema_version"]
    prop.update(minimum=1, maximum=newest, description=f"The {what} schema this file is written in (absent: 1).")


def summary_json_schema() -> dict[str, Any]:
    """The JSON schema (2020-12) of summary.json: a run summary or a merged report, by ``kind``."""
    merged = MergedReport.model_json_schema(ref_template=_REF)
    defs: dict[str, Any] = merged.pop("$defs")
    defs["MergedReport"] = merged
    # figures computed when written: in the serialization schema only; listed, read-only, not required
    written = MergedReport.model_json_schema(ref_template=_REF, mode="serialization")["$defs"]
    for name, schema in defs.items():
        for key, prop in written.get(name, {}).get("properties", {}).items():
            if prop.get("readOnly") and key not in schema.get("properties", {}):
                schema.setdefault("properties", {})[key] = prop

    run = _def(defs, RunSummary.__name__)
    run["properties"].pop("path", None)  # where it was read from; never written
    run["properties"]["kind"]["const"] = RunSummary.model_fields["kind"].default
    _version(run, REPORT_SCHEMA_VERSION, "run summary")
    merge = _def(defs, "MergedReport")
    merge["properties"]["kind"]["const"] = MergedReport.model_fields["kind"].default
    _version(merge, MERGE_SCHEMA, "merged report")

    acceptance = _def(defs, "PointRow")["properties"]["acceptance"]
    defs["PointRowAcceptanceBefore"] = _ROW_ACCEPTANCE_BEFORE
    acceptance["anyOf"].insert(1, {"$ref": "#/$defs/PointRowAcceptanceBefore"})
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "bakeoff summary.json",
        "description": "A run's summary (kind bakeoff-run-summary, core/reports/model.py RunSummary) or a merged "
                       "report (kind bakeoff-merge, core/reports/merge.py MergedReport). Every report is drawn "
                       "from it.",
        "schema_version": REPORT_SCHEMA_VERSION,
        "merge_schema_version": MERGE_SCHEMA,
        "oneOf": [{"$ref": f"#/$defs/{RunSummary.__name__}"}, {"$ref": "#/$defs/MergedReport"}],
        "$defs": defs,
    }
