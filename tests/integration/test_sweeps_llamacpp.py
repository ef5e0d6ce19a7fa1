"""Sweeps against a real llama-server on the CPU: a 3-point n-max sweep with relaunches, a depth sweep whose
usage.prompt_tokens equals the target exactly, request-level arms sharing one server, and concurrent streams."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from bakeoff.core.results.store import read_samples

pytestmark = pytest.mark.integration

NMAX = """\
name: nmax
arms:
  - name: draft
    engine: llamacpp
    model: smollm2
    speculative: {method: draft, draft_model: smollm2}
    settings: {ctx: 1024, threads: 2}
    sweep: {speculative.n_max: [1, 2, 4]}
workload: {prompts: [code_python], max_tokens: 64, reps: 1, warmup_settle: null}
"""

DEPTH = """\
name: depth
arms:
  - name: plain
    engine: llamacpp
    model: smollm2
    settings: {threads: 2}
workload: {prompts: [code_python], max_tokens: 32, reps: 1, warmup_settle: null, depths: [512, 2048, 1000000]}
"""

SHARED = """\
name: shared
arms:
  - name: plain
    engine: llamacpp
    model: smollm2
    settings: {ctx: 1024, parallel: 2, threads: 2}
sweep: {workload.max_tokens: [16, 32]}
workload: {prompts: [code_python], reps: 1, warmup_settle: null, concurrency: [1, 2]}
"""


def _run(bakeoff_cli: str, tmp_path: Path, text: str) -> tuple[str, Path]:
    cfg = tmp_path / "bakeoff.yaml"
    cfg.write_text(text)
    out = tmp_path / "runs"
    proc = subprocess.run([bakeoff_cli, "run", str(cfg), "--out", str(out), "--tables"], capture_output=True, text=True,
                          timeout=900, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = [d for d in out.iterdir() if d.is_dir()]
    return proc.stdout, run


def test_nmax_sweep_relaunches_per_point_and_prints_the_nmax_table(llama_server: Path, smollm2: Path,
                                                                   tmp_path: Path, bakeoff_cli: str) -> None:
    stdout, run = _run(bakeoff_cli, tmp_path, NMAX)
    samples = read_samples(run)
    assert sorted(s.arm for s in samples) == ["draft-n_max1", "draft-n_max2", "draft-n_max4"]
    for s in samples:
        assert s.status == "ok", s.error
        assert s.completion_tokens == 64 and s.max_tokens == 64
        assert s.drafted and s.accepted is not None  # speculation really ran
    for n in (1, 2, 4):
        argv = (run / "arms" / f"draft-n_max{n}" / "argv.txt").read_text().split()
        assert argv[argv.index("--spec-draft-n-max") + 1] == str(n)
        assert list((run / "arms" / f"draft-n_max{n}").glob("engine-pass*.log"))  # its own launch
    # at most n_max tokens are drafted per step: drafted / drafts <= n_max
    by_arm = {s.arm: s for s in samples}
    assert by_arm["draft-n_max1"].drafted <= by_arm["draft-n_max1"].drafts  # type: ignore[operator]
    assert "n-max sweep" in stdout and "vs baseline" in stdout
    swept = [a["swept"] for a in json.loads((run / "run.json").read_text())["config"]["arms"]]
    assert swept == [{"speculative.n_max": 1}, {"speculative.n_max": 2}, {"speculative.n_max": 4}]


def test_depth_sweep_hits_the_exact_prompt_tokens_and_refuses_what_does_not_fit(
        llama_server: Path, smollm2: Path, tmp_path: Path, bakeoff_cli: str) -> None:
    stdout, run = _run(bakeoff_cli, tmp_path, DEPTH)
    samples = read_samples(run)
    assert sorted(s.depth for s in samples) == [512, 2048]  # type: ignore[type-var]
    for s in samples:
        assert s.status == "ok", s.error
        assert s.prompt_tokens == s.depth  # usage.prompt_tokens, chat template included, exactly
        assert not [f for f in s.flags if f.startswith("depth-mismatch")]
        assert s.ttft_s and s.prefill_tps and s.decode_tps
    record = json.loads((run / "run.json").read_text())["arm_records"]["plain"][0]
    assert "depth 1000000" in record["refused"]  # beyond the n_ctx that /props reported
    assert "depth sweep" in stdout and "prefill tok/s" in stdout


def test_request_level_sweep_shares_one_server_and_concurrent_streams_overlap(
        llama_server: Path, smollm2: Path, tmp_path: Path, bakeoff_cli: str) -> None:
    stdout, run = _run(bakeoff_cli, tmp_path, SHARED)
    samples = read_samples(run)
    assert len(samples) == 2 * (1 + 2)
    for s in samples:
        assert s.status == "ok", s.error
        assert s.completion_tokens == s.max_tokens == (16 if s.arm.endswith("16") else 32)
    logs = sorted(p.parent.name for p in run.glob("arms/*/engine-pass*.log"))
    assert len(logs) == 1  # one launch served both output lengths
    records = json.loads((run / "run.json").read_text())["arm_records"]
    assert sorted(r[0]["shared_engine"] for r in records.values()) == [False, True]
    pairs = [s for s in samples if s.concurrency == 2]
    assert len(pairs) == 4 and len({s.batch_id for s in pairs}) == 2
    for batch in {s.batch_id for s in pairs}:
        a, b = [s for s in pairs if s.batch_id == batch]
        # both streams were open at once: the batch took about the longer stream, not the two in a row
        assert max(a.e2e_s, b.e2e_s) <= a.batch_wall_s < a.e2e_s + b.e2e_s  # type: ignore[type-var,operator]
    assert "concurrency sweep" in stdout and "aggregate tok/s" in stdout
