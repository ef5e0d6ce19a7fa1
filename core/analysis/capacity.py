"""Capacity at an SLO: each arm's boundary with an interval, its shape, and the paired ratio between arms.

A *probe* is one arm at one load (N streams, or a request rate) once: a batch or an open-loop schedule, each of
its requests reduced to the values the constraints read (a failed request counts as infinitely slow). A load
*holds* for an arm when, over its replicates' requests pooled, every constraint's percentile is within its limit
(and the goodput share, if asked, is reached). The search (core/run/capacity.py) leaves for each arm a bracket:
the highest load that held below the lowest that did not.

The boundary's interval resamples the replicates. In each bootstrap draw every round of the search draws one set
of replicate indices, used by every arm probed in that round (their replicates ran back to back, so a drift in
the machine moves them together and cancels in the ratio); each arm's loads are judged again on the drawn
requests, giving a bracket [held, failed] per draw. An arm's interval runs from the 2.5 % quantile of the held
ends to the 97.5 % quantile of the failed ends, so it is never narrower than the search's resolution; the paired
ratio's interval is built the same way from (held_arm / failed_baseline, failed_arm / held_baseline) in each
draw. Verdicts use the one :func:`~bakeoff.core.analysis.stats.verdict` every comparison uses, read in capacity
words ("carries more").

The shape: *cliff* when the binding constraint's value at the first failing load is at least twice what the held
loads' trend predicts there (a straight line in log value against log load, fitted to the held loads within a
factor 4 below it; a goodput constraint reads the share failing); *smooth* otherwise; *unknown* without a held
load to fit. The monotonicity
check lists any load that held above one that failed.

A file with structured requests is searched once per workload *kind* (plain prompts, structured ones): every
probe names its kind, and each kind has its own boundary per arm and its own paired ratio (a kind is only ever
compared with the same kind of another arm; the bootstrap resamples each kind's rounds on their own).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from ..config.capacity import CapacitySection
from .stats import LEVEL, Interval, ratio_text, rng_for, verdict

__all__ = ["Kind", "Probe", "LevelRow", "ArmBoundary", "CapacityComparison", "CapacityResult", "level_margins",
           "probe_hopeless", "analyze_capacity", "capacity_words", "SCHEMA_VERSION", "N_BOOT_CAPACITY",
           "CAPACITY_FILE", "read_capacity", "write_capacity"]

SCHEMA_VERSION = 2  # 2: boundaries and comparisons name their workload kind
CAPACITY_FILE = "capacity.json"  # in the run directory, beside run.json
N_BOOT_CAPACITY = 1000
CLIFF_JUMP = 2.0  # the first failing load's binding value over what the held loads' trend predicts: a cliff
TREND_SPAN = 4.0  # the trend is fitted over the held loads within this factor below the first failing one

Shape = Literal["cliff", "smooth", "unknown"]
Censored = Literal["below", "above"]
Kind = Literal["plain", "structured", "sessions"]  # what a probe's requests are (sessions: turns of replays)


@dataclass
class Probe:
    """One arm at one load, one replicate: what its requests gave."""

    arm: str
    level: float
    replicate: int
    round: int
    values: dict[str, list[float]]  # constraint label -> one value per request (inf: failed or missing)
    met: list[bool] = field(default_factory=list)  # goodput: each request met the tier
    cut: str | None = None  # why the probe was stopped early (over-saturated), None if it ran whole
    tokens: int = 0
    energy_j: float | None = None  # the watched GPUs' energy over the probe, where telemetry is on
    wall_s: float = 0.0
    kind: Kind = "plain"

    @property
    def requests(self) -> int:
        return max((len(v) for v in self.values.values()), default=len(self.met))


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.inf
    return float(np.percentile(np.asarray(values, dtype=float), q, method="higher"))


def level_margins(probes: Sequence[Probe], section: CapacitySection) -> tuple[dict[str, float], dict[str, float]]:
    """Each constraint's margin (limit / value - 1 for latencies, share / wanted - 1 for goodput: >= 0 holds) and
    value over the probes' requests pooled; a cut probe makes every margin negative."""
    margins: dict[str, float] = {}
    values: dict[str, float] = {}
    for c in section.constraints:
        pooled = [v for p in probes for v in p.values.get(c.label, [])]
        value = _percentile(pooled, c.percentile)
        values[c.label] = value
        margins[c.label] = c.max_s / value - 1 if value > 0 else 1e9  # finite: it is written as JSON
    if section.goodput is not None:
        met = [m for p in probes for m in p.met]
        share = sum(met) / len(met) if met else 0.0
        values[section.goodput.label] = share
        margins[section.goodput.label] = share / section.goodput.min_share - 1
    if any(p.cut for p in probes):
        margins = {k: min(m, -1e-9) for k, m in margins.items()}
    return margins, values


