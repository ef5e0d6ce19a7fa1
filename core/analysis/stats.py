"""Statistics you can trust: descriptive figures, bootstrap confidence intervals and paired verdicts.

Adjacent settings are often inside the noise (deep drafts move ±20 % between passes), so every median
comes with a bootstrap 95 % interval, and every arm is compared with the baseline through the ratio of
its decode rate to the baseline's, paired request by request on (prompt, mode, rep, pass). The verdict is
"faster" or "slower" only when the ratio's interval excludes 1, "equivalent" when it lies within the equivalence
margin (±3 %: neither can be faster or slower by more), otherwise "not separable" (the interval cannot tell).

The bootstrap is two-stage: it resamples passes (each pass is a separate engine start, the unit that
carries launch-to-launch variation), then requests within each drawn pass. With one pass the interval
only reflects request-to-request noise; the reports say so. Everything is deterministic given a seed:
each statistic draws from a generator seeded by the run seed and a hash of the statistic's name, so the
numbers do not depend on the order in which they are computed. This module is the one implementation
of every statistic; summaries and reports build on it.
"""

from __future__ import annotations

import math
import statistics
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field, computed_field

from ..host.roofline import Roofline
from ..results.flags import EXCLUDING, MACHINE, NO_RATE, first_flag, flag_detail, flag_name
from ..results.sample import Sample
from .acceptance import acceptance_rate

__all__ = [
    "EQUIVALENCE_MARGIN",
    "margin_text",
    "ratio_text",
    "MACHINE_FLAGS",
    "busy_machine",
    "undecided",
    "passes_to_decide",
    "passes_to_verdict",
    "LEVEL",
    "N_BOOT",
    "METHOD",
    "Verdict",
    "TOO_FEW",
    "MIN_PAIRS",
    "too_few_pairs",
    "Interval",
    "PromptStats",
    "ArmStats",
    "GpuArmStats",
    "describe_gpu",
    "tokens_per_joule",
    "Comparison",
    "bootstrap_ci",
    "paired_ratio",
    "unpaired_ratio",
    "verdict",
    "describe_arm",
    "describe_arms",
    "compare_to_baseline",
    "median_half_widths",
    "needs_more_passes",
    "ratio_half_widths",
    "MIN_ADAPTIVE_PASSES",
    "VERDICT_ALPHA",
    "verdict_stop_level",
    "clear_verdicts",
    "rng_for",
    "EXCLUDING_FLAGS",
    "enters_statistics",
    "no_rate_reason",
    "first_event_caveat",
]

LEVEL = 0.95
N_BOOT = 2000
METHOD = ("two-stage percentile bootstrap: passes resampled, then requests within each pass; "
          "ratios are medians of per-request paired ratios (prompt, mode, rep, pass)")

Verdict = Literal["faster", "slower", "equivalent", "not separable", "too few pairs"]
TOO_FEW: Verdict = "too few pairs"


# The fewest paired requests (unpaired across runs: samples a side) whose interval may give a verdict. With n
# pairs the 95 % percentile bootstrap of their median is the pairs' whole range for every n up to 5 (a resample's
# median is the smallest pair more often than the 2.5 % tail), so it excludes 1 exactly when every pair lies on
# one side, which two identical arms do with probability 2 * 2**-n (the sign test): 25 % with 3 pairs, 6 % with 5,
# more than the 5 % the interval claims. 6 is the first n within it.
MIN_PAIRS = 6


def too_few_pairs(ratio: Interval) -> bool:
    """Too few observations behind ``ratio`` for its interval to decide anything (:data:`MIN_PAIRS`)."""
    return ratio.n < MIN_PAIRS


def _shown(x: float, rounding: Callable[[float], float], keep_side: bool) -> str:
    """``x`` at two decimals by ``rounding`` (applied to x * 10**digits), with more digits while a value on one side
    of 1 would print as 1 or beyond it (``keep_side``)."""
    for digits in (2, 3, 4):
        scale = 10 ** digits
        v = rounding(x * scale) / scale
        if not keep_side or ((x > 1) == (v > 1) and (x < 1) == (v < 1)):
            return f"{v:.{digits}f}"
    return f"{x:.6f}"


def ratio_text(estimate: float, lo: float, hi: float, times: str = "×") -> str:
    """``1.11× (1.004–1.30)``: bounds rounded outward, so an interval never reads narrower than it was measured,
    and a bound (or the estimate of a decided ratio) on one side of 1 never reads as 1 or beyond it: a 'faster'
    never shows a lower bound of 1.00."""
    decided = lo > 1 or hi < 1
    low = _shown(lo, lambda v: math.floor(v + 1e-9), keep_side=True)
    high = _shown(hi, lambda v: math.ceil(v - 1e-9), keep_side=True)
    return f"{_shown(estimate, round, keep_side=decided)}{times} ({low}–{high})"


