"""Launch states: engines can come up fast or slow and stay so until restarted (users report a 2x band between
launches). The protocol resamples launches (passes), but its intervals assume one launch distribution; two
states average into a wide interval or, with few passes, a false verdict. Here the per-launch medians of an
arm are tested for two clusters (issue 33, item 2), and a comparison with a bimodal arm gets no verdict.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable

from pydantic import BaseModel

from ..results.sample import Sample
from .stats import EXCLUDING_FLAGS

__all__ = ["LaunchBands", "launch_bands", "MIN_LAUNCHES", "MIN_BAND_RATIO"]

MIN_LAUNCHES = 4  # fewer launches cannot tell two states from noise
MIN_BAND_RATIO = 1.3  # bands closer than this are launch-to-launch noise, not two states


class LaunchBands(BaseModel):
    arm: str
    fast: float  # median decode rate of the fast launches' medians, tok/s
    slow: float
    slow_launches: int
    launches: int

    def line(self) -> str:
        return (f"bimodal across launches: fast band {self.fast:.1f}, slow band {self.slow:.1f} tok/s, "
                f"{self.slow_launches} of {self.launches} launches slow")


def _per_launch_medians(samples: Iterable[Sample], arm: str) -> list[float]:
    by_pass: dict[int, list[float]] = {}
    for s in samples:
        if s.arm == arm and s.status == "ok" and s.decode_tps and s.decode_tps > 0 \
                and not any(f.split(":")[0] in EXCLUDING_FLAGS for f in s.flags):
            by_pass.setdefault(s.pass_index, []).append(s.decode_tps)
    return [statistics.median(v) for _, v in sorted(by_pass.items())]


def launch_bands(samples: Iterable[Sample], arm: str) -> LaunchBands | None:
    """Two bands of per-launch medians, or None: fewer than MIN_LAUNCHES launches, or one cluster.

    Two clusters: split the sorted log-medians at their widest gap; the gap must be at least MIN_BAND_RATIO
    and more than twice the widest spread inside either side (noise around one state is not a second one).
    """
    medians = _per_launch_medians(samples, arm)
    if len(medians) < MIN_LAUNCHES:
        return None
    logs = sorted(math.log(m) for m in medians)
    gaps = [b - a for a, b in itertools.pairwise(logs)]
    cut = max(range(len(gaps)), key=gaps.__getitem__)
    slow, fast = logs[:cut + 1], logs[cut + 1:]
    spread = max(slow[-1] - slow[0], fast[-1] - fast[0])
    if gaps[cut] < math.log(MIN_BAND_RATIO) or gaps[cut] <= 2 * spread:
        return None
    return LaunchBands(arm=arm, fast=math.exp(statistics.median(fast)), slow=math.exp(statistics.median(slow)),
                       slow_launches=len(slow), launches=len(medians))
