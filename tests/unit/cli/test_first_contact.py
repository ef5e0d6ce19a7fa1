"""The command line a newcomer meets first (issue 32): --version, a --help that imports nothing heavy, the lazy
command table matching the commands, a quiet exit on a closed pipe, and `bakeoff demo` exiting like `run`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import bakeoff.core.cli.demo as demo_cli
from bakeoff.core.cli import app
from bakeoff.core.cli.commands import COMMANDS
from bakeoff.core.cli.exit_codes import ExitCode
from bakeoff.core.cli.lazy import load_command
from bakeoff.core.results.record import RunRecord
from bakeoff.core.results.store import RunDir

runner = CliRunner()
BAKEOFF = [sys.executable, "-c", "from bakeoff.core.cli import main; main()"]
HEAVY = ("numpy", "pydantic", "httpx", "openai", "matplotlib", "yaml", "bakeoff.core.run", "bakeoff.core.config")


def test_version_prints_the_installed_version() -> None:
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"bakeoff {version('bakeoff')}"
    done = subprocess.run([*BAKEOFF, "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == f"bakeoff {version('bakeoff')}", done.stderr


def test_help_lists_every_command_and_imports_nothing_heavy() -> None:
    """What `bakeoff --help` imports (the time it takes is printed by benchmarks/help_time.py, not asserted)."""
    probe = ("import sys\nfrom bakeoff.core.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
             f"print('LOADED', sorted(m for m in {HEAVY!r} if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", probe, "--help"], capture_output=True, text=True, timeout=60,
                          env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "LOADED []" in done.stdout, done.stdout[-500:]
    for name, spec in COMMANDS.items():
        assert name in done.stdout and " ".join(spec.help.split()[:4]) in " ".join(done.stdout.split())


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_table_line_is_the_commands_own_first_paragraph(name: str) -> None:
    command = load_command(name)
    first = " ".join((command.help or "").split("\n\n")[0].split())
    assert first == COMMANDS[name].help


def test_every_command_of_the_table_is_in_the_full_app() -> None:
    names = [c.name for c in app.registered_commands] + [g.name for g in app.registered_groups]
    assert names == list(COMMANDS)


def test_a_closed_output_pipe_exits_quietly_with_141() -> None:
    """`bakeoff schema | head -1`: the reader goes away mid-output; no traceback, no "error", exit 128 + SIGPIPE."""
    proc = subprocess.Popen([*BAKEOFF, "schema"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the command has started writing: its first write finds no reader
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == ExitCode.BROKEN_PIPE.value == 141
    assert stderr == ""


class _Installed:
    """An adapter whose engine is installed (the demo installs nothing)."""

    def preflight(self, arm: Any) -> None:
        return None


def test_the_demo_exits_like_run_when_nothing_valid_was_measured(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def measures_nothing(config: Any, out: Path, *args: Any, **kwargs: Any) -> RunDir:
        run = RunDir(out / "empty-run")
        run.write_record(RunRecord(config=config))
        kwargs["exit_step"](run)  # the command's exit code, taken inside execute's stop-signal handlers
        return run

    monkeypatch.setattr(demo_cli, "load_engine", lambda name: _Installed())
    monkeypatch.setattr(demo_cli, "execute", measures_nothing)
    result = runner.invoke(app, ["demo", "--out", str(tmp_path)])
    assert result.exit_code == ExitCode.NOTHING_MEASURED, result.output
    assert "nothing valid was measured" in result.output


def test_demo_help_documents_the_exit_codes() -> None:
    result = runner.invoke(app, ["demo", "--help"], env={"COLUMNS": "250"})
    assert " 3 nothing valid measured" in " ".join(result.output.split())
    assert isinstance(app, typer.Typer)


def test_a_command_group_run_lazily_has_the_same_options_as_in_the_full_app() -> None:
    done = subprocess.run([*BAKEOFF, "engines", "--help"], capture_output=True, text=True, timeout=60,
                          env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0 and "install" in done.stdout
    assert "completion" not in done.stdout  # the sub-app's own shell-completion options stay hidden


def _help_texts(command: Any) -> list[str]:
    """A click command's own help and every parameter's, with its subcommands' (a command group)."""
    texts = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
    for sub in getattr(command, "commands", {}).values():
        texts += _help_texts(sub)
    return texts


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_bracket_in_a_help_text_is_shown_not_read_as_rich_markup(name: str) -> None:
    """rich reads ``[parquet]`` as a style tag and drops it: ``pip install '.[parquet]'`` would print as
    ``pip install '.'``. A bracket meant to be shown is written ``\\[``."""
    from rich.markup import render

    for text in _help_texts(load_command(name)):
        assert render(text).plain == text.replace("\\[", "["), text