class Interval(BaseModel):
    """A point estimate with its bootstrap confidence interval."""

    estimate: float
    lo: float
    hi: float
    level: float = LEVEL
    n: int = Field(description="Observations (or pairs) behind the estimate.")
    clusters: int = Field(1, description="Passes (engine starts) behind the estimate.")

    @property
    def half_width_rel(self) -> float:
        """Half the interval's width relative to the estimate (0.03 = ±3 %)."""
        return (self.hi - self.lo) / 2 / abs(self.estimate) if self.estimate else float("inf")

    def ratio_text(self, times: str = "×") -> str:
        """This interval as a ratio: :func:`ratio_text`."""
        return ratio_text(self.estimate, self.lo, self.hi, times)


class PromptStats(BaseModel):
    prompt: str
    n: int
    median: Interval | None = None
    mean: float | None = None
    min: float | None = None
    max: float | None = None


class GpuArmStats(BaseModel):
    """One arm's GPU telemetry over its samples (core/host/telemetry.py); energy includes prefill."""

    tokens_per_joule: Interval | None = None
    energy_source: str | None = Field(None, description="'counter' or 'integrated power' (see samples).")
    power_mean_w: float | None = Field(None, description="Median over requests of the mean power.")
    power_max_w: float | None = None
    sm_clock_mhz: float | None = Field(None, description="Median over requests of the mean SM clock.")
    mem_clock_mhz: float | None = None
    temp_max_c: float | None = None
    vram_peak_mib: float | None = None
    idle_power_w: float | None = Field(None, description="Median power before the arm's engine loaded.")
    throttled: int = Field(0, description="Requests during which power or thermal slowdown was reported.")
    throttle_reasons: list[str] = Field(default_factory=list)


def describe_gpu(samples: Sequence[Sample], *, n_boot: int = N_BOOT, level: float = LEVEL, seed: int = 0,
                 key: str = "") -> GpuArmStats | None:
    """GPU figures of one arm's successful samples, or None when none carries telemetry."""
    ok = [s for s in samples if s.status == "ok" and s.gpu is not None]
    if not ok:
        return None
    g = [s.gpu for s in ok if s.gpu is not None]
    tpj = [(x.tokens_per_joule, s.pass_index) for s, x in zip(ok, g, strict=True) if x.tokens_per_joule]
    reasons = sorted({r for x in g for r in x.slowdowns})
    return GpuArmStats(
        tokens_per_joule=bootstrap_ci([v for v, _ in tpj], [p for _, p in tpj], n_boot=n_boot, level=level, seed=seed,
                                      key=f"tpj/{key}") if tpj else None,
        energy_source=next((x.energy_source for x in g if x.energy_source), None),
        power_mean_w=median_or_none([x.power_mean_w for x in g if x.power_mean_w is not None]),
        power_max_w=max((x.power_max_w for x in g if x.power_max_w is not None), default=None),
        sm_clock_mhz=median_or_none([x.sm_clock_mhz for x in g if x.sm_clock_mhz is not None]),
        mem_clock_mhz=median_or_none([x.mem_clock_mhz for x in g if x.mem_clock_mhz is not None]),
        temp_max_c=max((x.temp_max_c for x in g if x.temp_max_c is not None), default=None),
        vram_peak_mib=max((x.vram_used_mib for x in g if x.vram_used_mib is not None), default=None),
        throttled=sum(bool(x.slowdowns) for x in g), throttle_reasons=reasons)


def tokens_per_joule(s: Sample) -> float | None:
    return s.gpu.tokens_per_joule if s.gpu is not None else None


class ArmStats(BaseModel):
    """Everything the reports say about one arm; decode rates in tokens per second."""

    arm: str
    engine: str
    n: int = Field(0, description="Successful samples with a decode rate.")
    errors: int = 0
    flagged: int = Field(0, description="Samples carrying at least one accounting or noise flag.")
    busy: int = Field(0, description="Of the n samples, those during which the machine was busy (foreign-load, "
                                     "harness-lag, GPU throttle): the machine, not the engine, may have set "
                                     "their speed.")
    passes: int = Field(0, description="Passes (engine starts) that produced samples.")
    median: Interval | None = None
    mean: float | None = None
    min: float | None = None
    max: float | None = None
    combined: float | None = Field(None, description="Σ decode tokens / Σ decode seconds.")
    per_prompt: list[PromptStats] = Field(default_factory=list)
    has_draft_counts: bool = Field(False, description="The engine reported draft counts (possibly zero).")
    drafted: int = 0
    accepted: int = 0
    acceptance_range: tuple[float, float] | None = None
    server_median: float | None = Field(None, description="Median of the server's own decode rate.")
    event_count_median: float | None = Field(None, description="What a client counting SSE events would report.")
    max_tokens_per_event: int | None = None
    ttft_median: float | None = Field(None, description="Median time to first token, seconds.")
    prefill_median: float | None = Field(None, description="Median prefill tok/s.")
    boot_s_median: float | None = Field(None, description="Median engine boot time over its starts, seconds.")
    no_rate: dict[str, int] = Field(default_factory=dict, description=(
        "Successful samples without a usable decode rate, by reason (burst-delivery samples are left out of "
        "every statistic: their tokens arrived together, so their spacing was never measured)."))
    n_first_sources: dict[str, int] = Field(default_factory=dict, description=(
        "Samples by how their first-event tokens were counted (usage: exact; estimated: the text's share)."))
    gpu: GpuArmStats | None = Field(None, description="GPU telemetry (absent without a GPU).")
    roofline: Roofline | None = Field(None, description="Floor tok/s and efficiency against memory bandwidth.")
    # correctness (core/measure/gates.py, core/analysis/fairness.py), filled in when a run is summarized
    gates: dict[str, Any] = Field(default_factory=dict, description="Per quality gate: {status, detail, answer}.")
    identical_to_baseline: float | None = Field(None, description="Fraction of greedy outputs identical to the "
                                                "spec-off arm of the same engine and model.")
    spec_check: dict[str, Any] | None = Field(None, description="Greedy outputs against the reference arm: counts "
                                              "and the first diverging position of mismatches.")
    finish: dict[str, Any] | None = Field(None, description="Unexpected finish reasons, truncated streams, empty "
                                          "outputs.")

    @property
    def failed_gates(self) -> list[str]:
        return [name for name, g in self.gates.items() if g.get("status") in ("fail", "regressed")]

    @property
    def acceptance(self) -> float | None:
        return acceptance_rate(self.accepted, self.drafted)

    def prompt(self, name: str) -> PromptStats | None:
        return next((p for p in self.per_prompt if p.prompt == name), None)


