"""A CPU-only llama-server asked for GPU layers runs on the CPU: bakeoff must say so, loudly, in run.json and the
report. And the roofline of a CPU run: floor tok/s from the GGUF and a measured host-memory copy."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

CONFIG = """\
name: gpu-asked
arms:
  - name: gpu99
    engine: llamacpp
    model: smollm2
    settings: {ctx: 2048, threads: 2, gpu_layers: 99}
workload: {prompts: [code_python], max_tokens: 16, reps: 1, warmup_settle: null}
"""


def test_gpu_layers_on_the_cpu_build_is_a_loud_mismatch(llama_server: Path, smollm2: Path, tmp_path: Path,
                                                         bakeoff_cli: str) -> None:
    cfg = tmp_path / "gpu.yaml"
    cfg.write_text(CONFIG)
    proc = subprocess.run([bakeoff_cli, "run", str(cfg), "--out", str(tmp_path / "runs")], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "gpu_layers 99 asked, but llama-server runs on the CPU" in proc.stdout  # the live warning
    run = next((tmp_path / "runs").iterdir())
    meta = json.loads((run / "run.json").read_text())
    record = meta["arm_records"]["gpu99"][0]
    assert any("gpu_layers 99 asked, but llama-server runs on the CPU" in m and "no usable GPU found" in m
               for m in record["mismatches"])
    assert record["effective"]["binary"]["backend"] in ("cpu", "unknown")
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert samples and all("settings-mismatch" in s["flags"] and s["gpu"] is None for s in samples)
    report = (run / "report" / "report.md").read_text()
    assert "gpu99: MISMATCH: settings.gpu_layers 99 asked, but llama-server runs on the CPU" in report
    # no GPU: the roofline runs on host bandwidth, and nothing GPU-shaped appears
    assert meta["gpus"] == [] and meta["bandwidth"]["host"]["gbs"] > 0
    summary = json.loads((run / "report" / "summary.json").read_text())
    roof = summary["arms"][0]["roofline"]
    assert roof["bandwidth_source"] == "measured copy (numpy, host memory)"
    assert roof["floor_tps"] > 0 and roof["efficiency"] > 0
    assert "**GPU telemetry**" not in report and "**Roofline**" in report
