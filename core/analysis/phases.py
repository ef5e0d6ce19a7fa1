"""Phase runs compared: each knob phase against the baseline phases either side of it (core/run/phases.py
runs them; docs/live.md)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from pydantic import BaseModel

from ..config.live import BASELINE
from ..results.record import PhaseRecord
from ..results.sample import Sample
from .stats import EQUIVALENCE_MARGIN, Interval, Verdict, bootstrap_ci, verdict

__all__ = ["GPU_FIELDS", "PhaseResult", "compare_phases"]

# per phase, from core/host/telemetry.py's NVML monitor (read only: bakeoff never changes a GPU setting itself)
GPU_FIELDS = ("power_mean_w", "sm_clock_mhz", "mem_clock_mhz", "temp_max_c")


class PhaseResult(BaseModel):
    """One phase: its median decode rate, and for a knob its paired ratio to the neighbouring baselines."""

    phase: str
    setting: str
    n: int
    median: Interval | None = None
    ratio: Interval | None = None
    verdict: Verdict | None = None
    baselines: list[str] = []
    gpu: dict[str, Any] | None = None
    probes: int = 0
    unhealthy_probes: int = 0


def _rates(samples: list[Sample]) -> dict[tuple[str, str, int], float]:
    return {(s.prompt, s.mode, s.rep): float(s.decode_tps) for s in samples
            if s.status == "ok" and s.decode_tps and s.decode_tps > 0}


def compare_phases(samples: list[Sample], records: list[PhaseRecord], seed: int = 0,
                   margin: float = EQUIVALENCE_MARGIN) -> list[PhaseResult]:
    """Each knob phase against the baseline phases either side of it, paired on (prompt, mode, round).

    The reference for a request is the geometric mean of the same request in the neighbouring baselines
    (one when the run stopped early), so a slow drift of the machine cancels out.
    """
    by_phase: dict[str, list[Sample]] = {}
    for s in samples:
        if s.phase:
            by_phase.setdefault(s.phase, []).append(s)
    out = []
    for i, rec in enumerate(records):
        mine = _rates(by_phase.get(rec.phase, []))
        res = PhaseResult(phase=rec.phase, setting=rec.setting, n=len(mine), gpu=rec.gpu, probes=rec.probes,
                          unhealthy_probes=rec.unhealthy_probes,
                          median=bootstrap_ci(list(mine.values()), seed=seed, key=f"phase-{rec.phase}"))
        if rec.setting != BASELINE:
            neighbours = [records[j] for j in (i - 1, i + 1)
                          if 0 <= j < len(records) and records[j].setting == BASELINE]
            refs = [_rates(by_phase.get(r.phase, [])) for r in neighbours]
            refs = [r for r in refs if r]
            logs = [math.log(v) - float(np.mean([math.log(r[k]) for r in refs if k in r]))
                    for k, v in mine.items() if any(k in r for r in refs)]
            ci = bootstrap_ci(logs, seed=seed, key=f"phase-ratio-{rec.phase}")
            if ci is not None:
                res.ratio = ci.model_copy(update={"estimate": math.exp(ci.estimate), "lo": math.exp(ci.lo),
                                                  "hi": math.exp(ci.hi)})
                res.verdict = verdict(res.ratio, margin)
            res.baselines = [r.phase for r in neighbours]
        out.append(res)
    return out