# A gain inside this margin is no reason to switch a setting on, nor a loss inside it one to switch off: an interval
# within 1 ± margin is "equivalent" (an equivalence test: both one-sided bounds inside the margin); "off" is a
# recommendation only when every interval excludes a gain beyond it; an interval reaching past it decides nothing.
EQUIVALENCE_MARGIN = 0.03  # the default of workload.equivalence_margin


def margin_text(margin: float) -> str:
    """0.03 as '3%', 0.025 as '2.5%' (a margin is printed as set, never rounded to another)."""
    return f"{margin * 100:.3g}%"


_DECIDE = ("A 'not separable' ratio: about how many passes in all would decide it at the spread observed (clear of "
           "1, or within the equivalence margin); else null.")


class Comparison(BaseModel):
    """An arm against a reference: ratio of decode rates with its interval, and the verdict."""

    arm: str
    reference: str
    ratio: Interval
    verdict: Verdict
    paired: bool = Field(True, description="Paired by (prompt, mode, rep, pass); False across runs.")
    per_prompt: dict[str, Interval] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list, description="Caveats of this comparison (e.g. estimated counts).")
    comparable: dict[str, Any] | None = Field(None, description="Equal-work guard: {ok, reasons, checks} "
                                              "(core/analysis/fairness.py).")
    bands: list[dict[str, Any]] = Field(default_factory=list, description="Launch states: when one of the two "
                                        "arms is bimodal across launches, the paired ratio within each of its "
                                        "bands, or why a band has none (core/analysis/launches.py BandRatio).")
    margin: float = Field(EQUIVALENCE_MARGIN, description="The equivalence margin the verdict was read with: "
                          "'equivalent' is an interval within 1 ± margin (workload.equivalence_margin).")

    @computed_field(description=_DECIDE)  # type: ignore[prop-decorator]
    @property
    def passes_to_decide(self) -> int | None:
        return passes_to_verdict(self.ratio, self.margin)


def rng_for(seed: int, key: str) -> np.random.Generator:
    """A generator that depends only on the run seed and the statistic's name."""
    return np.random.default_rng(np.random.SeedSequence([seed & 0xFFFFFFFF, zlib.crc32(key.encode())]))


