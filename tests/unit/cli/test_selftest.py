"""`bakeoff selftest ENGINE`: the table, the exit codes, and the quoted reason of a failed method."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bakeoff.core.cli import app
from bakeoff.core.cli import selftest as cli_selftest
from bakeoff.core.common.errors import CapabilityNotSupported
from bakeoff.core.engine.checks import selftest_cases
from bakeoff.core.engine.pieces import Selftest
from bakeoff.core.run.selftest import SelftestCase, SelftestRow, run_selftest
from bakeoff.engines.openai import OpenAICompatAdapter

runner = CliRunner()
REJECTED = ('llama-server failed to start (unknown-flag): ... Log: error while handling argument "--spec-type": '
            'unknown speculative type: draft-dspark-v2')


class FakeAdapter:
    def __init__(self, rows: list[SelftestRow]) -> None:
        self.rows = rows
        self.workdir: Path | None = None


def fake_run_selftest(adapter: FakeAdapter, log: Callable[[str], None], workdir: Path) -> list[SelftestRow]:
    log("synthesizing")
    adapter.workdir = workdir
    return adapter.rows


def ok_row(label: str) -> SelftestRow:
    return SelftestRow(label, f"--spec-type draft-{label}", started=True, speculative=True, drafted=35,
                       accepted=35, seconds=1.2, version="b11434-unknown")


def invoke(monkeypatch: pytest.MonkeyPatch, adapter: object, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(cli_selftest, "load_engine", lambda name: adapter)
    if isinstance(adapter, FakeAdapter):  # rows without running an engine; the real runner for real adapters
        monkeypatch.setattr(cli_selftest, "run_selftest", fake_run_selftest)
    monkeypatch.setenv("COLUMNS", "250")
    result = runner.invoke(app, ["selftest", "fake", *args])
    return result.exit_code, result.output


def test_all_methods_working_exits_zero_and_removes_its_temporary_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeAdapter([ok_row("mtp"), ok_row("dflash")])
    code, out = invoke(monkeypatch, fake)
    assert code == 0, out
    assert "mtp" in out and "--spec-type draft-dflash" in out and "1.000" in out and "b11434-unknown" in out
    assert "2/2 passed" in out
    assert fake.workdir is not None and not fake.workdir.exists()


def test_a_rejected_flag_exits_non_zero_quoting_the_engine_line(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    bad = SelftestRow("dspark", "--spec-type draft-dspark", problems=[REJECTED], run_dir=tmp_path / "run")
    code, out = invoke(monkeypatch, FakeAdapter([ok_row("mtp"), bad]), "--keep", str(tmp_path))
    assert code == 1
    assert "FAILED" in out and "1/2 passed" in out
    assert "unknown speculative type: draft-dspark-v2" in out
    assert str(tmp_path) in out  # where the logs are


def test_an_engine_without_a_selftest_exits_two(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = invoke(monkeypatch, OpenAICompatAdapter())
    assert code == 2 and "has no self-test" in out


def test_an_adapter_without_a_selftest_piece_refuses() -> None:
    with pytest.raises(CapabilityNotSupported, match="openai has no self-test"):
        selftest_cases(OpenAICompatAdapter(), lambda msg: None)


def test_a_mapped_method_without_a_case_is_a_failed_row(tmp_path: Path) -> None:
    class MtpUntested(Selftest):
        def cases(self, log: Callable[[str], None]) -> tuple[list[SelftestCase], list[str]]:
            return [], ["mtp"]

    class NoCases(OpenAICompatAdapter):
        selftest = MtpUntested()

    (row,) = run_selftest(NoCases(), lambda msg: None, tmp_path)
    assert row.label == "mtp" and not row.ok and "no case for method 'mtp'" in row.problems[0]


def test_row_acceptance_and_verdict() -> None:
    assert ok_row("x").acceptance == 1.0 and ok_row("x").ok
    assert SelftestRow("none", "").acceptance is None
    assert not SelftestRow("x", "", problems=["p"]).ok
