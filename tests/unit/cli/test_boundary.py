"""The one CLI error boundary: every command turns a BakeoffError or Ctrl-C into one line on stderr and the exit code
of core/cli/exit_codes.py, and nothing else prints or maps errors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from bakeoff.core import reports
from bakeoff.core.cli import app
from bakeoff.core.cli import report as report_cli
from bakeoff.core.cli.boundary import guard_commands, is_guarded, name_run_dir, stop_message
from bakeoff.core.cli.exit_codes import ExitCode, exit_code_for
from bakeoff.core.common.errors import ConfigError, EngineStartupError, PreflightError, RunDirError

runner = CliRunner()


def _commands(typer_app: typer.Typer) -> list[tuple[str, Any]]:
    out = [(info.name or "?", info.callback) for info in typer_app.registered_commands]
    if typer_app.registered_callback is not None:
        out.append(("(group callback)", typer_app.registered_callback.callback))
    for group in typer_app.registered_groups:
        assert group.typer_instance is not None
        out += [(f"{group.name} {name}", cb) for name, cb in _commands(group.typer_instance)]
    return out


def test_every_command_and_subcommand_sits_behind_the_boundary() -> None:
    commands = _commands(app)
    assert {"run", "report", "promote", "engines install"} <= {name for name, _ in commands}
    assert [name for name, cb in commands if not is_guarded(cb)] == []


def test_no_command_module_maps_errors_to_exit_codes_itself() -> None:
    """The boundary is the only place that turns an error into an exit code (main had six copies)."""
    cli_dir = Path(report_cli.__file__).parent
    mapping = re.compile(r"typer\.Exit\((2|130|ExitCode\.(CONFIG|INTERRUPTED|WRITE_FAILED))\b|\[red\]error:")
    offenders = [p.name for p in sorted(cli_dir.glob("*.py"))
                 if p.name != "boundary.py" and mapping.search(p.read_text())]
    assert offenders == []


@pytest.mark.parametrize("exc, code", [
    (ConfigError("x"), ExitCode.CONFIG), (PreflightError("x"), ExitCode.CONFIG),
    (EngineStartupError("x"), ExitCode.CONFIG), (RunDirError("x"), ExitCode.WRITE_FAILED),
    (KeyboardInterrupt(), ExitCode.INTERRUPTED), (ValueError("x"), ExitCode.CRASH),
])
def test_exit_codes_come_from_one_table(exc: BaseException, code: ExitCode) -> None:
    assert exit_code_for(exc) is code


def test_the_message_is_one_line_per_problem_and_keeps_brackets() -> None:
    exc = ConfigError("b.yaml:3: arms[0].settings.thread: unknown key\n  b.yaml:5: workload.reps: must be  >= 1")
    assert stop_message(exc) == ("error: b.yaml:3: arms[0].settings.thread: unknown key\n"
                                 "  b.yaml:5: workload.reps: must be >= 1")
    assert stop_message(KeyboardInterrupt(), "engines stopped") == "interrupted: engines stopped"
    assert stop_message(RunDirError("disk full"), "resume it") == "error: disk full; resume it"


def test_a_stop_marked_with_its_run_directory_names_it_ready_to_paste() -> None:
    after = "`bakeoff run --resume RUN_DIR` finishes the run"
    assert stop_message(name_run_dir(KeyboardInterrupt(), None), after) == f"interrupted: {after}"  # not known yet
    stopped = name_run_dir(RunDirError("disk full"), Path("runs/my run"))
    assert stop_message(stopped, after) == "error: disk full; `bakeoff run --resume 'runs/my run'` finishes the run"


def test_an_error_goes_to_stderr_as_one_line_and_stdout_stays_clean(tmp_path: Path) -> None:
    """`bakeoff report --json` on a directory that is not a run: stdout must stay parseable (empty)."""
    result = runner.invoke(app, ["report", str(tmp_path), "--json"])
    assert result.exit_code == ExitCode.CONFIG
    assert result.stdout == ""  # main printed the error on stdout
    assert result.stderr.startswith("error: ") and str(tmp_path) in result.stderr
    assert result.stderr.count("\n") == 1


def test_markup_like_text_in_an_error_is_printed_verbatim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "samples.jsonl").write_text("")

    def refuses(*args: Any, **kwargs: Any) -> Any:
        raise ConfigError("arm [bold]x[/bold]: settings.split must be one of [none, layer, row]")

    monkeypatch.setattr(report_cli, "summarize_run", refuses)
    result = runner.invoke(app, ["report", str(tmp_path), "--json"])
    assert result.exit_code == ExitCode.CONFIG
    assert result.stderr == "error: arm [bold]x[/bold]: settings.split must be one of [none, layer, row]\n"


def test_ctrl_c_in_any_command_exits_130_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """main: click's own handler printed 'Aborted!' and exited 1 for every command but run and demo."""
    (tmp_path / "samples.jsonl").write_text("")

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(reports, "summarize_run", interrupted)  # what `bakeoff report` prints from
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == ExitCode.INTERRUPTED == 130
    assert result.stderr == "interrupted\n"


def test_a_failed_promotion_is_a_bakeoff_error_exit_not_the_crash_code(tmp_path: Path) -> None:
    """main: `bakeoff promote` exited 1, the code that means a bug in bakeoff."""
    result = runner.invoke(app, ["promote", str(tmp_path), "arm"])
    assert result.exit_code == ExitCode.CONFIG
    assert result.stderr.startswith(f"error: {tmp_path}: not a bakeoff run directory")


def test_an_unexpected_exception_keeps_its_traceback() -> None:
    bare = typer.Typer()

    @bare.command()
    def broken() -> None:
        raise ValueError("a bug")

    guard_commands(bare, {})
    result = runner.invoke(bare, [])
    assert result.exit_code == 1 and isinstance(result.exception, ValueError)


def test_guarding_twice_wraps_once() -> None:
    bare = typer.Typer()

    @bare.command()
    def fine() -> None:
        typer.echo(json.dumps({"ok": True}))

    guard_commands(bare, {})
    first = bare.registered_commands[0].callback
    guard_commands(bare, {})
    assert bare.registered_commands[0].callback is first
    assert runner.invoke(bare, []).stdout == '{"ok": true}\n'
