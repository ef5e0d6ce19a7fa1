"""Load points: latency percentiles, goodput under SLOs, and where speculation stops paying.

A load point is an arm at one number of simultaneous streams (closed loop, ``workload.concurrency``) or at
one request rate (open loop, ``workload.arrival``). For each, over its requests:

- percentiles (p50/p90/p95/p99, each with its bootstrap interval, passes resampled first) of TTFT,
  inter-token latency (ITL: the mean gap between tokens in a request's decode window, 1 / decode tok/s),
  time per output token (TPOT: (e2e - TTFT) / (N - 1)) and end-to-end time. Under open-loop load TTFT and
  end-to-end time count from when each request was due, not when it was sent (no coordinated omission);
- per-user tok/s (median decode rate of a request) and aggregate tok/s (all tokens / the point's wall time,
  summed over its batches or open-loop runs), and tokens per joule where a GPU was watched;
- goodput per SLO tier: requests meeting every limit of the tier per second of wall time;
- the paired ratio against the baseline arm at the same point (:func:`paired_ratio`, so the same pairs give
  the same interval and verdict as the concurrency table) and its verdict.

From the points: the Pareto frontier across arms (per-user against aggregate tok/s, at each kind of load) and
each arm's crossover: the highest load up to which it is faster than the baseline at every point, and the
lowest at which it is slower.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from ..config.schema import Slo
from ..results.sample import Sample
from .stats import (
    EQUIVALENCE_MARGIN,
    LEVEL,
    N_BOOT,
    Comparison,
    Interval,
    bootstrap_ci,
    paired_ratio,
    tokens_per_joule,
    verdict,
)

__all__ = ["LoadPoint", "LoadSection", "Crossover", "FrontierPoint", "PERCENTILES", "METRICS", "load_section",
           "latency", "meets"]

PERCENTILES = (50, 90, 95, 99)
METRICS = ("ttft_s", "itl_s", "tpot_s", "e2e_s")
LoadKind = Literal["streams", "rate"]


def latency(s: Sample, metric: str) -> float | None:
    """One request's value of ``metric`` (one of :data:`METRICS`), in seconds; None when it has none."""
    if metric == "ttft_s":
        return s.ttft_sched_s if s.rate is not None else s.ttft_s
    if metric == "e2e_s":
        return s.e2e_sched_s if s.rate is not None else s.e2e_s
    if metric == "itl_s":
        return 1.0 / s.decode_tps if s.decode_tps else None
    if metric == "tpot_s":
        n = s.completion_tokens
        if s.e2e_s is None or s.ttft_s is None or not n or n < 2:
            return None
        return (s.e2e_s - s.ttft_s) / (n - 1)
    raise ValueError(f"unknown latency metric {metric!r}; known: {', '.join(METRICS)}")


def meets(s: Sample, slo: Slo) -> bool:
    """Whether a successful request met every limit of the tier (a limit it has no value for fails)."""
    if s.status != "ok":
        return False
    for metric, limit in (("ttft_s", slo.ttft_s), ("tpot_s", slo.tpot_s), ("e2e_s", slo.e2e_s)):
        if limit is not None and ((v := latency(s, metric)) is None or v > limit):
            return False
    return True


class LoadPoint(BaseModel):
    """One arm at one load."""

    arm: str
    load: LoadKind = Field(description="streams: closed-loop concurrency; rate: open-loop requests per second.")
    value: float = Field(description="The number of streams, or the rate.")
    requests: int = 0
    errors: int = 0
    per_user_tps: Interval | None = Field(None, description="Median decode tok/s of a request, with its interval.")
    aggregate_tps: float | None = Field(None, description="All tokens / wall time of the point's batches or runs.")
    offered_rps: float | None = Field(None, description="Requests / wall time (open loop: below the rate when the "
                                      "server fell behind).")
    tok_per_j: float | None = Field(None, description="Median tokens per joule (GPU runs).")
    percentiles: dict[str, dict[str, Interval | None]] = Field(
        default_factory=dict, description="metric -> p50/p90/p95/p99 with intervals (seconds).")
    goodput: dict[str, float] = Field(default_factory=dict, description="SLO tier -> requests per second meeting "
                                      "it (over the same wall time).")
    send_lag_p99_s: float | None = Field(None, description="Open loop: p99 of how late the client sent a request "
                                         "(its own backlog).")
    vs_baseline: Comparison | None = None
    is_baseline: bool = False


class FrontierPoint(BaseModel):
    arm: str
    load: LoadKind
    value: float
    per_user_tps: float
    aggregate_tps: float


class Crossover(BaseModel):
    """Where an arm stops beating the baseline as the load grows."""

    arm: str
    load: LoadKind
    last_faster: float | None = Field(None, description="Faster than the baseline at every load up to this one "
                                      "(None: not faster at the lowest).")
    first_slower: float | None = Field(None, description="The lowest load at which it is slower (None: never).")
    summary: str = ""


class LoadSection(BaseModel):
    points: list[LoadPoint] = Field(default_factory=list)
    frontier: list[FrontierPoint] = Field(default_factory=list, description="Per load kind: the points no other "
                                          "arm's point beats on both per-user and aggregate tok/s.")
    crossover: list[Crossover] = Field(default_factory=list)


def _load_of(s: Sample) -> tuple[LoadKind, float] | None:
    if s.rate is not None:
        return "rate", s.rate
    if s.concurrency is not None:
        return "streams", float(s.concurrency)
    return None


