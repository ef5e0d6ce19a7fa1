"""``bakeoff conform`` against the replay fixtures of tests/fixtures/counter_bugs/: every catalogued counter bug
is flagged by the check it breaks, the clean fake passes with speculation off and on, and the command's table
fits 80 columns, matches summary.json and sets the documented exit code. Loopback only, no engine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from counter_bugs.server import BUGS, CLEAN, serve_bug

from bakeoff.core.cli.conform import conform_lines, exit_code_of
from bakeoff.core.cli.exit_codes import ExitCode
from bakeoff.core.config.schema import Arm, BakeoffFile
from bakeoff.core.measure.conform import CHECKS, ConformSummary
from bakeoff.core.run.conform import conform_arms

# the check each bug must fail (others may fail too: one lie often breaks two counts)
EXPECTED = {
    "budget": "usage-witness",
    "reasoning": "reasoning",
    "cache-zero-mtp": "cache-hit",
    "cache-counter": "cache-counter",
    "accepted-past-end": "accepted",
    "drafted-overcount": "drafted",
    "metrics-disagree": "acceptance-sources",
    "schema-fallback": "drafting-structured",
    "events-as-tokens": "events-tokens",
    "no-usage": "include-usage",
}


def _conform(mode: str, tmp_path: Path) -> ConformSummary:
    with serve_bug(mode) as (url, _):
        config = BakeoffFile(arms=[Arm(name=mode, engine="llamacpp", url=url)])
        summary, _ = conform_arms(config, url, tmp_path)
    return summary


def test_every_catalogued_bug_has_a_fixture_and_an_expected_check() -> None:
    assert set(EXPECTED) == set(BUGS)
    assert set(EXPECTED.values()) <= {cid for cid, _ in CHECKS}


@pytest.mark.parametrize("mode", sorted(BUGS))
def test_each_counter_bug_is_flagged_by_its_check(mode: str, tmp_path: Path) -> None:
    summary = _conform(mode, tmp_path)
    arm = summary.arms[0]
    failed = {c.id: c for c in arm.failed}
    assert EXPECTED[mode] in failed, (mode, [(c.id, c.result, c.figures) for c in arm.checks])
    assert exit_code_of(summary) == ExitCode.NONCONFORMING
    assert failed[EXPECTED[mode]].figures  # the engine's own numbers are quoted


@pytest.mark.parametrize("mode", CLEAN)
def test_the_clean_fake_passes_every_applicable_check(mode: str, tmp_path: Path) -> None:
    summary = _conform(mode, tmp_path)
    arm = summary.arms[0]
    assert not arm.failed, [(c.id, c.figures) for c in arm.failed]
    results = {c.id: c.result for c in arm.checks}
    assert [c.id for c in arm.checks] == [cid for cid, _ in CHECKS]
    assert results["usage-witness"] == results["cache-hit"] == results["cache-counter"] == "pass"
    speculative = mode == "clean-spec"
    assert arm.speculative is speculative
    for cid in ("accepted", "drafted", "acceptance-sources", "drafting-structured"):
        assert results[cid] == ("pass" if speculative else "n/a"), (cid, results)
    assert exit_code_of(summary) == ExitCode.OK
    assert all(len(line) <= 80 for line in conform_lines(arm))


def test_command_line_table_fits_80_columns_and_matches_summary_json(tmp_path: Path) -> None:
    with serve_bug("drafted-overcount") as (url, _):
        done = subprocess.run([sys.executable, "-m", "bakeoff", "conform", url, "--engine", "llamacpp",
                               "--out", str(tmp_path)], capture_output=True, text=True, timeout=300,
                              env={**__import__("os").environ, "COLUMNS": "80", "NO_COLOR": "1"})
    assert done.returncode == ExitCode.NONCONFORMING, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines and all(len(line) <= 80 and line == line.rstrip() for line in lines), lines
    summaries = list(tmp_path.glob("*-conform/summary.json"))
    assert len(summaries) == 1
    data = json.loads(summaries[0].read_text())
    assert data["exit_code"] == ExitCode.NONCONFORMING
    drafted = next(c for c in data["arms"][0]["checks"] if c["id"] == "drafted")
    assert drafted["result"] == "fail" and "draft steps" in drafted["figures"]
    assert any("drafted <= steps x n_max" in line and "FAIL" in line for line in lines)
