"""A run on Ray: each arm is compared with the baseline of its own host, and an arm run on two hosts is
compared across them as hardware (unpaired), never as an arm effect."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from bakeoff.core.reports.model import summarize_run
from bakeoff.core.results.record import RunRecord
from bakeoff.core.results.sample import Sample
from bakeoff.core.results.store import RunDir

RATES = {"base@a": 100.0, "fast": 150.0, "base@b": 50.0, "slow": 40.0}  # host b is half as fast as host a


def _ray_run(path: Path) -> Path:
    rng = np.random.default_rng(0)
    run = RunDir(path)
    run.write_record(RunRecord.model_validate({
        "config": {"name": "two-hosts", "arms": [{"name": a, "engine": "fake", "model": "m.gguf"}
                                                 for a in ("base", "fast", "slow")],
                   "workload": {"reps": 3, "passes": 2, "max_tokens": 128, "modes": ["greedy"]}},
        "baseline": "base@a", "orders": [["base", "fast", "slow"]] * 2, "seed": 0, "executor": "ray",
        "prompts": [{"name": "prose", "kind": "x", "messages": []}],
        "placement": {"blocks": {"a": ["base@a", "fast"], "b": ["base@b", "slow"]},
                      "baselines": {"a": "base@a", "b": "base@b"},
                      "arm_order": ["base@a", "base@b", "fast", "slow"],
                      "copies": {"base": {"a": "base@a", "b": "base@b"}}}}))
    for p in range(2):
        for arm, rate in RATES.items():
            for r in range(3):
                tps = rate * math.exp(rng.normal(0, 0.01))
                run.append(Sample(arm=arm, engine="fake", prompt="prose", mode="greedy", rep=r, pass_index=p,
                                  decode_tps=tps, completion_tokens=128, n_first=1, decode_s=127 / tps,
                                  ttft_s=0.1, usage_present=True))
    return path


def test_each_arm_is_compared_with_its_own_hosts_baseline_and_hosts_as_hardware(tmp_path: Path) -> None:
    s = summarize_run(_ray_run(tmp_path / "run"), n_boot=400)
    assert [a.arm for a in s.arms] == ["base@a", "base@b", "fast", "slow"]
    ratios = {(c.arm, c.reference): c.ratio.estimate for c in s.comparisons}
    assert set(ratios) == {("fast", "base@a"), ("slow", "base@b")}  # never slow against host a's baseline
    assert math.isclose(ratios["fast", "base@a"], 1.5, rel_tol=0.03)
    assert math.isclose(ratios["slow", "base@b"], 0.8, rel_tol=0.03)
    [hardware] = s.hardware
    assert (hardware.arm, hardware.reference, hardware.paired) == ("base@b", "base@a", False)
    assert math.isclose(hardware.ratio.estimate, 0.5, rel_tol=0.03) and hardware.verdict == "slower"