def probe_hopeless(probe: Probe, section: CapacitySection) -> bool:
    """Over-saturation: the probe was cut, or a latency constraint reads ``section.hopeless`` times its limit
    (or no request met the goodput tier); its load is recorded failing without further replicates."""
    if probe.cut:
        return True
    margins, _ = level_margins([probe], section)
    floor = 1 / section.hopeless - 1
    latency = any(margins[c.label] <= floor for c in section.constraints)
    goodput = section.goodput is not None and margins[section.goodput.label] <= -1
    return latency or goodput


class LevelRow(BaseModel):
    """One load of one arm: its replicates' verdict."""

    level: float
    round: int
    replicates: int
    requests: int
    held: bool
    margins: dict[str, float] = Field(description="Constraint label -> margin (>= 0: holds).")
    values: dict[str, float | None] = Field(description="Constraint label -> percentile in seconds (goodput: "
                                            "share); None: not one request gave a value (all failed or unsent).")
    cut: str | None = Field(None, description="Why a replicate was stopped early (over-saturation).")


class ArmBoundary(BaseModel):
    """One arm's capacity for one kind of request."""

    arm: str
    kind: Kind = Field("plain", description="The workload kind probed: plain prompts or structured requests.")
    estimate: float | None = Field(None, description="Highest load at which every constraint holds (streams: "
                                   "the highest whole number that held when the bracket is 1 wide; else "
                                   "interpolated in log load where the binding margin crosses zero).")
    lo: float | None = Field(None, description="The interval's lower end (None: below the first load).")
    hi: float | None = Field(None, description="The interval's upper end (None: held up to capacity.max).")
    held: float | None = Field(None, description="The search's bracket: highest load that held ...")
    failed: float | None = Field(None, description="... and the lowest that failed above it.")
    censored: Censored | None = Field(None, description="below: failed at the first load; above: held at max.")
    binding: str | None = Field(None, description="The constraint that fails first (smallest margin at the "
                                "first failing load; at the highest load when none failed).")
    shape: Shape = "unknown"
    jump: float | None = Field(None, description="The binding value at the first failing load over what the held "
                               "loads' trend predicts there (>= 2: a cliff).")
    trend: float | None = Field(None, description="That trend's log-log slope (1: the value grows as the load).")
    monotone: bool = True
    monotone_note: str | None = None
    levels: list[LevelRow] = Field(default_factory=list)
    probes: int = Field(0, description="Probes spent (loads × replicates run).")
    requests: int = 0
    tokens_per_joule: float | None = Field(None, description="At the highest load that held, where GPU telemetry "
                                           "is on: the probe's tokens / the watched GPUs' energy over it.")


class CapacityComparison(BaseModel):
    """One arm's boundary against the baseline's for one kind of request, paired by round and replicate."""

    arm: str
    baseline: str
    kind: Kind = Field("plain", description="The workload kind both boundaries are of.")
    ratio: Interval | None = None
    difference: Interval | None = None
    verdict: str = Field(description="carries more | carries less | carries the same | not separable | "
                         "too few pairs | censored.")
    text: str


def _plain_only() -> list[Kind]:
    return ["plain"]


class CapacityResult(BaseModel):
    """What ``bakeoff capacity`` found: the file's capacity.json."""

    schema_version: int = SCHEMA_VERSION
    load: Literal["streams", "rate"]
    constraints: list[str]
    strategy: str
    baseline: str
    kinds: list[Kind] = Field(default_factory=_plain_only, description="The workload kinds searched, in the "
                              "order they ran; every arm has a boundary per kind.")
    arms: list[ArmBoundary]
    comparisons: list[CapacityComparison] = Field(default_factory=list)
    probes: int = Field(0, description="Probes for all arms (loads × replicates).")
    levels: int = Field(0, description="Loads probed, all arms together.")
    level: float = LEVEL

    def arm(self, name: str, kind: Kind = "plain") -> ArmBoundary | None:
        return next((a for a in self.arms if a.arm == name and a.kind == kind), None)


