"""How often does bakeoff's paired ratio interval cover the true ratio? A simulation with known truth.

Each trial builds the samples of a baseline arm and an arm that is truly ``ratio`` times faster, runs the
same code the reports use (:func:`bakeoff.core.analysis.stats.paired_ratio`), and checks whether the 95 % interval
contains the true ratio. The model of a decode rate is multiplicative:

    rate = mu_arm × prompt_effect × launch_effect(arm, pass) × request_noise (× an occasional slow outlier)

``launch_effect`` is what differs between engine starts (passes); ``request_noise`` differs between
requests of one start. Coverage close to 0.95 means the verdicts mean what they say. With one pass the
launch effect cannot be seen from the data, which is why the reports warn about single-pass runs.

Usage: ``python benchmarks/ci_coverage.py [--trials 1000] [--json FILE]`` (seeded, reproducible).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict, dataclass

import numpy as np

from bakeoff.core.analysis.stats import N_BOOT, paired_ratio
from bakeoff.core.results.sample import Sample


@dataclass(frozen=True)
class Scenario:
    name: str
    passes: int
    reps: int
    prompts: int = 2
    launch_sd: float = 0.0  # sd of log launch effect per (arm, pass)
    request_sd: float = 0.03  # sd of log request noise
    outliers: float = 0.0  # share of requests slowed to half speed (foreign load)
    ratio: float = 1.10


SCENARIOS = [
    Scenario("request noise only, 3 passes × 3 reps × 2 prompts", passes=3, reps=3),
    Scenario("identical arms, 3 passes × 3 reps × 2 prompts", passes=3, reps=3, launch_sd=0.01, ratio=1.0),
    Scenario("launch effect 1 % + request noise 3 %, 3 passes", passes=3, reps=3, launch_sd=0.01),
    Scenario("launch effect 2 % + request noise 3 %, 3 passes", passes=3, reps=3, launch_sd=0.02),
    Scenario("launch effect 2 % + request noise 3 %, 5 passes", passes=5, reps=3, launch_sd=0.02),
    Scenario("launch effect 2 % + request noise 3 %, 10 passes", passes=10, reps=3, launch_sd=0.02),
    Scenario("5 % slow outliers (foreign load), 3 passes", passes=3, reps=3, launch_sd=0.01, outliers=0.05),
    Scenario("1 pass × 6 reps, request noise only", passes=1, reps=6),
    Scenario("1 pass × 6 reps, launch effect 2 % (not measurable)", passes=1, reps=6, launch_sd=0.02),
]


def _samples(sc: Scenario, rng: np.random.Generator) -> tuple[list[Sample], list[Sample]]:
    prompt_effect = np.exp(rng.normal(0, 0.15, sc.prompts))
    out: dict[str, list[Sample]] = {"base": [], "arm": []}
    for arm, mu in (("base", 100.0), ("arm", 100.0 * sc.ratio)):
        for p in range(sc.passes):
            launch = math.exp(rng.normal(0, sc.launch_sd)) if sc.launch_sd else 1.0
            for j in range(sc.prompts):
                for r in range(sc.reps):
                    rate = mu * prompt_effect[j] * launch * math.exp(rng.normal(0, sc.request_sd))
                    if sc.outliers and rng.random() < sc.outliers:
                        rate *= 0.5
                    out[arm].append(Sample(arm=arm, engine="sim", prompt=f"p{j}", mode="greedy", rep=r,
                                           pass_index=p, decode_tps=rate))
    return out["arm"], out["base"]


def coverage(sc: Scenario, trials: int, seed: int, n_boot: int = N_BOOT) -> dict[str, float]:
    """Share of trials whose interval contains the true ratio, and the mean relative interval width."""
    rng = np.random.default_rng([seed, sum(map(ord, sc.name))])
    hits, widths = 0, []
    for t in range(trials):
        arm, base = _samples(sc, rng)
        ci = paired_ratio(arm, base, n_boot=n_boot, seed=seed + t, key="coverage")
        assert ci is not None
        hits += ci.lo <= sc.ratio <= ci.hi
        widths.append((ci.hi - ci.lo) / sc.ratio)
    p = hits / trials
    return {"coverage": p, "stderr": math.sqrt(p * (1 - p) / trials), "mean_width": float(np.mean(widths))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--n-boot", type=int, default=N_BOOT)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    results = []
    print(f"{'scenario':58} {'coverage':>9} {'± se':>6} {'CI width':>9}")
    for sc in SCENARIOS:
        t0 = time.perf_counter()
        res = coverage(sc, args.trials, args.seed, args.n_boot)
        results.append({**asdict(sc), **res, "trials": args.trials})
        print(f"{sc.name:58} {res['coverage']:9.3f} {res['stderr']:6.3f} {res['mean_width']:8.1%}"
              f"   ({time.perf_counter() - t0:.0f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"trials": args.trials, "n_boot": args.n_boot, "seed": args.seed, "results": results}, f,
                      indent=2)


if __name__ == "__main__":
    main()
