"""--stop-on-verdict (core/analysis/stats.py): an early stop on a clear verdict whose looks share one alpha.

Simulated runs with a known truth: every arm-pass gets its own launch effect (log-normal, sd 0.1) and every
request its own noise (sd 0.2), two prompts, one rep, as in the time-to-verdict pool. The rule is asked after
each pass, as ``bakeoff run --until-ci`` asks it; the target is out of reach, so only a verdict can stop it early.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from bakeoff.core.analysis.stats import (
    MIN_ADAPTIVE_PASSES,
    VERDICT_ALPHA,
    clear_verdicts,
    needs_more_passes,
    verdict_stop_level,
)
from bakeoff.core.common.errors import ConfigError
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.engine.contract import Capabilities, EngineAdapter, MethodKnobs
from bakeoff.core.results.sample import Sample
from bakeoff.core.run import plan as plan_module
from bakeoff.core.run.bakeoff import run_bakeoff

N_BOOT = 1000
MAX_PASSES = 6
TRIALS = 200


def _pass(arm: str, speed: float, index: int, rng: np.random.Generator) -> list[Sample]:
    launch = rng.normal(0, 0.1)
    return [Sample(arm=arm, engine="sim", prompt=prompt, mode="greedy", rep=0, pass_index=index,
                   decode_tps=float(mu * speed * np.exp(launch + rng.normal(0, 0.2))))
            for prompt, mu in (("code", 150.0), ("prose", 120.0))]


def _sequential(speed: float, seed: int, stop: str) -> tuple[int, bool]:
    """One simulated run of base and arm (``speed`` × base): passes until the rule stops it. ``stop`` is
    'spent' (the rule as shipped), 'naive' (a 95 % interval reread after every pass) or 'none' (width only).
    Returns the passes run and whether it stopped early on a clear verdict."""
    rng = np.random.default_rng(seed)
    samples: list[Sample] = []
    for n in range(1, MAX_PASSES + 1):
        samples += _pass("base", 1.0, n - 1, rng) + _pass("arm", speed, n - 1, rng)
        if stop == "naive" and n >= MIN_ADAPTIVE_PASSES and n < MAX_PASSES:
            if clear_verdicts(samples, "base", 0.95, n_boot=N_BOOT, seed=seed)["arm/base"] != "not separable":
                return n, True
            continue
        more, why = needs_more_passes(samples, n, 0.01, MAX_PASSES, baseline="base", n_boot=N_BOOT, seed=seed,
                                      stop_on_verdict=stop == "spent")
        if not more:
            return n, "clear verdict" in why
    raise AssertionError("the rule ran past --max-passes")


def test_the_levels_spend_alpha_once_over_all_looks() -> None:
    levels = [verdict_stop_level(k, 10) for k in range(MIN_ADAPTIVE_PASSES, 11)]
    assert sum(1 - lv for lv in levels) == pytest.approx(VERDICT_ALPHA)
    assert levels[0] == pytest.approx(1 - VERDICT_ALPHA * 3 / 10)  # the first look: the passes before it
    assert all(lv == pytest.approx(1 - VERDICT_ALPHA / 10) for lv in levels[1:])
    assert verdict_stop_level(1, 10) == levels[0] and verdict_stop_level(12, 10) == levels[-1]


def test_identical_arms_rarely_stop_on_a_false_verdict_and_peeking_at_95_would_stop_more() -> None:
    spent = sum(_sequential(1.0, seed, "spent")[1] for seed in range(TRIALS)) / TRIALS
    naive = sum(_sequential(1.0, seed, "naive")[1] for seed in range(TRIALS)) / TRIALS
    assert spent <= VERDICT_ALPHA + 0.03  # alpha over all looks (0.015 is about 2 standard errors at 200 trials)
    assert naive >= spent + 0.04  # rereading a 95 % interval after every pass multiplies false verdicts


def test_a_clear_pair_stops_at_the_first_look_and_without_the_option_runs_on() -> None:
    early = [_sequential(1.6, seed, "spent") for seed in range(TRIALS // 4)]
    assert sum(n == MIN_ADAPTIVE_PASSES and clear for n, clear in early) >= 0.6 * len(early)  # 0.64 in 200 trials
    assert all(n == MAX_PASSES for n, _ in (_sequential(1.6, seed, "none") for seed in range(5)))


def test_an_arm_stops_early_only_when_every_wide_arm_is_clear() -> None:
    rng = np.random.default_rng(0)
    samples = [s for p in range(3) for s in _pass("base", 1.0, p, rng) + _pass("fast", 3.0, p, rng)
               + _pass("same", 1.0, p, rng)]
    more, why = needs_more_passes(samples, 3, 0.01, 10, baseline="base", n_boot=N_BOOT, stop_on_verdict=True)
    assert more and "adding a pass" in why  # 'fast' is clear, 'same' is neither clear nor narrow
    clear = [s for s in samples if s.arm != "same"]
    done, why = needs_more_passes(clear, 3, 0.01, 10, baseline="base", n_boot=N_BOOT, stop_on_verdict=True)
    assert not done and "fast/base faster" in why and "98.5%" in why


def test_an_identical_pair_stops_early_on_equivalence() -> None:
    # issue 40 item 1: a quiet machine, the same build twice; the 1 % width is out of reach at 3 passes, but the
    # interval at the spent level already lies inside ±3 %: that is a decided outcome, so the run stops
    rng = np.random.default_rng(1)
    samples = [Sample(arm=arm, engine="sim", prompt=prompt, mode="greedy", rep=r, pass_index=p,
                      decode_tps=float(mu * np.exp(rng.normal(0, 0.01))))
               for p in range(3) for arm in ("base", "twin") for prompt, mu in (("code", 150.0), ("prose", 120.0))
               for r in range(2)]
    done, why = needs_more_passes(samples, 3, 0.001, 10, baseline="base", n_boot=N_BOOT, stop_on_verdict=True)
    assert not done and "twin/base equivalent" in why and "stopping early" in why, why
    assert clear_verdicts(samples, "base", 0.95, n_boot=N_BOOT)["twin/base"] == "equivalent"
    # the run's own margin decides: a margin narrower than this interval leaves the pair open
    done, why = needs_more_passes(samples, 3, 0.001, 10, baseline="base", n_boot=N_BOOT, stop_on_verdict=True,
                                  margin=0.001)
    assert done and "adding a pass" in why, why


def test_stop_on_verdict_without_until_ci_is_refused_before_anything_runs(tmp_path: Path) -> None:
    config = parse_bakeoff("name: t\narms:\n  - {name: a, engine: llamacpp, model: m.gguf}\n"
                           "workload: {prompts: [prose]}\n")
    with pytest.raises(ConfigError, match=r"--stop-on-verdict .* give --until-ci"):
        run_bakeoff(config, tmp_path / "runs", stop_on_verdict=True)
    assert not (tmp_path / "runs").exists()


def test_the_run_hands_the_option_to_the_rule_after_each_pass(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                              fake_adapter: Callable[..., EngineAdapter]) -> None:
    from bakeoff.core.run import bakeoff as bakeoff_run

    asked: list[dict[str, object]] = []

    class NoEngines:  # an executor that runs nothing: only the adaptive loop is under test
        name = "local"

        def run(self, *args: object) -> None:
            pass

    def rule(samples: object, passes: int, target: float, max_passes: int, **kw: object) -> tuple[bool, str]:
        asked.append({"passes": passes, "target": target, **kw})
        return False, "stop"

    monkeypatch.setattr(bakeoff_run, "needs_more_passes", rule)
    engine = fake_adapter(capabilities=Capabilities(speculative={"none": MethodKnobs()}),
                          argv=lambda arm, launch: ["true", str(arm.model)])
    monkeypatch.setattr(plan_module, "load_engine", lambda name: engine)
    config = parse_bakeoff("name: t\nbaseline: a\narms:\n  - {name: a, engine: fake, model: a.gguf}\n"
                           "  - {name: b, engine: fake, model: b.gguf}\n"
                           "workload: {prompts: [prose], equivalence_margin: 2%}\n")
    run_bakeoff(config, tmp_path / "runs", until_ci=0.2, executor=NoEngines(), stop_on_verdict=True)
    assert asked == [{"passes": 1, "target": 0.2, "baseline": "a", "seed": config.workload.seed,
                      "stop_on_verdict": True, "margin": 0.02}]
