"""Calibration analysis: the speedup each forced acceptance gives, and where speculation breaks even.

Per point (planned by core/config/calibration.py): the speedup (client decode rate, paired, bootstrap
interval), the same ratio from the engine's own timings, the measured acceptance, and the verify-step cost
in plain-step units (engine decode time / draft steps, over the spec-off time per token). Per n_max: the
break-even acceptance, where speedup crosses 1.
"""

from __future__ import annotations

import itertools
import re
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ..config.calibration import CalPoint, plan_points
from ..config.schema import CalibrateSection
from ..results.flags import flag_name
from ..results.record import ArmAttempt
from ..results.sample import Sample
from .acceptance import acceptance_rate
from .stats import LEVEL, N_BOOT, no_rate_reason, paired_ratio

__all__ = [
    "AGREEMENT_TARGET",
    "BreakEven",
    "Calibration",
    "CalibrationPoint",
    "acceptance_error",
    "analyze_calibration",
    "break_even",
    "engine_log_error",
]

AGREEMENT_TARGET = 0.02  # the client speedup should match the engine's own within this (issue 15)


class CalibrationPoint(BaseModel):
    engine: str
    method: str
    n_max: int
    target_acceptance: float
    expected_acceptance: float | None = Field(None, description="What the forced model should give at this n_max.")
    measured_acceptance: float | None = Field(None, description="Sum of accepted / sum of drafted, engine counts.")
    speedup: float | None = Field(None, description="Median paired ratio of client decode tok/s over spec-off.")
    ci_low: float | None = None
    ci_high: float | None = None
    engine_speedup: float | None = Field(None, description="The same paired ratio from the engine's own decode "
                                                           "tok/s (llama.cpp timings.predicted_per_second).")
    timing_agreement: float | None = Field(None, description="Median over the point's requests of client decode "
                                           "tok/s over the engine's own (1: bakeoff's clock agrees with the engine).")
    speedup_vs_engine: float | None = Field(None, description="speedup / engine_speedup - 1: how far bakeoff's "
                                            "speedup strays from the one the engine's own timings give (target: "
                                            "within ±2 %).")
    verify_step_cost: float | None = Field(None, description="Engine decode time per verify step over engine time "
                                                             "per spec-off step (1 = a verify step costs a plain "
                                                             "step); median of paired requests.")
    tokens_per_step: float | None = Field(None, description="Tokens committed per verify step (engine counts).")
    ideal_speedup: float | None = Field(None, description="1 + acceptance x n_max: a verify step costing one "
                                                          "plain step.")
    samples: int = 0
    flags: list[str] = Field(default_factory=list)


class BreakEven(BaseModel):
    engine: str
    method: str
    n_max: int
    acceptance: float | None = Field(None, description="Acceptance where speedup = 1 (None: never crossed and "
                                                       "no cost to extrapolate from).")
    ci_low: float | None = None
    ci_high: float | None = None
    source: str = Field("", description="'measured crossing' (interpolated between calibrated points) or 'cost "
                                        "model' ((verify cost - 1) / n_max; above 1 means never).")


class Calibration(BaseModel):
    points: list[CalibrationPoint] = Field(default_factory=list)
    break_even: list[BreakEven] = Field(default_factory=list)
    flags: list[str] = Field(default_factory=list, description="What kept a point from being measured.")


def _key(s: Sample) -> tuple[object, ...]:
    return (s.prompt, s.mode, s.rep, s.pass_index, s.depth, s.concurrency, s.max_tokens)


def _tokens(s: Sample) -> int | None:
    return s.server_completion_tokens or s.completion_tokens


def _engine_decode_s(s: Sample) -> float | None:
    """The engine's own decode time (llama.cpp: predicted_ms), from its token count and decode rate."""
    n = _tokens(s)
    if s.status != "ok" or not n or not s.server_decode_tps or s.server_decode_tps <= 0:
        return None
    return n / s.server_decode_tps


def _steps(s: Sample) -> int | None:
    """Decode steps of one request after its first token (which prefill samples): the engine's draft count
    under speculation, else tokens - 1 - accepted drafts."""
    if s.drafts:
        return s.drafts
    n = _tokens(s)
    if n and n > 1:
        return max(n - 1 - (s.accepted or 0), 1)
    return None


def _step_cost(s: Sample, ref: Sample) -> float | None:
    """Engine decode time per verify step over the paired spec-off request's engine time per step."""
    spec_t, ref_t, steps, ref_steps = _engine_decode_s(s), _engine_decode_s(ref), _steps(s), _steps(ref)
    if spec_t is None or ref_t is None or not steps or not ref_steps:
        return None
    return (spec_t / steps) / (ref_t / ref_steps)


def _tokens_per_step(s: Sample) -> float | None:
    n, steps = _tokens(s), _steps(s)
    return (n - 1) / steps if n and steps else None


