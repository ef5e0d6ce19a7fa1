"""``bakeoff schema``: the JSON schema of a bakeoff file (for editors and validation)."""

from __future__ import annotations

import json

import typer

from ..config.schema import BakeoffFile


def schema_command() -> None:
    """Print the JSON schema of the bakeoff file."""
    typer.echo(json.dumps(BakeoffFile.model_json_schema(), indent=2))
