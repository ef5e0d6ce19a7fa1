"""Launch states: engines can come up fast or slow and stay so until restarted (users report a 2x band between
launches). The protocol resamples launches (passes), but its intervals assume one launch distribution; two
states average into a wide interval or, with few passes, a false verdict. Here the per-launch medians of an
arm are tested for two clusters (issue 33, item 2), and a comparison with a bimodal arm gets no overall verdict.
A launch during which the machine itself was busy (most of its requests flagged ``foreign-load``,
``harness-lag`` or a GPU throttle) is left out of that test: load on a 2-core box made 2 of 7 launches of one
build slow and read "bimodal", when the engine had one state (issue 40, item 3). Such launches still count in
every ratio, whose interval then says how little the run could tell. When the run finds two bands it draws more
launches (:func:`launches_to_draw`, within ``workload.extra_launches``) until each band has MIN_BAND_LAUNCHES,
and the report then gives a paired ratio per band (:func:`band_ratios`) or says why it cannot.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, Field

from ..results.flags import first_flag, flag_name
from ..results.sample import Sample
from .stats import EQUIVALENCE_MARGIN, EXCLUDING_FLAGS, LEVEL, MACHINE_FLAGS, N_BOOT, Interval, paired_ratio, verdict

__all__ = ["BandRatio", "LaunchBands", "MACHINE_FLAGS", "band_ratios", "disturbed_launches", "launch_bands",
           "launches_to_draw", "MIN_LAUNCHES", "MIN_BAND_LAUNCHES", "MIN_BAND_RATIO"]

MIN_LAUNCHES = 4  # fewer launches cannot tell two states from noise
MIN_BAND_RATIO = 1.3  # bands closer than this are launch-to-launch noise, not two states
MIN_BAND_LAUNCHES = 3  # a band's interval resamples its launches: fewer than 3 hold no launch-to-launch spread


class LaunchBands(BaseModel):
    arm: str
    fast: float  # median decode rate of the fast launches' medians, tok/s
    slow: float
    slow_launches: int
    launches: int
    fast_passes: list[int] = Field(default_factory=list, description="The passes (launches) in the fast band.")
    slow_passes: list[int] = Field(default_factory=list)

    def line(self) -> str:
        return (f"bimodal across launches: fast band {self.fast:.1f}, slow band {self.slow:.1f} tok/s, "
                f"{self.slow_launches} of {self.launches} launches slow")


def _usable(samples: Iterable[Sample], arm: str) -> list[Sample]:
    return [s for s in samples if s.arm == arm and s.status == "ok" and s.decode_tps and s.decode_tps > 0
            and first_flag(s.flags, EXCLUDING_FLAGS) is None]


def disturbed_launches(samples: Iterable[Sample], arm: str) -> dict[int, str]:
    """Pass index -> the machine flags its requests carried ("foreign-load ×5 of 6"), for the arm's launches in
    which the machine was busy during most of the requests: then the launch's median, and so its speed
    band, says nothing about the engine's launch state (a minority of flagged requests cannot move a median)."""
    total: dict[int, int] = {}
    flagged: dict[int, int] = {}
    names: dict[int, dict[str, int]] = {}
    for s in _usable(samples, arm):
        total[s.pass_index] = total.get(s.pass_index, 0) + 1
        mine = list(dict.fromkeys(n for f in s.flags if (n := flag_name(f)) in MACHINE_FLAGS))
        if mine:
            flagged[s.pass_index] = flagged.get(s.pass_index, 0) + 1
        for name in mine:
            counts = names.setdefault(s.pass_index, {})
            counts[name] = counts.get(name, 0) + 1
    return {p: ", ".join(f"{k} ×{n} of {total[p]}" for k, n in names[p].items())
            for p in sorted(flagged) if 2 * flagged[p] > total[p]}


def _per_launch_medians(samples: Iterable[Sample], arm: str, with_busy: bool = False) -> dict[int, float]:
    """Pass index (one engine start) -> median decode rate of the arm's usable requests in it, for the launches
    the machine left alone (:func:`disturbed_launches`; ``with_busy``: every launch)."""
    samples = list(samples)
    busy = {} if with_busy else disturbed_launches(samples, arm)
    by_pass: dict[int, list[float]] = {}
    for s in _usable(samples, arm):
        if s.pass_index not in busy:
            by_pass.setdefault(s.pass_index, []).append(float(s.decode_tps or 0))
    return {p: statistics.median(v) for p, v in sorted(by_pass.items())}


def _within_launch_spread(samples: Iterable[Sample], arm: str) -> float | None:
    """The widest log range of one request's rate within one launch, prompt and mode: how far requests of one
    state scatter (a busy box); launches further apart than this are worth telling apart. None: no launch sent
    a prompt twice (reps: 1), so the scatter is unknown."""
    groups: dict[tuple[int, str, str], list[float]] = {}
    for s in _usable(samples, arm):
        groups.setdefault((s.pass_index, s.prompt, s.mode), []).append(math.log(float(s.decode_tps or 0)))
    return max((max(v) - min(v) for v in groups.values() if len(v) > 1), default=None)


