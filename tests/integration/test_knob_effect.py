"""A declared knob really changes what the real llama-server does, and every cross-check ran.

One `bakeoff run` of SmolLM2 drafting for itself (draft-simple) swept over ``speculative.n_max`` 1 and 3:
llama.cpp's own ``/metrics`` count draft steps, so tokens drafted per step must stay at 1 for n_max 1 and
exceed 1 for n_max 3 (the draft agrees with the target, so drafting is not cut short). The read-back names
the speculative type the slot really uses, and no sample says a cross-check could not run.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from bakeoff.core.results.store import RunDir, read_samples

pytestmark = pytest.mark.integration


def test_n_max_changes_the_draft_length_llama_server_uses(llama_server: Path, smollm2: Path, tmp_path: Path,
                                                          bakeoff_cli: str) -> None:
    config = {"name": "knob-effect",
              "arms": [{"name": "draft", "engine": "llamacpp", "model": str(smollm2),
                        "speculative": {"method": "draft", "draft_model": str(smollm2)},
                        "settings": {"ctx": 1024, "threads": 2},
                        "sweep": {"speculative.n_max": [1, 3]}}],
              "workload": {"suite": [{"name": "count", "messages": [
                  {"role": "user", "content": "Count from one to twenty."}]}],
                           "max_tokens": 48, "reps": 1, "warmup": 0}}
    (tmp_path / "knob.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    proc = subprocess.run([bakeoff_cli, "run", str(tmp_path / "knob.yaml"), "--out", str(tmp_path / "runs")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = next(d for d in (tmp_path / "runs").iterdir() if d.is_dir())
    records = RunDir(run_dir).arm_records()
    per_step = {}
    for arm in ("draft-n_max1", "draft-n_max3"):
        record = records[arm][0]
        assert record.status == "ok" and not record.mismatches, json.dumps(record.to_json())[:2000]
        assert "draft-simple" in record.effective["spec_types"].split(",")  # what /slots says it runs
        (sample,) = [s for s in read_samples(run_dir) if s.arm == arm]
        assert sample.status == "ok" and sample.drafted and sample.drafts, sample
        assert not [f for f in sample.flags if "crosscheck" in f or "missing" in f or "unavailable" in f
                    or "mismatch" in f], sample.flags
        per_step[arm] = sample.drafted / sample.drafts
    assert per_step["draft-n_max1"] == 1.0
    assert 1.0 < per_step["draft-n_max3"] <= 3.0, per_step
