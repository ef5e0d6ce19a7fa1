"""``bakeoff schema [config|samples|summary]``: the JSON schema of a bakeoff file or of a result file (for editors,
validation and readers of the results in other tools)."""

from __future__ import annotations

import json
from typing import Any

import typer

from ..common.errors import ConfigError

__all__ = ["SCHEMAS", "schema_command", "schema_of"]

SCHEMAS: dict[str, str] = {
    "config": "a bakeoff file (the default)",
    "samples": "one line of a run's samples.jsonl: one timed request, its fields in named sections",
    "summary": "summary.json: a run's summary or a merged report, the document every report is drawn from",
}
_HELP = "; ".join(f"{name}: {what}" for name, what in SCHEMAS.items())


def schema_of(name: str) -> dict[str, Any]:
    """The JSON schema ``bakeoff schema NAME`` prints.

    :raises ConfigError: not one of :data:`SCHEMAS`.
    """
    if name == "config":
        from ..config.schema import BakeoffFile

        return BakeoffFile.model_json_schema()
    if name == "samples":
        from ..results.sample import sample_json_schema

        return sample_json_schema()
    if name == "summary":
        from ..reports.summary_schema import summary_json_schema

        return summary_json_schema()
    raise ConfigError(f"bakeoff schema {name!r}: use one of {', '.join(SCHEMAS)}")


def schema_command(
    what: str = typer.Argument("config", help=_HELP, metavar="config|samples|summary", show_default=False),
) -> None:
    """Print a JSON schema: of the bakeoff file (default), of a samples.jsonl line, or of summary.json.

    Each result schema carries the schema_version it describes; the files carry theirs (absent: 1).
    """
    typer.echo(json.dumps(schema_of(what), indent=2))
