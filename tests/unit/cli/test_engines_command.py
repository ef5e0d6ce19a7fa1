"""`bakeoff engines` tells the adapter from the engine (USER-3 #5): vLLM read "available" while `bakeoff check` said
it was not installed, because one column said whether bakeoff's adapter loads. Now "adapter" says that, and
"installed" says where the engine's own program is, or "no" and how to get it."""

from __future__ import annotations

import io
from typing import Any

import pytest
from typer.testing import CliRunner

import bakeoff.core.cli.engines as engines_cli
from bakeoff.core.cli.console import make_console
from bakeoff.core.engine.install import Installer
from bakeoff.core.engine.registry import EngineInfo
from bakeoff.engines.sim import SimAdapter

runner = CliRunner()


class _Nowhere(Installer):
    engine = "absent"

    def hint(self) -> str:
        return "Build it with `bakeoff engines install absent`."


class _Here(Installer):
    engine = "present"

    def installed(self) -> str | None:
        return "present-server from PATH: /usr/bin/present-server"


def _adapter(installer: Installer | None) -> Any:
    class Adapter(SimAdapter):
        pass

    Adapter.installer = installer
    return Adapter


@pytest.fixture
def engines(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    infos = [EngineInfo("absent", "m:A", "bakeoff", _adapter(_Nowhere())),
             EngineInfo("present", "m:P", "bakeoff", _adapter(_Here())),
             EngineInfo("inproc", "m:S", "bakeoff", _adapter(None)),
             EngineInfo("broken", "m:B", "plugin", None, "No module named 'broken'")]
    monkeypatch.setattr(engines_cli, "list_engines", lambda: infos)
    out = io.StringIO()
    monkeypatch.setattr(engines_cli, "console", make_console(file=out, width=80, color_system=None))
    return out


def _records(output: str) -> dict[str, dict[str, str]]:
    """The records layout at 80 columns: 'engine NAME', then '  label  value' lines (continuations joined)."""
    records: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    label = ""
    for line in output.splitlines():
        if line.startswith("engine "):
            current = records.setdefault(line.split()[1], {})
        elif line.startswith("  ") and line[2] != " ":
            label, _, value = line[2:].partition("  ")
            current[label] = value.strip()
        elif line.strip() and label:
            current[label] += " " + line.strip()
    return records


def test_the_adapter_and_the_engines_program_are_two_columns(engines: io.StringIO) -> None:
    result = runner.invoke(engines_cli.app, [])
    assert result.exit_code == 0, result.output
    output = engines.getvalue()
    rows = _records(output)
    assert rows["absent"]["adapter"] == "available"
    assert rows["absent"]["installed"] == "no: Build it with `bakeoff engines install absent`."
    assert rows["present"]["installed"] == "present-server from PATH: /usr/bin/present-server"
    assert "installed" not in rows["inproc"]  # nothing of its own to install (sim in-process, openai attached)
    assert rows["broken"]["adapter"] == "unavailable: No module named 'broken'"
    assert "status" not in output, output