def _walls(group: Sequence[Sample]) -> float:
    """The point's wall time: each batch (or open-loop run) once."""
    return sum({s.batch_id or "": s.batch_wall_s or 0.0 for s in group}.values())


def _fmt(kind: LoadKind, v: float) -> str:
    return f"{v:g} streams" if kind == "streams" else f"{v:g} req/s"


def _crossover(arm: str, kind: LoadKind, points: Sequence[LoadPoint]) -> Crossover | None:
    judged = sorted((p for p in points if p.vs_baseline is not None), key=lambda p: p.value)
    if not judged:
        return None
    out = Crossover(arm=arm, load=kind)
    for p in judged:
        if p.vs_baseline is None or p.vs_baseline.verdict != "faster":
            break
        out.last_faster = p.value
    out.first_slower = next((p.value for p in judged if p.vs_baseline and p.vs_baseline.verdict == "slower"), None)
    parts = [f"faster up to {_fmt(kind, out.last_faster)}" if out.last_faster is not None else "never faster"]
    for word in ("equivalent", "not separable", "too few pairs"):
        middle = [p.value for p in judged if p.vs_baseline and p.vs_baseline.verdict == word]
        if middle:
            parts.append(f"{word} at " + ", ".join(f"{v:g}" for v in middle))
    parts.append(f"slower from {_fmt(kind, out.first_slower)}" if out.first_slower is not None else "never slower")
    out.summary = "; ".join(parts)
    return out


def _frontier(points: Sequence[LoadPoint]) -> list[FrontierPoint]:
    cands = [FrontierPoint(arm=p.arm, load=p.load, value=p.value, per_user_tps=p.per_user_tps.estimate,
                           aggregate_tps=p.aggregate_tps)
             for p in points if p.per_user_tps is not None and p.aggregate_tps is not None]
    out = []
    for c in cands:
        beaten = any(o is not c and o.load == c.load and o.per_user_tps >= c.per_user_tps
                     and o.aggregate_tps >= c.aggregate_tps
                     and (o.per_user_tps > c.per_user_tps or o.aggregate_tps > c.aggregate_tps) for o in cands)
        if not beaten:
            out.append(c)
    return sorted(out, key=lambda f: (f.load, -f.per_user_tps))


def load_section(samples: Sequence[Sample], arm_order: Sequence[str], baseline: str | None,
                 slo: Mapping[str, Slo] | None = None, *, n_boot: int = N_BOOT, level: float = LEVEL,
                 seed: int = 0, margin: float = EQUIVALENCE_MARGIN) -> LoadSection | None:
    """Every load point of the run; None when it has neither concurrency nor open-loop points."""
    groups: dict[tuple[str, LoadKind, float], list[Sample]] = {}
    for s in samples:
        if (at := _load_of(s)) is not None:
            groups.setdefault((s.arm, *at), []).append(s)
    if not groups:
        return None
    order = {a: i for i, a in enumerate(arm_order)}
    points = []
    def place(g: tuple[tuple[str, LoadKind, float], list[Sample]]) -> tuple[object, ...]:
        arm, kind, value = g[0]
        return order.get(arm, len(order)), arm, kind != "streams", value  # closed-loop levels first

    for (arm, kind, value), group in sorted(groups.items(), key=place):
        ok = [s for s in group if s.status == "ok"]
        key = f"load/{arm}/{kind}/{value:g}"
        wall = _walls(group)
        p = LoadPoint(arm=arm, load=kind, value=value, requests=len(group), errors=len(group) - len(ok),
                      is_baseline=arm == baseline)
        rated = [s for s in ok if s.decode_tps]
        p.per_user_tps = bootstrap_ci([s.decode_tps or 0.0 for s in rated], [s.pass_index for s in rated],
                                      n_boot=n_boot, level=level, seed=seed, key=key + "/per-user")
        if wall > 0:
            p.aggregate_tps = sum(s.completion_tokens or 0 for s in ok) / wall
            p.offered_rps = len(group) / wall
            p.goodput = {tier: sum(meets(s, limits) for s in group) / wall for tier, limits in (slo or {}).items()}
        joules = [j for s in ok if (j := tokens_per_joule(s)) is not None]
        p.tok_per_j = float(sorted(joules)[len(joules) // 2]) if joules else None
        for metric in METRICS:
            vals = [(v, s.pass_index) for s in ok if (v := latency(s, metric)) is not None]
            p.percentiles[metric] = {
                f"p{q}": bootstrap_ci([v for v, _ in vals], [c for _, c in vals], stat=q / 100, n_boot=n_boot,
                                      level=level, seed=seed, key=f"{key}/{metric}/p{q}") for q in PERCENTILES}
        lags = [s.send_lag_s for s in ok if s.send_lag_s is not None]
        if lags:
            p.send_lag_p99_s = float(np.quantile(lags, 0.99))
        reference = groups.get((baseline or "", kind, value), [])
        if baseline is not None and arm != baseline and reference:
            ratio = paired_ratio(group, reference, n_boot=n_boot, level=level, seed=seed)
            if ratio is not None:
                p.vs_baseline = Comparison(arm=arm, reference=baseline, ratio=ratio, verdict=verdict(ratio, margin),
                                           margin=margin)
        points.append(p)
    crossover = [c for arm in dict.fromkeys(p.arm for p in points) for kind in ("streams", "rate")
                 if arm != baseline
                 and (c := _crossover(arm, kind, [p for p in points if p.arm == arm and p.load == kind])) is not None]
    return LoadSection(points=points, frontier=_frontier(points), crossover=crossover)