def _pairs(arm: Iterable[Sample], ref: Iterable[Sample]) -> list[tuple[Sample, Sample]]:
    by_key = {_key(s): s for s in ref if s.status == "ok"}
    return [(s, by_key[_key(s)]) for s in arm if s.status == "ok" and _key(s) in by_key]


def _unrated_why(s: Sample, engine_too: bool) -> str | None:
    """Why a successful sample gives no pair to the speedups: no client rate, or (``engine_too``) no engine rate."""
    if (why := no_rate_reason(s)) is not None:
        return why
    if engine_too and not (s.server_decode_tps and s.server_decode_tps > 0):
        return "no engine decode rate"
    return None


def _rated(s: Sample, engine_too: bool) -> bool:
    return s.status == "ok" and _unrated_why(s, engine_too) is None


def _flagged_references(arm: Sequence[Sample], ref: Sequence[Sample]) -> str:
    """The flags the spec-off samples of the point's pairs carry ("foreign-load ×2, harness-lag ×1"), or "": the
    speedup divides by those samples, so a spec-off request slowed by a foreign load or a lagging client moves the
    point, and the point must say so (issue 33 item 5)."""
    counts: dict[str, int] = {}
    for _, r in _pairs(arm, ref):
        for name in dict.fromkeys(flag_name(f) for f in r.flags):
            counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{name} ×{n}" for name, n in sorted(counts.items()))


def _first_error(samples: Sequence[Sample], records: Sequence[ArmAttempt]) -> str | None:
    for r in records:
        if r.failed and r.error:
            return r.error
    return next((s.error for s in samples if s.status == "error" and s.error), None)


_ROOT_CAUSE = re.compile(r"\b(?:Runtime|Value|NotImplemented|Assertion|Type)Error: .+")


def engine_log_error(arm_dir: Path | None) -> str | None:
    """The first Python error line in an arm's engine logs: a server that died on a request (vLLM's engine
    core) answers HTTP 500 with no cause, and only its log says why."""
    if arm_dir is None or not arm_dir.is_dir():
        return None
    for log in sorted(arm_dir.glob("*.log")):
        try:
            text = log.read_text(errors="replace")
        except OSError:
            continue
        if (m := _ROOT_CAUSE.search(text)) is not None:
            return m.group(0).strip()[:300]
    return None


def _measure(point: CalPoint, arm: list[Sample], ref: list[Sample], records: Sequence[ArmAttempt],
             n_boot: int, level: float, seed: int, arm_dir: Path | None = None) -> CalibrationPoint:
    assert point.n_max is not None and point.target_acceptance is not None
    out = CalibrationPoint(engine=point.engine, method=point.method, n_max=point.n_max,
                           target_acceptance=point.target_acceptance, expected_acceptance=point.expected_acceptance,
                           ideal_speedup=1 + point.target_acceptance * point.n_max)
    ok = [s for s in arm if s.status == "ok"]
    out.samples = len(ok)
    if not ok:
        why = _first_error(arm, records) or "no samples"
        cause = engine_log_error(arm_dir)
        out.flags.append(f"not measured: {why}" + (f" (engine log: {cause})" if cause else ""))
        return out
    drafted = sum(s.drafted or 0 for s in ok if s.drafted is not None)
    accepted = sum(s.accepted or 0 for s in ok if s.accepted is not None)
    if any(s.drafted is not None for s in ok):
        out.measured_acceptance = acceptance_rate(accepted, drafted) or 0.0
    else:
        out.flags.append("the engine reported no draft counts")
    # like with like: where the engine times its requests, both speedups come from the same request pairs,
    # those with a client rate and an engine rate on both sides (issue 33 item 5: a spec-off sample flagged
    # burst-delivery had left the client's pairs but not the engine's, and the two figures disagreed 1.87/0.29)
    both = any(s.server_decode_tps for s in [*ok, *ref])
    rated = [s for s in ok if _rated(s, both)]
    rated_ref = [s for s in ref if _rated(s, both)]
    if lost := len(_pairs(ok, ref)) - len(_pairs(rated, rated_ref)):
        whys = sorted({w for s in [*ok, *ref] if s.status == "ok" and (w := _unrated_why(s, both))})
        out.flags.append(f"lost {lost} request pair(s) from both speedups ({', '.join(whys)})")
    if flagged := _flagged_references(rated, rated_ref):
        out.flags.append(f"spec-off pair flagged: {flagged}")
    ratio = paired_ratio(rated, rated_ref, n_boot=n_boot, level=level, seed=seed)
    if ratio is not None:
        out.speedup, out.ci_low, out.ci_high = ratio.estimate, ratio.lo, ratio.hi
    else:
        out.flags.append("no request paired with spec-off")
    engine = paired_ratio(rated, rated_ref, n_boot=n_boot, level=level, seed=seed, value=lambda s: s.server_decode_tps,
                          value_name="engine decode")
    out.engine_speedup = engine.estimate if engine is not None else None
    if out.speedup is not None and out.engine_speedup:
        out.speedup_vs_engine = out.speedup / out.engine_speedup - 1
    agree = [s.decode_tps / s.server_decode_tps for s in ok if s.decode_tps and s.server_decode_tps]
    out.timing_agreement = statistics.median(agree) if agree else None
    costs = [c for s, r in _pairs(ok, ref) if (c := _step_cost(s, r)) is not None]
    out.verify_step_cost = statistics.median(costs) if costs else None
    per_step = [t for s in ok if (t := _tokens_per_step(s)) is not None]
    out.tokens_per_step = statistics.median(per_step) if per_step else None
    return out