_WORDS = {"faster": "carries more", "slower": "carries less", "equivalent": "carries the same"}


def capacity_words(v: str) -> str:
    """A comparison verdict in capacity words."""
    return _WORDS.get(v, v)


def _by_level(probes: Iterable[Probe]) -> dict[float, list[Probe]]:
    out: dict[float, list[Probe]] = {}
    for p in probes:
        out.setdefault(p.level, []).append(p)
    return dict(sorted(out.items()))


def _bracket(held: Mapping[float, bool]) -> tuple[float | None, float | None]:
    """(highest held load below the lowest failing one, lowest failing load)."""
    failed = min((lv for lv, ok in held.items() if not ok), default=None)
    below = [lv for lv, ok in held.items() if ok and (failed is None or lv < failed)]
    return (max(below) if below else None), failed


def _binding(rows: Sequence[LevelRow], failed: float | None) -> str | None:
    if not rows:
        return None
    row = next((r for r in rows if r.level == failed), rows[-1])
    return min(row.margins, key=lambda k: row.margins[k]) if row.margins else None


def _badness(row: LevelRow, label: str) -> float:
    v = row.values[label]
    if v is None:
        return math.inf
    return (1 - v + 1e-3) if label.startswith("goodput") else v


def _shape(rows: Sequence[LevelRow], failed: float | None, binding: str | None
           ) -> tuple[Shape, float | None, float | None]:
    """(shape, jump, trend): the binding value at the first failing load over what the held loads' log-log
    trend (least squares over the held loads within a factor 4 below) predicts there, and that trend's slope."""
    if failed is None or binding is None:
        return "unknown", None, None
    held = [r for r in rows if r.held and failed / TREND_SPAN <= r.level < failed
            and math.isfinite(_badness(r, binding)) and _badness(r, binding) > 0]
    top = next(r for r in rows if r.level == failed)
    if not held:
        return "unknown", None, None
    x = np.log([r.level for r in held])
    y = np.log([_badness(r, binding) for r in held])
    slope = float(np.polyfit(x, y, 1)[0]) if len(held) >= 2 and np.ptp(x) > 0 else 0.0
    slope = max(slope, 0.0)
    actual = _badness(top, binding)
    predicted = math.exp(float(y[-1]) + slope * (math.log(failed) - float(x[-1])))
    jump = actual / predicted if math.isfinite(actual) else math.inf
    return ("cliff" if jump >= CLIFF_JUMP else "smooth"), (jump if math.isfinite(jump) else None), slope


def _monotone(rows: Sequence[LevelRow]) -> tuple[bool, str | None]:
    first_fail = next((r for r in rows if not r.held), None)
    if first_fail is None:
        return True, None
    above = [r.level for r in rows if r.held and r.level > first_fail.level]
    if not above:
        return True, None
    return False, (f"held at {', '.join(f'{lv:g}' for lv in above)} above a failure at {first_fail.level:g}: "
                   "the SLO is not monotone in load here (noise, or the engine behaves differently)")


def _estimate(rows: Sequence[LevelRow], held: float | None, failed: float | None, binding: str | None,
              streams: bool) -> float | None:
    if held is None:
        return None
    if failed is None or binding is None:
        return held
    if streams and failed - held <= 1:
        return held
    a = next(r for r in rows if r.level == held)
    b = next(r for r in rows if r.level == failed)
    ma, mb = a.margins[binding], max(b.margins[binding], -1.0)
    t = ma / (ma - mb) if ma - mb > 0 else 0.0
    value = held * (failed / held) ** min(max(t, 0.0), 1.0)
    return float(math.floor(value)) if streams else value


def _rows(probes: Sequence[Probe], section: CapacitySection) -> list[LevelRow]:
    rows = []
    for lv, group in _by_level(probes).items():
        margins, values = level_margins(group, section)
        rows.append(LevelRow(level=lv, round=group[0].round, replicates=len(group),
                             requests=sum(p.requests for p in group), held=all(m >= 0 for m in margins.values()),
                             margins=margins, values={k: v if math.isfinite(v) else None for k, v in values.items()},
                             cut=next((p.cut for p in group if p.cut), None)))
    return rows