def launch_bands(samples: Iterable[Sample], arm: str, with_busy: bool = False) -> LaunchBands | None:
    """Two bands of per-launch medians, or None: fewer than MIN_LAUNCHES launches, or one cluster. Launches the
    machine disturbed are left out unless ``with_busy`` (to say what they would have made of the arm).

    Two clusters: split the sorted log-medians at their widest gap; the gap must be at least MIN_BAND_RATIO
    and more than twice the widest spread inside either side (noise around one state is not a second one).
    """
    medians = _per_launch_medians(samples, arm, with_busy)
    if len(medians) < MIN_LAUNCHES:
        return None
    ranked = sorted(medians, key=medians.__getitem__)  # pass indices, slowest launch first
    logs = [math.log(medians[p]) for p in ranked]
    gaps = [b - a for a, b in itertools.pairwise(logs)]
    cut = max(range(len(gaps)), key=gaps.__getitem__)
    slow, fast = logs[:cut + 1], logs[cut + 1:]
    spread = max(slow[-1] - slow[0], fast[-1] - fast[0])
    if gaps[cut] < math.log(MIN_BAND_RATIO) or gaps[cut] <= 2 * spread:
        return None
    return LaunchBands(arm=arm, fast=math.exp(statistics.median(fast)), slow=math.exp(statistics.median(slow)),
                       slow_launches=len(slow), launches=len(medians), fast_passes=sorted(ranked[cut + 1:]),
                       slow_passes=sorted(ranked[:cut + 1]))


def launches_to_draw(samples: Sequence[Sample], arms: Iterable[str]) -> dict[str, str]:
    """Arms that need more launches, each with why: two bands with a band under MIN_BAND_LAUNCHES launches (its
    own interval needs them), or too few launches to test for two bands whose medians already lie a band apart
    (and more than twice as far apart as requests of one prompt scatter inside one launch: noise of a busy box
    draws nothing, and with reps: 1 that scatter is unknown, so only the two-band test at MIN_LAUNCHES draws).
    The caller relaunches them (with the baseline, to pair with) within ``workload.extra_launches``."""
    out = {}
    for arm in arms:
        bands = launch_bands(samples, arm)
        if bands is not None:
            if min(bands.slow_launches, bands.launches - bands.slow_launches) < MIN_BAND_LAUNCHES:
                out[arm] = f"{bands.line()}; each band needs {MIN_BAND_LAUNCHES} launches for its own interval"
            continue
        medians = list(_per_launch_medians(samples, arm).values())
        if not 2 <= len(medians) < MIN_LAUNCHES or (scatter := _within_launch_spread(samples, arm)) is None:
            continue
        if max(medians) / min(medians) >= MIN_BAND_RATIO and math.log(max(medians) / min(medians)) > 2 * scatter:
            out[arm] = (f"its {len(medians)} launches differ {max(medians) / min(medians):.2f}× (decode "
                        f"{min(medians):.1f}–{max(medians):.1f} tok/s); {MIN_LAUNCHES} launches tell two states "
                        f"from noise")
    return out


class BandRatio(BaseModel):
    """One launch band of a bimodal pair: the paired ratio over the launches of that band, or why there is none."""

    band: Literal["fast", "slow"]
    of: str = Field(description="The arm whose launches form the band (the arm, or the bimodal baseline).")
    launches: int = Field(description="Launches of the band in which both arms ran (the pairs' passes).")
    passes: list[int]
    ratio: Interval | None = None
    verdict: str | None = None
    refused: str | None = Field(None, description="Why this band has no verdict.")

    def line(self) -> str:
        head = f"{self.band} band of {self.of} ({self.launches} launch{'es' if self.launches != 1 else ''})"
        if self.ratio is None:
            return f"{head}: no verdict, {self.refused}"
        return f"{head}: {self.ratio.ratio_text()} {self.verdict}"


def band_ratios(samples: Sequence[Sample], arm: str, reference: str, bands: dict[str, LaunchBands], *,
                n_boot: int = N_BOOT, level: float = LEVEL, seed: int = 0,
                margin: float = EQUIVALENCE_MARGIN) -> list[BandRatio]:
    """Per band of whichever of the two is bimodal: arm / reference paired on the requests of that band's
    launches (passes), with its interval once the band has MIN_BAND_LAUNCHES launches; [] when neither is
    bimodal. Two bimodal arms get no band verdicts: their bands cross, and no pass set is one state of both."""
    mine, theirs = bands.get(arm), bands.get(reference)
    if mine is None and theirs is None:
        return []
    of = mine or theirs
    assert of is not None
    out = []
    both = set(_per_launch_medians(samples, arm)) & set(_per_launch_medians(samples, reference))
    split: list[tuple[Literal["fast", "slow"], list[int]]] = [("fast", of.fast_passes), ("slow", of.slow_passes)]
    for band, band_passes in split:
        passes = [p for p in band_passes if p in both]  # launches of the band where the two arms can pair
        row = BandRatio(band=band, of=of.arm, launches=len(passes), passes=passes)
        if mine is not None and theirs is not None:
            row.refused = f"{reference} is bimodal too, so no set of launches is one state of both"
        elif len(passes) < MIN_BAND_LAUNCHES:
            row.refused = f"at least {MIN_BAND_LAUNCHES} launches make an interval (raise workload.extra_launches)"
        else:
            chosen = set(passes)
            ratio = paired_ratio([s for s in samples if s.arm == arm and s.pass_index in chosen],
                                 [s for s in samples if s.arm == reference and s.pass_index in chosen],
                                 n_boot=n_boot, level=level, seed=seed)
            if ratio is None:
                row.refused = f"no request of {arm} pairs with {reference} in these launches"
            else:
                row.ratio, row.verdict = ratio, verdict(ratio, margin)
        out.append(row)
    return out

