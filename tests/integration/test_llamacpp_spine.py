"""The spine against a real llama-server: true token counts, decode agreeing with the server, acceptance,
refusals before launch, and attach mode."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
from pathlib import Path

import pytest

from bakeoff.core.common.errors import PreflightError
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.results.store import RunDir, read_samples
from bakeoff.core.run.plan import plan_run
from bakeoff.core.run.protocol import run_plan

pytestmark = pytest.mark.integration

THREE_ARMS = """\
name: spine
arms:
  - name: spec-off
    engine: llamacpp
    model: smollm2
    settings: {ctx: 2048, threads: 2}
  - name: ngram-mod
    engine: llamacpp
    model: smollm2
    speculative: {method: ngram, variant: mod}
    settings: {ctx: 2048, threads: 2}
  - name: draft-simple
    engine: llamacpp
    model: smollm2
    speculative: {method: draft, draft_model: smollm2, n_max: 3}
    settings: {ctx: 2048, threads: 2}
workload: {prompts: [code_python, prose], max_tokens: 128, reps: 2, warmup_settle: null}
"""


def _run_dir(out: Path) -> Path:
    dirs = [d for d in out.iterdir() if d.is_dir()]
    assert len(dirs) == 1
    return dirs[0]


def test_three_arms_true_tokens_server_agreement_and_acceptance(llama_server: Path, smollm2: Path,
                                                                 tmp_path: Path, bakeoff_cli: str) -> None:
    cfg = tmp_path / "spine.yaml"
    cfg.write_text(THREE_ARMS)
    proc = subprocess.run([bakeoff_cli, "run", str(cfg), "--out", str(tmp_path / "runs"), "--llama-bench"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "80"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "each arm against spec-off" in proc.stdout and "draft-simple" in proc.stdout  # the verdict block
    # beside it, the same build's llama-bench (built with llama-server) at the answers' depth and length
    lines = proc.stdout.splitlines()
    at = lines.index("Engine's own benchmark (same build, same GGUF and settings, after the run)")
    assert [line.split()[0] for line in lines[at + 2: at + 5]] == ["spec-off", "ngram-mod", "draft-simple"]
    run = _run_dir(tmp_path / "runs")
    samples = read_samples(run)
    assert len(samples) == 3 * 2 * 2
    for s in samples:
        assert s.status == "ok", s.error
        assert s.usage_present and s.completion_tokens == 128  # fixed length via ignore_eos
        assert s.completion_tokens == s.server_completion_tokens  # usage agrees with the server's own count
        assert s.token_events == s.completion_tokens and s.max_tokens_per_event == 1
        assert not [f for f in s.flags if "mismatch" in f], s.flags
    deviations = [abs(s.decode_tps / s.server_decode_tps - 1) for s in samples]  # type: ignore[operator]
    assert statistics.median(deviations) < 0.01
    draft = [s for s in samples if s.arm == "draft-simple"]
    assert all(s.drafted and s.drafted > 0 and s.accepted is not None and s.accepted <= s.drafted for s in draft)
    assert all(s.acceptance is not None and s.drafts for s in draft)
    assert all(s.drafted is not None for s in samples if s.arm == "ngram-mod")  # 0 when nothing was drafted
    assert all(s.drafted is None for s in samples if s.arm == "spec-off")
    meta = json.loads((run / "run.json").read_text())
    records = meta["arm_records"]
    assert all(r[0]["status"] == "ok" and r[0]["boot_s"] > 0 for r in records.values())
    assert records["draft-simple"][0]["effective"]["speculative"] is True
    assert records["spec-off"][0]["effective"]["total_slots"] == 1
    assert "b11434" in records["spec-off"][0]["version"]
    assert (run / "arms" / "draft-simple" / "engine-pass0.log").exists()
    refs = json.loads((run / "references.json").read_text())
    plain = refs["spec-off"]
    assert plain["error"] is None and plain["build_number"] == plain["server_build_number"] == 11434, plain
    assert plain["n_gen"] == 128 and plain["depth"] > 0 and plain["tg_tps"] > 0
    assert 0.2 < plain["share"] < 1.5, plain  # the server's decode against the bare loop of the same build


def test_mtp_on_smollm2_is_refused_before_launch(llama_server: Path, smollm2: Path, tmp_path: Path) -> None:
    cfg = parse_bakeoff("arms:\n  - {name: mtp, engine: llamacpp, model: smollm2, speculative: {method: mtp}}\n")
    with pytest.raises(PreflightError) as err:
        plan_run(cfg)
    assert "MTP needs a model with MTP (NextN) layers" in str(err.value)
    assert "llama.nextn_predict_layers = 0" in str(err.value)


def test_bad_config_key_names_the_key(tmp_path: Path, bakeoff_cli: str) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(THREE_ARMS.replace("threads: 2}", "thread: 2}", 1))
    proc = subprocess.run([bakeoff_cli, "run", str(cfg), "--out", str(tmp_path / "runs")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "arms[0].settings.thread: unknown key" in proc.stderr  # one line from the CLI boundary
    assert not (tmp_path / "runs").exists()  # nothing ran


@pytest.mark.parametrize("engine", ["llamacpp", "openai"])
def test_attach_mode_against_a_server_bakeoff_did_not_start(running_llama_server: str, tmp_path: Path,
                                                            engine: str) -> None:
    cfg = parse_bakeoff(f"arms:\n  - {{name: attached, engine: {engine}, url: '{running_llama_server}'}}\n"
                        "workload: {prompts: [code_bash], max_tokens: 64, reps: 2, warmup_settle: null}\n")
    plan = plan_run(cfg)
    run = RunDir(tmp_path / "run")
    records = run_plan(plan, run)
    assert records["attached"][0].status == "ok"
    assert records["attached"][0].boot_s is None  # nothing was launched
    samples = read_samples(run.path)
    assert len(samples) == 2
    for s in samples:
        assert s.status == "ok" and s.completion_tokens == 64
    if engine == "llamacpp":  # the engine's own numbers still come through in attach mode
        assert all(s.server_decode_tps and s.server_completion_tokens == 64 for s in samples)
    else:
        assert all("n_first-estimated" in s.flags for s in samples)


def test_readme_demo_command_runs(llama_server: Path, smollm2: Path, tmp_path: Path, bakeoff_cli: str) -> None:
    proc = subprocess.run([bakeoff_cli, "demo", "--out", str(tmp_path / "runs")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = _run_dir(tmp_path / "runs")
    samples = read_samples(run)
    assert {s.arm for s in samples} == {"spec-off", "ngram"}
    assert all(s.status == "ok" for s in samples)
    assert str(run) in " ".join(proc.stdout.split()) or run.name in proc.stdout
    # the verdict block: each arm against spec-off, n-gram acceptance, and no gate failure for SmolLM2's arithmetic
    text = " ".join(proc.stdout.split())
    assert "demo-llamacpp-cpu: each arm against spec-off" in text and "GATE FAILED" not in text
    edits = [s for s in samples if s.arm == "ngram" and s.prompt == "edit_code"]
    drafted, accepted = sum(s.drafted or 0 for s in edits), sum(s.accepted or 0 for s in edits)
    assert drafted > 0 and accepted / drafted > 0.5, (accepted, drafted)  # the answer repeats its prompt