def _tokens_per_joule(probes: Sequence[Probe], level: float | None) -> float | None:
    at = [p for p in probes if p.level == level and p.energy_j]
    if not at:
        return None
    return sum(p.tokens for p in at) / sum(p.energy_j or 0.0 for p in at)


def _boundary(arm: str, kind: Kind, probes: Sequence[Probe], section: CapacitySection) -> ArmBoundary:
    rows = _rows(probes, section)
    held, failed = _bracket({r.level: r.held for r in rows})
    binding = _binding(rows, failed)
    shape, across, below = _shape(rows, failed, binding)
    monotone, note = _monotone(rows)
    censored: Censored | None = "below" if held is None else ("above" if failed is None else None)
    return ArmBoundary(arm=arm, kind=kind, estimate=_estimate(rows, held, failed, binding, section.load == "streams"),
                       held=held, failed=failed, censored=censored, binding=binding, shape=shape,
                       jump=across, trend=below, monotone=monotone, monotone_note=note, levels=rows,
                       probes=len(probes), requests=sum(p.requests for p in probes),
                       tokens_per_joule=_tokens_per_joule(probes, held))


def _draw_brackets(by_arm: Mapping[str, Sequence[Probe]], section: CapacitySection, n_boot: int,
                   rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Per arm, an (n_boot, 2) array of bracket ends (held, failed) judged on resampled replicates; NaN where
    a draw has no held load (held) or no failing one (failed)."""
    rounds = sorted({p.round for ps in by_arm.values() for p in ps})
    most = max((p.replicate for ps in by_arm.values() for p in ps), default=0) + 1
    out = {arm: np.full((n_boot, 2), np.nan) for arm in by_arm}
    levels = {arm: _by_level(ps) for arm, ps in by_arm.items()}
    cache: dict[tuple[str, float, tuple[int, ...]], bool] = {}  # pooling ignores order: few distinct draws

    def holds(arm: str, lv: float, group: Sequence[Probe], idx: np.ndarray) -> bool:
        reps = sorted(group, key=lambda p: p.replicate)
        chosen = tuple(sorted(int(i) % len(reps) for i in idx))
        key = (arm, lv, chosen)
        if key not in cache:
            margins, _ = level_margins([reps[i] for i in chosen], section)
            cache[key] = all(m >= 0 for m in margins.values())
        return cache[key]

    for b in range(n_boot):
        draws = {r: rng.integers(0, most, size=most) for r in rounds}
        for arm, by_lv in levels.items():
            verdicts = {lv: holds(arm, lv, group, draws[group[0].round]) for lv, group in by_lv.items()}
            held, failed = _bracket(verdicts)
            out[arm][b] = (np.nan if held is None else held, np.nan if failed is None else failed)
    return out


def _q(values: np.ndarray, q: float) -> float | None:
    finite = values[np.isfinite(values)]
    if finite.size < values.size * 0.5:  # censored in most draws: no bound on this side
        return None
    return float(np.quantile(finite, q)) if finite.size else None


def analyze_capacity(probes: Sequence[Probe], section: CapacitySection, arm_order: Sequence[str], baseline: str,
                     *, n_boot: int = N_BOOT_CAPACITY, level: float = LEVEL, seed: int = 0) -> CapacityResult:
    """Each arm's boundary and interval per workload kind, and every other arm's paired ratio to ``baseline``'s
    of the same kind (rows arm by arm, each arm's kinds in the order they ran)."""
    kinds = list(dict.fromkeys(p.kind for p in probes)) or ["plain"]
    alpha = (1 - level) / 2
    rng = rng_for(seed, "capacity")  # one stream drawn kind after kind: a plain-only search draws as it always did
    boundaries: dict[tuple[str, Kind], ArmBoundary] = {}
    comparisons: list[CapacityComparison] = []
    for kind in kinds:
        by_arm = {arm: [p for p in probes if p.arm == arm and p.kind == kind] for arm in arm_order}
        brackets = _draw_brackets(by_arm, section, n_boot, rng)
        for arm, ps in by_arm.items():
            a = boundaries[arm, kind] = _boundary(arm, kind, ps, section)
            ends = brackets[arm]
            a.lo, a.hi = _q(ends[:, 0], alpha), _q(ends[:, 1], 1 - alpha)
            if a.estimate is not None:
                a.lo = min(a.lo, a.estimate) if a.lo is not None else None
                a.hi = max(a.hi, a.estimate) if a.hi is not None else None
        base = boundaries.get((baseline, kind))
        comparisons += [_compare(boundaries[arm, kind], base, brackets, section, alpha, level, kinds != ["plain"])
                        for arm in arm_order if base is not None and arm != baseline]
    arms = [boundaries[arm, kind] for arm in arm_order for kind in kinds]
    return CapacityResult(load=section.load, constraints=section.labels, strategy=section.strategy,
                          baseline=baseline, kinds=kinds, arms=arms, comparisons=comparisons, probes=len(probes),
                          levels=sum(len(a.levels) for a in arms), level=level)


def _compare(a: ArmBoundary, base: ArmBoundary, brackets: Mapping[str, np.ndarray], section: CapacitySection,
             alpha: float, level: float, name_kind: bool = False) -> CapacityComparison:
    """:param name_kind: not plain prompts alone, so every line says which kind it is about."""
    of = f"{a.kind} " if name_kind else ""
    what = f"the {of}streams" if section.load == "streams" else f"the {of}request rate"
    if a.kind == "sessions":  # its load: sessions (agents) replayed at once
        what = "the concurrent sessions"
    at = " and ".join(section.labels)
    if a.estimate is None or base.estimate is None or a.censored or base.censored:
        why = {"below": "fails at the first load", "above": "holds up to capacity.max"}
        parts = [f"{x.arm} {why[x.censored]}" for x in (a, base) if x.censored]
        text = (f"{a.arm} vs {base.arm}{f' ({a.kind})' if name_kind else ''}: no ratio "
                f"({'; '.join(parts) or 'no boundary'}); widen capacity.start/max")
        return CapacityComparison(arm=a.arm, baseline=base.arm, kind=a.kind, verdict="censored", text=text)
    mine, theirs = brackets[a.arm], brackets[base.arm]
    with np.errstate(divide="ignore", invalid="ignore"):
        r_lo, r_hi = mine[:, 0] / theirs[:, 1], mine[:, 1] / theirs[:, 0]
    d_lo, d_hi = mine[:, 0] - theirs[:, 1], mine[:, 1] - theirs[:, 0]
    est = a.estimate / base.estimate
    pairs = min(a.probes, base.probes)
    lo, hi = _q(r_lo, alpha), _q(r_hi, 1 - alpha)
    if lo is None or hi is None:
        text = (f"{a.arm} vs {base.arm}{f' ({a.kind})' if name_kind else ''}: the boundary is censored in most "
                "resamples; no interval")
        return CapacityComparison(arm=a.arm, baseline=base.arm, kind=a.kind, verdict="censored", text=text)
    ratio = Interval(estimate=est, lo=min(lo, est), hi=max(hi, est), level=level, n=pairs, clusters=pairs)
    diff_est = a.estimate - base.estimate
    dl, dh = _q(d_lo, alpha), _q(d_hi, 1 - alpha)
    diff = Interval(estimate=diff_est, lo=min(dl if dl is not None else diff_est, diff_est),
                    hi=max(dh if dh is not None else diff_est, diff_est), level=level, n=pairs, clusters=pairs)
    words = capacity_words(verdict(ratio))
    text = f"{a.arm} carries {ratio_text(ratio.estimate, ratio.lo, ratio.hi)} {what} at {at}: {words}"
    return CapacityComparison(arm=a.arm, baseline=base.arm, kind=a.kind, ratio=ratio, difference=diff,
                              verdict=words, text=text)


def write_capacity(run_dir: Path, result: CapacityResult) -> Path:
    """``capacity.json`` in the run directory."""
    path = Path(run_dir) / CAPACITY_FILE
    path.write_text(result.model_dump_json(indent=2) + "\n")
    return path


def read_capacity(run_dir: Path) -> CapacityResult | None:
    """The run's capacity result, None when it has none (not a capacity run)."""
    path = Path(run_dir) / CAPACITY_FILE
    if not path.is_file():
        return None
    return CapacityResult.model_validate_json(path.read_text())
