"""`bakeoff report RUN_DIR` and print_run (which `bakeoff run` calls after a run)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from typer.testing import CliRunner

from bakeoff.core.cli import app
from bakeoff.core.reports import print_run

Maker = Callable[..., Path]


def test_report_prints_tables_and_writes_files(make_run: Maker) -> None:
    path = make_run({"base": 100.0, "fast": 140.0})
    res = CliRunner().invoke(app, ["report", str(path)], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert "each arm against base" in res.output and "faster" in res.output  # the verdict block
    res = CliRunner().invoke(app, ["report", str(path), "--tables"], env={"COLUMNS": "250"})
    assert res.exit_code == 0 and "Overall median" in res.output
    assert (path / "report" / "report.html").exists() and (path / "report" / "summary.json").exists()


def test_report_markdown_json_and_no_files(make_run: Maker) -> None:
    path = make_run({"base": 100.0, "fast": 140.0})
    runner = CliRunner()
    res = runner.invoke(app, ["report", str(path), "--markdown", "--no-files"])
    assert res.exit_code == 0 and res.output.startswith("## synthetic") and "| vs baseline |" in res.output
    assert not (path / "report").exists()
    res = runner.invoke(app, ["report", str(path), "--json", "--no-files", "--n-boot", "300", "--seed", "5"])
    data = json.loads(res.output)
    assert data["bootstrap"] == {**data["bootstrap"], "n_boot": 300, "seed": 5}


def test_report_refuses_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert res.exit_code == 2 and "not a bakeoff run directory" in res.output


def test_print_run_for_the_run_command(make_run: Maker) -> None:
    path = make_run({"base": 100.0, "b": 100.0})
    console = Console(record=True, width=250)
    print_run(path, console, write=False)
    text = console.export_text()
    assert "equivalent" in text and not (path / "report").exists()  # the same rate twice: within ±3 %
    print_run(path, console)
    assert f"report: {path / 'report' / 'report.html'}" in console.export_text()
    assert (path / "report" / "report.md").exists()
    print_run(path, console, tables=True)
    assert "reports (+" in console.export_text()  # each file on a line of its own follows
