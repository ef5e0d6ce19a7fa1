"""The equal-work guard and quality gates on a real llama-server (SmolLM2, CPU).

A chat-template arm (llama2 instead of the model's own) sends different prompt tokens: it must be "not
comparable" with the reason; an n-gram arm that drafted nothing is flagged too. ngram and draft arms must
reproduce the spec-off greedy output. A hidden arm whose logit bias forces one token everywhere garbles
its answers: it must fail a gate and never be reported faster, in the terminal table, markdown, HTML and
summary.json alike.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

CONFIG = """\
name: fairness-it
baseline: spec-off
arms:
  - {name: spec-off, engine: llamacpp, model: smollm2, settings: {ctx: 2048, threads: 2}}
  - name: ngram
    engine: llamacpp
    model: smollm2
    speculative: {method: ngram, variant: simple, n_max: 4}
    settings: {ctx: 2048, threads: 2}
  - name: draft
    engine: llamacpp
    model: smollm2
    speculative: {method: draft, draft_model: smollm2, n_max: 3}
    settings: {ctx: 2048, threads: 2}
  - name: llama2-template
    engine: llamacpp
    model: smollm2
    settings: {ctx: 2048, threads: 2}
    extra_args: ["--chat-template", "llama2"]
  - name: garbled
    engine: llamacpp
    model: smollm2
    settings: {ctx: 2048, threads: 2}
    extra_args: ["--logit-bias", "44+100"]
workload: {prompts: [code_python], max_tokens: 16, reps: 1, warmup: 0}
"""


def test_guard_gates_and_spec_identity(llama_server: Path, smollm2: Path, tmp_path: Path, bakeoff_cli: str) -> None:
    cfg = tmp_path / "fair.yaml"
    cfg.write_text(CONFIG)
    proc = subprocess.run([bakeoff_cli, "run", str(cfg), "--out", str(tmp_path / "runs"), "--tables"],
                          capture_output=True, text=True, timeout=1500, env={**os.environ, "COLUMNS": "400"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = next((tmp_path / "runs").iterdir())
    summary = json.loads((run / "report" / "summary.json").read_text())
    arms = {a["arm"]: a for a in summary["arms"]}
    cmp = {c["arm"]: c for c in summary["comparisons"]}

    template = cmp["llama2-template"]["comparable"]
    assert not template["ok"] and any(r.startswith("prompt tokens ") for r in template["reasons"]), template
    assert cmp["draft"]["comparable"]["ok"], cmp["draft"]["comparable"]
    # 16 tokens of code give n-gram lookup nothing to match: the guard says so instead of a bare ratio
    assert cmp["ngram"]["comparable"]["reasons"] == ["ngram: speculation asked but nothing drafted"]
    for name in ("ngram", "draft"):
        check = arms[name]["spec_check"]
        assert check["reference"] == "spec-off" and check["compared"] >= 1
        assert arms[name]["identical_to_baseline"] == 1.0, check["divergences"]

    for arm in arms.values():  # every gate ran and was scored on every arm
        assert set(arm["gates"]) == {"arithmetic", "factual", "tool_call", "needle", "stream_equality"}, arm["gates"]
    failed = {n: g for n, g in arms["garbled"]["gates"].items() if g["status"] in ("fail", "regressed")}
    assert failed, arms["garbled"]["gates"]
    assert all(g["answer"] is not None for g in failed.values())

    row = next(line for line in proc.stdout.splitlines() if line.startswith("│ garbled "))
    assert "GATE FAILED" in row and "faster" not in row
    assert "not comparable: prompt tokens" in proc.stdout
    md = (run / "report" / "report.md").read_text()
    html = (run / "report" / "report.html").read_text()
    for text in (md, html):
        assert "GATE FAILED" in text and "not comparable: prompt tokens" in text and "Correctness" in text
