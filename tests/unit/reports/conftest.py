"""Synthetic run directories with known truth, written exactly as `bakeoff run` writes them."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bakeoff.core.results.record import RunRecord
from bakeoff.core.results.sample import Sample
from bakeoff.core.results.store import RunDir

Maker = Callable[..., Path]


def write_run(path: Path, arms: dict[str, float], *, passes: int = 3, reps: int = 3,
              prompts: tuple[str, ...] = ("code_python", "prose"), noise: float = 0.02, seed: int = 0,
              speculative: dict[str, dict[str, Any]] | None = None, stateful: tuple[str, ...] = (),
              acceptance: dict[str, float] | None = None, failed: dict[str, str] | None = None,
              name: str = "synthetic", swept: dict[str, dict[str, Any]] | None = None,
              workload: dict[str, Any] | None = None) -> Path:
    """A run whose arms decode at ``arms[name]`` tok/s (times log-normal noise), the first arm the baseline."""
    rng = np.random.default_rng(seed)
    run = RunDir(path)
    speculative = speculative or {}
    orders = [list(arms) for _ in range(passes)]
    run.write_record(RunRecord.model_validate({
        "tool": {"name": "bakeoff", "version": "0.1.0"},
        "config": {"name": name, "arms": [{"name": a, "engine": "fake", "model": "m.gguf",
                                           "speculative": speculative.get(a, {"method": "none"}),
                                           "swept": (swept or {}).get(a, {})} for a in arms],
                   "workload": {"reps": reps, "passes": passes, "max_tokens": 128, "modes": ["greedy"],
                                **(workload or {})}},
        "baseline": next(iter(arms)), "orders": orders, "seed": seed,
        "prompts": [{"name": p, "kind": "x", "messages": []} for p in prompts],
        "engines": {a: {"engine": "fake", "capabilities": {"stateful_speculators": list(stateful)}} for a in arms},
        "host": {"cpu_model": "Test CPU"},
        "arm_records": {a: [{"status": "ok", "pass": p, "boot_s": 1.0 + p, "version": "b1"} for p in range(passes)]
                        for a in arms},
    }))
    if failed:
        meta = run.read_record().to_json()
        for a, err in failed.items():
            meta["arm_records"][a].append({"status": "failed", "pass": 0, "error": err})
        run.write_record(RunRecord.model_validate(meta))
    for p in range(passes):
        for a, rate in arms.items():
            for prompt in prompts:
                for r in range(reps):
                    tps = rate * math.exp(rng.normal(0, noise))
                    acc = (acceptance or {}).get(a)
                    s = Sample(arm=a, engine="fake", prompt=prompt, mode="greedy", rep=r, pass_index=p,
                               decode_tps=tps, completion_tokens=128, n_first=1, decode_s=127 / tps, ttft_s=0.1,
                               prefill_tps=500.0, usage_present=True)
                    if acc is not None:
                        s.drafted, s.accepted = 100, round(100 * acc)
                        s.acceptance = s.accepted / s.drafted
                    run.append(s)
    return path


@pytest.fixture
def make_run(tmp_path: Path) -> Maker:
    counter = iter(range(1000))

    def make(arms: dict[str, float], **kw: Any) -> Path:
        return write_run(tmp_path / f"run{next(counter)}", arms, **kw)

    return make


FIXTURE_RUN = Path(__file__).resolve().parents[2] / "fixtures" / "reports" / "llamacpp-run"


@pytest.fixture
def real_run(tmp_path: Path) -> Path:
    """A copy of a real llama.cpp run (4 arms, two of them identical), so reports can be written into it."""
    dest = tmp_path / FIXTURE_RUN.name
    dest.mkdir()
    for f in ("run.json", "samples.jsonl"):
        (dest / f).write_text((FIXTURE_RUN / f).read_text())
    return dest


def load(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    assert isinstance(data, dict), path
    return data
