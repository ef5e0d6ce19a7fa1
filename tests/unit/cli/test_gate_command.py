"""`bakeoff gate FILE` end to end through `bakeoff run`'s path, on the simulated engine: an A/A gate passes
with one line and gate.json; arms that differ in more than the build are refused before anything starts."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bakeoff.core.cli import app
from bakeoff.core.cli.exit_codes import ExitCode
from bakeoff.engines.llamacpp.synth import SynthSpec, synthesize, toy_tokenizer

AA = """\
name: aa
arms:
  - {name: old, engine: sim, model: sim, options: {itl_ms: 2}}
  - {name: new, engine: sim, model: sim, options: {itl_ms: 2}}
gate: {reference: old, candidate: new, max_slowdown: 50%}
workload: {prompts: [prose], max_tokens: 16, reps: 2, passes: 3, warmup: 0, gates: []}
"""


def test_an_identical_build_passes(tmp_path: Path) -> None:
    cfg = tmp_path / "aa.yaml"
    cfg.write_text(AA)
    res = CliRunner().invoke(app, ["gate", str(cfg), "--out", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    assert "run the same build (an A/A check of the gate itself), on one engine start per pass" in " ".join(
        res.output.split())
    assert "gate passed: new against old:" in res.output
    assert "a slowdown beyond the 50.0% allowed is excluded" in res.output
    [run] = (tmp_path / "runs").iterdir()
    verdict = json.loads((run / "report" / "gate.json").read_text())
    assert verdict["outcome"] == "passed" and verdict["points"][0]["where"] == "overall"
    record = json.loads((run / "run.json").read_text())
    assert record["baseline"] == "old" and 3 <= len(record["orders"]) <= 8  # more only while undecided
    assert record["fingerprints"]["old"]["id"] == record["fingerprints"]["new"]["id"]
    # `check` on the file says as many engine starts per pass as the gate made: both arms launch the same
    # command, so each pass starts one server and runs both on it
    checked = CliRunner().invoke(app, ["check", str(cfg)])
    said = re.search(r"(\d+) engine start\(s\) per pass", " ".join(checked.output.split()))
    assert checked.exit_code == 0 and said, checked.output
    lines = [json.loads(line)["record"] for line in (run / "arm_records.jsonl").read_text().splitlines()]
    fresh = Counter(r["pass"] for r in lines if not r["shared_engine"])
    assert set(fresh.values()) == {int(said.group(1))} == {1} and len(fresh) == len(record["orders"])
    assert "old, new launch the same command: one engine start per pass serves them" in " ".join(
        checked.output.split())


def test_an_interval_across_the_limit_draws_passes_up_to_its_budget_then_exits_inconclusive(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bakeoff.core.analysis.stats import Comparison, Interval
    from bakeoff.core.cli import regression as gate_cli

    # every read of the run straddles the 10 % line (0.95x, 0.70-1.20): the spread a busy machine leaves
    across = Comparison(arm="new", reference="old", verdict="not separable",
                        ratio=Interval(estimate=0.95, lo=0.70, hi=1.20, n=12))
    monkeypatch.setattr(gate_cli, "gate_points", lambda summary, candidate: [("overall", across)])
    cfg = tmp_path / "aa.yaml"
    cfg.write_text(AA.replace("max_slowdown: 50%}", "max_slowdown: 10%, max_passes: 4}"))
    res = CliRunner().invoke(app, ["gate", str(cfg), "--out", str(tmp_path / "runs")])
    assert res.exit_code == ExitCode.INCONCLUSIVE and int(ExitCode.INCONCLUSIVE) == 6, res.output
    assert "gate: inconclusive after 3 pass(es); adding one (at most 4)" in res.output
    assert "gate: still inconclusive after 4 passes (gate.max_passes)" in res.output
    assert "gate inconclusive: new against old: 0.950× (0.700–1.200) over the whole run" in res.output
    assert "about 100 passes in all would decide" in res.output  # (0.25 below the estimate / 0.05 of room)^2 x 4
    [run] = (tmp_path / "runs").iterdir()
    assert len(json.loads((run / "run.json").read_text())["orders"]) == 4
    assert json.loads((run / "report" / "gate.json").read_text())["outcome"] == "inconclusive"


def test_arms_that_differ_in_their_configuration_are_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(AA.replace("{itl_ms: 2}}\ngate", "{itl_ms: 9}}\ngate"))
    res = CliRunner().invoke(app, ["gate", str(cfg), "--out", str(tmp_path / "runs"), "--max-slowdown", "3%"])
    assert res.exit_code == 2, res.output
    assert "must differ only in the engine build" in res.output and "options.itl_ms: 2 → 9" in res.output
    assert not (tmp_path / "runs").exists()
    res = CliRunner().invoke(app, ["gate", str(cfg), "--max-slowdown", "3"])
    assert res.exit_code == 2 and "write 3% or 0.03" in res.output


def test_the_gate_reads_each_depth() -> None:
    from bakeoff.core.analysis.stats import Comparison, Interval
    from bakeoff.core.cli.regression import gate_points
    from bakeoff.core.reports.model import RunSummary
    from bakeoff.core.reports.points import PointRow, PointTable

    def row(arm: str, depth: int, ratio: float | None) -> PointRow:
        cmp = None if ratio is None else Comparison(arm=arm, reference="old", verdict="not separable",
                                                   ratio=Interval(estimate=ratio, lo=ratio - 0.1, hi=ratio + 0.1, n=4))
        return PointRow(arm=arm, point={"depth": depth}, vs_baseline=cmp, is_baseline=arm == "old")

    depth = PointTable(kind="depth", title="depth sweep", keys=["depth"],
                       rows=[row("old", 512, None), row("old", 4096, None), row("new", 512, 0.99),
                             row("new", 4096, 0.6)])
    points = gate_points(RunSummary(run_id="r", name="n", baseline="old", depth=depth), "new")
    assert [(where, c.ratio.estimate if c else None) for where, c in points] == [("depth 512", 0.99),
                                                                                ("depth 4096", 0.6)]
    assert gate_points(RunSummary(run_id="r", name="n", baseline="old"), "new") == [("overall", None)]


def test_a_candidate_build_that_does_not_exist_is_refused_before_the_reference_is_measured(tmp_path: Path) -> None:
    built = tmp_path / "a" / "llama-server"
    built.parent.mkdir()
    built.write_text("#!/bin/sh\nexit 1\n")  # never run: the refusal comes first
    built.chmod(0o755)
    missing = tmp_path / "nope" / "llama-server"
    model = synthesize(SynthSpec("target"), toy_tokenizer(300), tmp_path)  # a model preflight accepts
    cfg = tmp_path / "b.yaml"
    cfg.write_text(f"""\
name: builds
arms:
  - {{name: ref, engine: llamacpp, model: {model}, options: {{binary: {built}}}}}
  - {{name: cand, engine: llamacpp, model: {model}, options: {{binary: {missing}}}}}
gate: {{reference: ref, candidate: cand, max_slowdown: 10%}}
workload: {{prompts: [prose], max_tokens: 8, reps: 1, passes: 3, warmup: 0, gates: []}}
""")
    res = CliRunner().invoke(app, ["gate", str(cfg), "--out", str(tmp_path / "runs")], env={"COLUMNS": "250"})
    assert res.exit_code == ExitCode.CONFIG, res.output
    said = " ".join(res.output.split())
    assert f"arm 'cand': options.binary '{missing}' does not exist" in said
    assert "engines install" not in said  # the path is wrong, not the machine: no advice to build
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