def _crossing(xs: Sequence[float], ys: Sequence[float | None]) -> float | None:
    """Smallest x where the piecewise-linear curve through (xs, ys) rises through 1 (None: it starts above 1,
    so the crossing lies below the calibrated range, or never reaches 1)."""
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
    for (x0, y0), (x1, y1) in itertools.pairwise(pts):
        if y0 < 1 <= y1:
            return x0 + (1 - y0) * (x1 - x0) / (y1 - y0)
    return None


def break_even(points: Sequence[CalibrationPoint]) -> BreakEven | None:
    """Break-even acceptance of one (engine, method, n_max) from its points, sorted by acceptance.

    Where the measured speedup crosses 1 inside the calibrated range, it is interpolated; its interval
    comes from the curves of the interval bounds (the upper bound crosses first). Otherwise it is
    extrapolated from the verify-step cost c: a step commits 1 + a x n tokens at c plain steps, so
    speedup = 1 at a = (c - 1) / n (above 1: speculation never pays here).
    """
    pts = sorted((p for p in points if p.speedup is not None), key=lambda p: p.target_acceptance)
    if not points:
        return None
    first = points[0]
    out = BreakEven(engine=first.engine, method=first.method, n_max=first.n_max)
    if not pts:
        return out
    xs = [p.measured_acceptance if p.measured_acceptance is not None else p.target_acceptance for p in pts]
    mid = _crossing(xs, [p.speedup for p in pts])
    if mid is not None:
        out.acceptance, out.source = mid, "measured crossing"
        out.ci_low = _crossing(xs, [p.ci_high for p in pts])
        out.ci_high = _crossing(xs, [p.ci_low for p in pts])
        return out
    costs = [p.verify_step_cost for p in pts if p.verify_step_cost is not None]
    if not costs:
        return out
    c = statistics.median(costs)
    lo, hi = min(costs), max(costs)
    n = first.n_max
    out.acceptance, out.ci_low, out.ci_high = (c - 1) / n, (lo - 1) / n, (hi - 1) / n
    out.source = "cost model"
    return out


def analyze_calibration(config: dict[str, Any], samples: Sequence[Sample],
                        records: dict[str, list[ArmAttempt]] | None = None, *, n_boot: int = N_BOOT,
                        level: float = LEVEL, seed: int = 0, run_path: Path | None = None) -> Calibration | None:
    """The calibration of a run from its resolved config (run.json) and samples; None without a section.

    :param run_path: the run directory, whose engine logs name the cause of a point that was not measured.
    """
    raw = config.get("calibrate")
    if not raw:
        return None
    sections = [CalibrateSection.model_validate(s) for s in (raw if isinstance(raw, list) else [raw])]
    records = records or {}
    by_arm: dict[str, list[Sample]] = {}
    for s in samples:
        by_arm.setdefault(s.arm, []).append(s)
    out = Calibration()
    for section in sections:
        planned = plan_points(section)
        off, rest = planned[0], planned[1:]
        ref = [s for s in by_arm.get(off.arm, []) if s.status == "ok"]
        if not ref:
            why = _first_error(by_arm.get(off.arm, []), records.get(off.arm, [])) or "no samples"
            out.flags.append(f"{off.arm}: spec-off reference not measured: {why}")
        measured = [_measure(p, by_arm.get(p.arm, []), ref, records.get(p.arm, []), n_boot, level, seed,
                             run_path / "arms" / p.arm if run_path is not None else None) for p in rest]
        out.points += measured
        for p in measured:
            out.flags += [f"{section.engine} {section.method} n_max {p.n_max} acceptance {p.target_acceptance:.2f}: "
                          f"{f}" for f in p.flags]
        for n in section.n_max:
            be = break_even([p for p in measured if p.n_max == n])
            if be is not None:
                out.break_even.append(be)
    return out


def acceptance_error(p: CalibrationPoint) -> float | None:
    """|measured - expected| acceptance, or None when either is missing."""
    if p.measured_acceptance is None or p.expected_acceptance is None:
        return None
    return abs(p.measured_acceptance - p.expected_acceptance)
