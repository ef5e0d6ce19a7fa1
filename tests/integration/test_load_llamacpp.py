"""Load points against a real llama-server: n-gram against spec off at 1 and 2 streams (closed loop) and at two
open-loop rates, one run: every request measured, latency counted from the schedule, percentiles, goodput and
paired verdicts per point, and the exports in pandas."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd
import pytest

from bakeoff.core.reports.model import summarize_run
from bakeoff.core.results.store import read_samples

pytestmark = pytest.mark.integration

LOAD = """\
name: load-small
baseline: spec-off
arms:
  - name: spec-off
    engine: llamacpp
    model: smollm2
    settings: {ctx: 2048, parallel: 2, threads: 2}
  - name: ngram
    engine: llamacpp
    model: smollm2
    speculative: {method: ngram, variant: mod}
    settings: {ctx: 2048, parallel: 2, threads: 2}
workload:
  prompts: [code_python]
  max_tokens: 32
  reps: 1
  warmup: 1
  warmup_settle: null
  gates: []
  concurrency: [1, 2]
  arrival: {rates: [1, 8], distribution: poisson, requests: 4, seed: 3}
  slo: {any: {e2e_s: 600}}
"""


def test_closed_and_open_loop_points_on_llamacpp(llama_server: Path, smollm2: Path, tmp_path: Path,
                                                 bakeoff_cli: str) -> None:
    cfg = tmp_path / "load.yaml"
    cfg.write_text(LOAD)
    proc = subprocess.run([bakeoff_cli, "run", str(cfg), "--out", str(tmp_path / "runs"), "--tables"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "load points" in proc.stdout
    [run] = [d for d in (tmp_path / "runs").iterdir() if d.is_dir()]
    samples = read_samples(run)
    assert len(samples) == 2 * (1 + 2 + 4 + 4)
    assert all(s.status == "ok" for s in samples), [s.error for s in samples if s.status != "ok"]
    opened = [s for s in samples if s.rate is not None]
    assert len(opened) == 16
    for s in opened:
        assert s.ttft_sched_s is not None and s.ttft_s is not None and s.ttft_sched_s >= s.ttft_s - 1e-9
        assert s.completion_tokens == 32  # fixed length, counted by the engine
    summary = summarize_run(run)
    assert summary.load is not None
    points = {(p.arm, p.load, p.value): p for p in summary.load.points}
    assert set(points) == {(a, k, v) for a in ("spec-off", "ngram")
                           for k, v in (("streams", 1), ("streams", 2), ("rate", 1), ("rate", 8))}
    for p in points.values():
        assert p.errors == 0 and p.goodput["any"] == pytest.approx(p.offered_rps)
        assert all(p.percentiles[m]["p99"] is not None for m in ("ttft_s", "itl_s", "tpot_s", "e2e_s"))
    assert all(p.vs_baseline is not None for (arm, _, _), p in points.items() if arm == "ngram")
    out = subprocess.run([bakeoff_cli, "export", str(run), "--format", "csv"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    table = pd.read_csv(run / "export" / "points.csv")
    assert len(table[table["table"] == "load"]) == 8