def _resample(clusters: np.ndarray, n_boot: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
    """Indices of ``n_boot`` two-stage resamples: clusters with replacement, then members of each.

    Returns ``(index, mask)`` of shape (n_boot, P*M) where M is the largest cluster; ``mask`` is None
    when every cluster has the same size, else it marks the positions that hold a real draw.
    """
    _, inv = np.unique(clusters, return_inverse=True)
    order = np.argsort(inv, kind="stable")
    sizes = np.bincount(inv)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    p, m = len(sizes), int(sizes.max())
    chosen = rng.integers(0, p, size=(n_boot, p))
    counts = sizes[chosen]
    within = np.floor(rng.random((n_boot, p, m)) * counts[..., None]).astype(np.intp)
    index = order[offsets[chosen][..., None] + np.minimum(within, counts[..., None] - 1)].reshape(n_boot, p * m)
    if (sizes == m).all():
        return index, None
    mask = (np.arange(m)[None, None, :] < counts[..., None]).reshape(n_boot, p * m)
    return index, mask


def _boot(values: np.ndarray, clusters: np.ndarray, n_boot: int, rng: np.random.Generator,
          stat: Literal["median", "mean"] | float) -> np.ndarray:
    index, mask = _resample(clusters, n_boot, rng)
    draws = values[index]
    if not isinstance(stat, str):  # a quantile (0.9: p90), linear like np.quantile; nanquantile is slow per row
        if mask is None:
            return np.asarray(np.quantile(draws, stat, axis=1), dtype=float)
        ordered = np.sort(np.where(mask, draws, np.inf), axis=1)
        pos = stat * (mask.sum(axis=1) - 1)
        lo = np.floor(pos).astype(np.intp)
        hi = np.minimum(lo + 1, ordered.shape[1] - 1)
        rows = np.arange(ordered.shape[0])
        a, b = ordered[rows, lo], ordered[rows, hi]
        return np.asarray(a + (pos - lo) * np.where(np.isfinite(b), b - a, 0.0), dtype=float)
    if mask is None:
        out = np.median(draws, axis=1) if stat == "median" else np.mean(draws, axis=1)
    else:
        draws = np.where(mask, draws, np.nan)
        out = np.nanmedian(draws, axis=1) if stat == "median" else np.nanmean(draws, axis=1)
    return np.asarray(out, dtype=float)


def _quantiles(boot: np.ndarray, level: float) -> tuple[float, float]:
    alpha = (1 - level) / 2
    lo, hi = np.quantile(boot, [alpha, 1 - alpha])
    return float(lo), float(hi)


def bootstrap_ci(values: Sequence[float], clusters: Sequence[object] | None = None, *, stat: Literal[
        "median", "mean"] | float = "median", n_boot: int = N_BOOT, level: float = LEVEL, seed: int = 0,
        key: str = "") -> Interval | None:
    """Percentile bootstrap interval of the median (or mean, or the quantile ``stat`` in (0, 1)) of ``values``.

    :param clusters: the pass of each value; passes are resampled first, then values within them.
    :param key: names the statistic, so its random draws do not depend on what else is computed.
    :returns: None when there are no values.
    """
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return None
    cl = np.asarray(clusters if clusters is not None else np.zeros(x.size, dtype=int))
    estimate = float(np.median(x) if stat == "median" else np.mean(x) if stat == "mean" else np.quantile(x, stat))
    boot = _boot(x, cl, n_boot, rng_for(seed, key), stat)
    lo, hi = _quantiles(boot, level)
    return Interval(estimate=estimate, lo=min(lo, estimate), hi=max(hi, estimate), level=level, n=int(x.size),
                    clusters=len(set(cl.tolist())))


def verdict(ratio: Interval, margin: float = EQUIVALENCE_MARGIN) -> Verdict:
    """'too few pairs' below :data:`MIN_PAIRS` observations (the interval is only their range); else 'faster' or
    'slower' only when the ratio's interval excludes 1; 'equivalent' when it lies within 1 ± ``margin``;
    otherwise 'not separable'. Every table, summary and gate reads its verdicts from here."""
    if too_few_pairs(ratio):
        return TOO_FEW
    if ratio.lo > 1:
        return "faster"
    if ratio.hi < 1:
        return "slower"
    if ratio.lo >= 1 - margin and ratio.hi <= 1 + margin:
        return "equivalent"
    return "not separable"


def passes_to_decide(estimate: float, lo: float, hi: float, floor: float, passes: int) -> int | None:
    """About how many passes in all would bring the interval clear of ``floor`` on the estimate's side, if the
    spread stays as observed (the half-width shrinks as one over the square root of the passes); None when the
    estimate sits on the line (no number of passes decides it)."""
    if estimate > floor:
        half, room = estimate - lo, estimate - floor
    elif estimate < floor:
        half, room = hi - estimate, floor - estimate
    else:
        return None
    need = round(passes * (half / room) ** 2, 6)  # rounded first: 12.0000000002 is 12 passes, not 13
    return max(passes + 1, math.ceil(need))


def passes_to_verdict(ratio: Interval, margin: float = EQUIVALENCE_MARGIN) -> int | None:
    """What would decide a 'not separable' ratio: about how many passes in all, at the spread observed (half-widths
    shrink as one over the square root of the passes), bring its interval clear of 1 on the estimate's side, or
    inside 1 ± ``margin``, whichever comes first. None when the verdict is decided already, or with one pass (no
    spread between launches to extrapolate from)."""
    n = ratio.clusters or 1
    if n < 2 or verdict(ratio, margin) != "not separable":
        return None
    est, below, above = ratio.estimate, ratio.estimate - ratio.lo, ratio.hi - ratio.estimate
    needs = []
    if est != 1:  # faster or slower: the bound on the estimate's side clears 1
        needs.append(n * ((below / (est - 1)) if est > 1 else (above / (1 - est))) ** 2)
    if 1 - margin < est < 1 + margin:  # equivalent: both bounds inside the margin
        needs.append(n * max(below / (est - (1 - margin)), above / (1 + margin - est)) ** 2)
    if not needs:
        return None
    return max(n + 1, math.ceil(round(min(needs), 6)))  # rounded first: 12.0000000002 is 12 passes, not 13


def undecided(ratio: Interval, margin: float = EQUIVALENCE_MARGIN) -> bool:
    """Not shown faster, yet a gain beyond ``margin`` is not excluded either: the interval cannot tell."""
    return ratio.lo <= 1 < ratio.hi and ratio.hi > 1 + margin


# flags that say the machine, not the engine, slowed a request (core/results/flags.py, machine=True): the
# launch-state test leaves such launches out, and an undecided gate names them as the likely cause
MACHINE_FLAGS = MACHINE


def busy_machine(s: Sample) -> bool:
    return first_flag(s.flags, MACHINE_FLAGS) is not None


# a sample carrying one of these never enters a statistic: its delivery or its counts cannot be trusted
# (core/results/flags.py, excludes=True)
EXCLUDING_FLAGS = EXCLUDING


def _excluded_by(s: Sample) -> str | None:
    return first_flag(s.flags, EXCLUDING_FLAGS)


def enters_statistics(s: Sample) -> bool:
    """A sample every statistic uses: no error, a positive decode rate, and no flag that keeps it out."""
    return s.status == "ok" and s.decode_tps is not None and s.decode_tps > 0 and _excluded_by(s) is None


def _ok_rates(samples: Iterable[Sample]) -> list[Sample]:
    return [s for s in samples if enters_statistics(s)]


def no_rate_reason(s: Sample) -> str | None:
    """Why a successful sample gives no decode rate to the statistics, or None when it does."""
    if s.status != "ok":
        return None
    if (excluded := _excluded_by(s)) is not None:
        return excluded
    if s.decode_tps is not None and s.decode_tps > 0:
        return None
    flagged = next((flag_detail(f) for f in s.flags if flag_name(f) == NO_RATE.name), None)
    return flagged or ("decode rate not positive" if s.decode_tps is not None else "no decode rate")


def first_event_caveat(arm: Iterable[Sample], reference: Iterable[Sample]) -> str | None:
    """A note when two arms' first-event tokens were not counted the same exact way (AUDIT M5).

    An estimate errs differently for an arm that packs many tokens per event (speculative) than for one
    that sends one, so the ratio may carry a bias that its interval does not show.
    """
    a = {s.n_first_source for s in _ok_rates(arm)}
    r = {s.n_first_source for s in _ok_rates(reference)}
    if "estimated" not in a | r:
        return None
    return (f"first-event tokens estimated ({', '.join(sorted(x or '?' for x in a))} vs "
            f"{', '.join(sorted(x or '?' for x in r))}): the ratio may be biased by the estimate")


def _rate(s: Sample) -> float:
    """Decode tok/s of a sample that passed :func:`_ok_rates`."""
    return float(s.decode_tps or 0.0)


def _point(s: Sample) -> tuple[object, ...]:
    """Where a request sits in the design: prompt, mode, rep, pass, and any swept value (depth, ...)."""
    swept = tuple(getattr(s, f, None) for f in ("depth", "concurrency", "max_tokens"))
    rate = (s.rate,) if s.rate is not None else ()  # only open-loop points: other runs keep their keys and draws
    return (s.prompt, s.mode, s.rep, s.pass_index, *swept, *rate)


def _keyed(samples: Iterable[Sample]) -> dict[tuple[object, ...], Sample]:
    """Samples by pairing key; requests sharing a point (streams of one batch) are told apart by order."""
    seen: dict[tuple[object, ...], int] = defaultdict(int)
    out = {}
    for s in samples:
        point = _point(s)
        out[(*point, seen[point])] = s
        seen[point] += 1
    return out


# Every paired ratio computed in this process, by what it compares (see paired_ratio); bounded, and pure:
# the key holds the values themselves, so a stale entry cannot be returned for other data.
_PAIRED: dict[tuple[object, ...], Interval | None] = {}
_PAIRED_MAX = 20_000


def paired_ratio(arm: Iterable[Sample], reference: Iterable[Sample], *, prompt: str | None = None,
                 n_boot: int = N_BOOT, level: float = LEVEL, seed: int = 0, key: str = "",
                 value: Callable[[Sample], float | None] | None = None, value_name: str = "decode",
                 where: Callable[[Sample], bool] | None = None) -> Interval | None:
    """Median of per-request ratios arm/reference, paired on (prompt, mode, rep, pass), with its interval.

    Ratios are resampled in log space (the median commutes with the logarithm), passes first.

    One comparison per pair: the random draws depend only on what is compared — the value, the two arms and
    the requests paired (in a fixed order) — so every table, plot, decision-map cell and summary section that
    pairs the same requests shows the same interval and verdict, and it is computed once.

    :param value: what to compare (default the decode rate; e.g. tokens per joule, named by ``value_name``).
    :param key: an extra salt for independent trials on the same requests (benchmarks); reports leave it empty.
    :param where: keep only the pairs whose ``arm`` request passes it, chosen after pairing (the streams of one
        batch are paired by their order, which filtering before pairing would shift).
    :returns: None when no request has a partner.
    """
    get = value or _rate

    def usable(group: Iterable[Sample]) -> list[Sample]:
        if value is None:
            return _ok_rates(group)
        return [s for s in group if s.status == "ok" and (v := value(s)) is not None and v > 0]

    mine = [s for s in usable(arm) if prompt is None or s.prompt == prompt]
    ref = _keyed(s for s in usable(reference) if prompt is None or s.prompt == prompt)
    pairs = sorted(((k, s, ref[k]) for k, s in _keyed(mine).items() if k in ref and (where is None or where(s))),
                   key=lambda p: repr(p[0]))
    logs = [float(np.log(float(get(s) or 0) / float(get(r) or 1))) for _, s, r in pairs]
    passes = [s.pass_index for _, s, _ in pairs]
    names = (sorted({s.arm for _, s, _ in pairs}), sorted({r.arm for _, _, r in pairs}))
    identity = f"{value_name}|{names}|{zlib.crc32(repr([k for k, _, _ in pairs]).encode())}|{key}"
    memo = (identity, tuple(logs), tuple(passes), n_boot, level, seed)
    if memo in _PAIRED:
        return _PAIRED[memo]
    ci = bootstrap_ci(logs, passes, n_boot=n_boot, level=level, seed=seed, key=identity)
    out = None if ci is None else ci.model_copy(update={
        "estimate": float(np.exp(ci.estimate)), "lo": float(np.exp(ci.lo)), "hi": float(np.exp(ci.hi))})
    if len(_PAIRED) >= _PAIRED_MAX:
        _PAIRED.clear()
    _PAIRED[memo] = out
    return out


def unpaired_ratio(arm: Iterable[Sample], reference: Iterable[Sample], *, n_boot: int = N_BOOT,
                   level: float = LEVEL, seed: int = 0, key: str = "") -> Interval | None:
    """Ratio of medians arm/reference for samples that cannot be paired (runs made at different times).

    Each side is resampled on its own (passes, then requests); only prompts and modes present on both
    sides are used, so a different prompt mix cannot pass for a speed change.
    """
    a, r = _ok_rates(arm), _ok_rates(reference)

    def cell(s: Sample) -> tuple[object, ...]:
        point = _point(s)
        return point[:2] + point[4:]  # the point without rep and pass

    common = {cell(s) for s in a} & {cell(s) for s in r}
    a = [s for s in a if cell(s) in common]
    r = [s for s in r if cell(s) in common]
    if not a or not r:
        return None
    xa = np.array([_rate(s) for s in a], dtype=float)
    xr = np.array([_rate(s) for s in r], dtype=float)
    ba = _boot(xa, np.array([s.pass_index for s in a]), n_boot, rng_for(seed, key + "/arm"), "median")
    br = _boot(xr, np.array([s.pass_index for s in r]), n_boot, rng_for(seed, key + "/ref"), "median")
    estimate = float(np.median(xa) / np.median(xr))
    lo, hi = _quantiles(ba / br, level)
    return Interval(estimate=estimate, lo=min(lo, estimate), hi=max(hi, estimate), level=level,
                    n=min(len(a), len(r)), clusters=min(len({s.pass_index for s in a}), len({s.pass_index for s in r})))


def median_or_none(values: list[float]) -> float | None:
    """The median, or None when nothing was measured."""
    return statistics.median(values) if values else None


def describe_arm(name: str, samples: Sequence[Sample], prompts: Sequence[str] = (), *, boot_s: Sequence[float] = (),
                 n_boot: int = N_BOOT, level: float = LEVEL, seed: int = 0) -> ArmStats:
    """Descriptive figures and median intervals of one arm (all its samples, any pass)."""
    ok = _ok_rates(samples)
    rates = [_rate(s) for s in ok]
    stats = ArmStats(arm=name, engine=samples[0].engine if samples else "?", n=len(ok),
                     errors=sum(s.status == "error" for s in samples), flagged=sum(bool(s.flags) for s in samples),
                     busy=sum(busy_machine(s) for s in ok), passes=len({s.pass_index for s in ok}),
                     boot_s_median=median_or_none([b for b in boot_s if b]))
    if rates:
        stats.median = bootstrap_ci(rates, [s.pass_index for s in ok], n_boot=n_boot, level=level, seed=seed,
                                    key=f"median/{name}")
        stats.mean, stats.min, stats.max = statistics.fmean(rates), min(rates), max(rates)
        tokens = sum((s.completion_tokens or 0) - (s.n_first or 0) for s in ok)
        seconds = sum(s.decode_s or 0.0 for s in ok)
        stats.combined = tokens / seconds if seconds else None
    names = list(prompts) + sorted({s.prompt for s in ok} - set(prompts))
    for p in names:
        group = [s for s in ok if s.prompt == p]
        values = [_rate(s) for s in group]
        if not values:
            continue
        stats.per_prompt.append(PromptStats(
            prompt=p, n=len(values), mean=statistics.fmean(values), min=min(values), max=max(values),
            median=bootstrap_ci(values, [s.pass_index for s in group], n_boot=n_boot, level=level, seed=seed,
                                key=f"median/{name}/{p}")))
    with_drafts = [s for s in ok if s.drafted is not None]
    stats.has_draft_counts = bool(with_drafts)
    stats.drafted = sum(s.drafted or 0 for s in with_drafts)
    stats.accepted = sum(s.accepted or 0 for s in with_drafts)
    acc = [s.acceptance for s in with_drafts if s.acceptance is not None]
    stats.acceptance_range = (min(acc), max(acc)) if acc else None
    stats.server_median = median_or_none([s.server_decode_tps for s in ok if s.server_decode_tps is not None])
    stats.event_count_median = median_or_none([s.event_count_decode_tps for s in ok
                                               if s.event_count_decode_tps is not None])
    per_event = [s.max_tokens_per_event for s in ok if s.max_tokens_per_event is not None]
    stats.max_tokens_per_event = max(per_event) if per_event else None
    stats.ttft_median = median_or_none([s.ttft_s for s in ok if s.ttft_s is not None])
    stats.prefill_median = median_or_none([s.prefill_tps for s in ok if s.prefill_tps is not None])
    for s in samples:
        if (why := no_rate_reason(s)) is not None:
            stats.no_rate[why] = stats.no_rate.get(why, 0) + 1
        if s.status == "ok" and s.n_first_source:
            stats.n_first_sources[s.n_first_source] = stats.n_first_sources.get(s.n_first_source, 0) + 1
    stats.gpu = describe_gpu(samples, n_boot=n_boot, level=level, seed=seed, key=name)
    return stats


def _by_arm(samples: Iterable[Sample], arm_order: Sequence[str]) -> dict[str, list[Sample]]:
    groups: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        groups[s.arm].append(s)
    names = [a for a in arm_order if a in groups] + sorted(a for a in groups if a not in arm_order)
    return {a: groups[a] for a in names}


def describe_arms(samples: Iterable[Sample], arm_order: Sequence[str] = (), prompts: Sequence[str] = (), *,
                  boot_s: dict[str, list[float]] | None = None, n_boot: int = N_BOOT, level: float = LEVEL,
                  seed: int = 0) -> list[ArmStats]:
    """:func:`describe_arm` for every arm, in ``arm_order`` (unknown arms last, by name)."""
    return [describe_arm(a, group, prompts, boot_s=(boot_s or {}).get(a, []), n_boot=n_boot, level=level, seed=seed)
            for a, group in _by_arm(samples, arm_order).items()]


def compare_to_baseline(samples: Iterable[Sample], baseline: str, arm_order: Sequence[str] = (),
                        prompts: Sequence[str] = (), *, n_boot: int = N_BOOT, level: float = LEVEL,
                        seed: int = 0, energy: bool = False, margin: float = EQUIVALENCE_MARGIN
                        ) -> list[Comparison]:
    """Paired ratio and verdict of every other arm against ``baseline``: of decode rates (overall and per
    prompt), or with ``energy`` of tokens per joule ('faster' = more tok/J; GPU runs)."""
    value, name_of_value = (tokens_per_joule, "tokens per joule") if energy else (None, "decode")
    groups = _by_arm(samples, arm_order)
    ref = groups.get(baseline, [])
    out = []
    for name, group in groups.items():
        if name == baseline:
            continue
        ratio = paired_ratio(group, ref, n_boot=n_boot, level=level, seed=seed, value=value,
                             value_name=name_of_value)
        if ratio is None:
            continue
        if energy:
            out.append(Comparison(arm=name, reference=baseline, ratio=ratio, verdict=verdict(ratio, margin),
                                  margin=margin))
            continue
        names = list(prompts) or sorted({s.prompt for s in group})
        per_prompt = {p: r for p in names
                      if (r := paired_ratio(group, ref, prompt=p, n_boot=n_boot, level=level, seed=seed))
                      is not None}
        caveat = first_event_caveat(group, ref)
        out.append(Comparison(arm=name, reference=baseline, ratio=ratio, verdict=verdict(ratio, margin),
                              margin=margin, per_prompt=per_prompt, notes=[caveat] if caveat else []))
    return out


def median_half_widths(samples: Iterable[Sample], *, n_boot: int = N_BOOT, level: float = LEVEL,
                       seed: int = 0) -> dict[str, float]:
    """Relative half-width of each arm's median interval (what ``--until-ci`` drives below its target)."""
    out = {}
    for name, group in _by_arm(samples, ()).items():
        ok = _ok_rates(group)
        ci = bootstrap_ci([_rate(s) for s in ok], [s.pass_index for s in ok],
                          n_boot=n_boot, level=level, seed=seed, key=f"median/{name}")
        out[name] = ci.half_width_rel if ci else float("inf")
    return out


MIN_ADAPTIVE_PASSES = 3  # two passes give the pass-level bootstrap only three distinct draws: too few to trust


def ratio_half_widths(samples: Iterable[Sample], baseline: str, *, n_boot: int = N_BOOT, level: float = LEVEL,
                      seed: int = 0) -> dict[str, float]:
    """Relative half-width of every other arm's paired ratio interval against ``baseline``: the interval its
    verdict reads (same key, so the same draws as the report's)."""
    groups = _by_arm(samples, ())
    ref = groups.get(baseline, [])
    out = {}
    for name, group in groups.items():
        if name != baseline:
            ci = paired_ratio(group, ref, n_boot=n_boot, level=level, seed=seed)
            out[f"{name}/{baseline}"] = ci.half_width_rel if ci else float("inf")
    return out


VERDICT_ALPHA = 0.05  # what --stop-on-verdict may spend, over all its looks, on stopping with a clear verdict


def verdict_stop_level(passes_done: int, max_passes: int, alpha: float = VERDICT_ALPHA) -> float:
    """The interval level an early verdict must clear after ``passes_done`` passes (alpha spending).

    ``alpha`` is spent in proportion to the passes run (spent(k) = alpha * k / max_passes): the first look,
    at :data:`MIN_ADAPTIVE_PASSES`, gets the share of the passes before it, every later pass one share.
    Each look's interval is read at 1 minus its share, so the chance that an identical pair stops early with
    a false verdict is at most ``alpha`` over all looks together (Bonferroni: it holds whatever the looks'
    correlation), instead of growing with every look as rereading a 95 % interval after each pass would.
    """
    k = max(MIN_ADAPTIVE_PASSES, min(passes_done, max_passes))
    spent_before = 0.0 if k == MIN_ADAPTIVE_PASSES else alpha * (k - 1) / max_passes
    return 1.0 - (alpha * k / max_passes - spent_before)


def clear_verdicts(samples: Iterable[Sample], baseline: str, level: float, *, n_boot: int = N_BOOT,
                   seed: int = 0, margin: float = EQUIVALENCE_MARGIN) -> dict[str, str]:
    """Every other arm's verdict against ``baseline`` read from its paired ratio interval at ``level``;
    "equivalent" is a decided outcome too, so an identical pair stops early instead of running to --max-passes."""
    groups = _by_arm(samples, ())
    ref = groups.get(baseline, [])
    out: dict[str, str] = {}
    for name, group in groups.items():
        if name != baseline:
            ci = paired_ratio(group, ref, n_boot=n_boot, level=level, seed=seed)
            out[f"{name}/{baseline}"] = verdict(ci, margin) if ci else "not separable"
    return out


def needs_more_passes(samples: Iterable[Sample], passes_done: int, target: float, max_passes: int, *,
                      baseline: str | None = None, n_boot: int = N_BOOT, seed: int = 0,
                      stop_on_verdict: bool = False, alpha: float = VERDICT_ALPHA,
                      margin: float = EQUIVALENCE_MARGIN) -> tuple[bool, str]:
    """The ``--until-ci`` rule: another pass while some interval's relative half-width exceeds ``target``.

    With a ``baseline`` and other arms, the intervals are the paired ratios against it, which the verdicts
    read; an arm's median mixes prompts of different speeds, so its interval can stay wide long after the
    ratio is tight. Without (one arm), each arm's median. Stops at ``max_passes``; never stops before
    :data:`MIN_ADAPTIVE_PASSES`.

    ``stop_on_verdict`` (``--stop-on-verdict``) also lets an arm be done before its width is reached when
    its ratio interval at :func:`verdict_stop_level` excludes 1 (a clear "faster" or "slower") or lies within
    1 ± ``margin`` ("equivalent"): a group-
    sequential early stop whose looks share ``alpha``, so peeking after every pass does not multiply false
    verdicts. The run stops when every arm is done either way. Returns the decision and a line saying why.
    """
    samples = list(samples)
    arms = {s.arm for s in samples}
    ratios = baseline in arms and len(arms) > 1
    widths = (ratio_half_widths(samples, baseline, n_boot=n_boot, seed=seed) if baseline is not None and ratios
              else median_half_widths(samples, n_boot=n_boot, seed=seed))
    worst = max(widths.items(), key=lambda kv: kv[1], default=("–", float("inf")))
    what = "ratio" if ratios else "median"
    status = f"widest {what} CI after {passes_done} pass(es): {worst[0]} ±{worst[1]:.1%} (target ±{target:.1%})"
    if passes_done >= max_passes:
        return False, status + f"; stopping at --max-passes {max_passes}"
    if passes_done < MIN_ADAPTIVE_PASSES:
        return True, status + f"; at least {MIN_ADAPTIVE_PASSES} passes are needed"
    wide = {name for name, w in widths.items() if w > target}
    if not wide:
        return False, status + "; target reached"
    if stop_on_verdict and ratios and baseline is not None:
        level = verdict_stop_level(passes_done, max_passes, alpha)
        clear = {name: v for name, v in clear_verdicts(samples, baseline, level, n_boot=n_boot, seed=seed,
                                                          margin=margin).items()
                 if name in wide and v not in ("not separable", TOO_FEW)}
        if set(clear) == wide:
            said = ", ".join(f"{name} {v}" for name, v in sorted(clear.items()))
            return False, status + f"; clear verdict at the {level:.1%} level ({said}): stopping early"
    return True, status + "; adding a pass"
