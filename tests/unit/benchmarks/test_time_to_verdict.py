"""benchmarks/time_to_verdict.py: a pool's costs and truth, and replayed trials, on a stored run with known timings."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from bakeoff.core.results.sample import Sample
from bakeoff.core.results.store import RunDir


def _module() -> ModuleType:
    path = Path(__file__).resolve().parents[3] / "benchmarks" / "time_to_verdict.py"
    spec = importlib.util.spec_from_file_location("time_to_verdict", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


def _pool_run(tmp_path: Path, passes: int, jitter: float = 0.0) -> Path:
    """Each arm-pass: 2 prompts × 3 reps sent 1 s apart, each 0.5 s long; 2 s between arms (engine restart);
    other is 1.5× base, twin equals base; one more pass lacks an arm (a run stopped by its deadline)."""
    run = RunDir(tmp_path / "pool")
    t0 = 1_000.0
    orders = [["base", "twin", "other"] if p % 2 == 0 else ["other", "base", "twin"] for p in range(passes + 1)]
    run.update_record(orders=orders, started_at=t0)
    clock = t0
    for p, order in enumerate(orders):
        for arm in order[: 2 if p == passes else 3]:
            clock += 2.0  # the previous engine stopped, this one started and warmed up
            for prompt in ("a", "b"):
                for rep in range(3):
                    rate = (150.0 if arm == "other" else 100.0) * (1 + 0.01 * p)
                    rate *= 1 + jitter * ((7 * p + 3 * rep + len(prompt) + ord(arm[0])) % 5 - 2)  # request noise
                    run.append(Sample(arm=arm, engine="fake", prompt=prompt, mode="greedy", rep=rep, pass_index=p,
                                      started_at=clock, ttft_s=0.1, decode_s=0.4, decode_tps=rate))
                    clock += 1.0
            clock -= 0.5  # the last request ended 0.5 s after it started
    return run.path


def test_pool_costs_and_truth_come_from_the_stored_timings(tmp_path: Path) -> None:
    ttv = _module()
    pool = ttv.load_pool(_pool_run(tmp_path, passes=4))
    assert len(pool.passes) == 4 and pool.reps == 3 and pool.prompts == ["a", "b"]  # the cut pass is left out
    later = pool.passes[1]["base"]
    assert abs(later.overhead_s - 2.0) < 1e-9
    assert [round(c, 9) for c in later.cost_s] == [1.0] * 5 + [0.5]
    assert abs(ttv._cost([later], 1) - (2.0 + 1.0 + 1.0)) < 1e-9  # rep 0 of each prompt, and the restart
    assert abs(pool.truth("other") - 1.5) < 1e-9 and abs(pool.truth("twin") - 1.0) < 1e-9


def test_replay_costs_a_fixed_design_exactly_and_stops_the_adaptive_one_by_the_rule(tmp_path: Path) -> None:
    ttv = _module()
    pool = ttv.load_pool(_pool_run(tmp_path, passes=4))
    fixed = ttv.Design("fixed 3 × 3", reps=3, passes=3)
    adaptive = ttv.Design("--until-ci 5%, reps 1", reps=1, passes=1, target=0.05)
    out = ttv.replay(pool, [fixed, adaptive], trials=5)
    three = out["other/fixed 3 × 3"]
    assert abs(three["median_wall_s"] - 3 * 2 * (2.0 + 5 * 1.0 + 0.5)) < 1e-6  # 3 passes × 2 arms
    assert three["verdicts"] == {"faster": 5} and three["coverage"] == 1.0
    rule = out["other/--until-ci 5%, reps 1"]  # ratios 1.5 in every pass: tight at once, so the rule's minimum
    assert rule["median_passes"] == 3 and abs(rule["median_wall_s"] - 3 * 2 * (2.0 + 2 * 1.0)) < 1e-6
    assert out["twin/fixed 3 × 3"]["verdicts"] == {"equivalent": 5}  # identical rates: decided, within ±3 %


def test_replay_asks_the_rule_with_stop_on_verdict(tmp_path: Path) -> None:
    ttv = _module()
    pool = ttv.load_pool(_pool_run(tmp_path, passes=5, jitter=0.05))
    plain = ttv.Design("--until-ci 0.1%, reps 1", reps=1, passes=1, target=0.001)
    early = ttv.Design("--until-ci 0.1% --stop-on-verdict, reps 1", reps=1, passes=1, target=0.001,
                       stop_on_verdict=True)
    out = ttv.replay(pool, [plain, early], trials=3)
    # ±10 % request noise: ±0.1 % is out of reach: only the clear 1.5x verdict ends it at 3
    assert out["other/--until-ci 0.1%, reps 1"]["median_passes"] == 5
    assert out["other/--until-ci 0.1% --stop-on-verdict, reps 1"]["median_passes"] == 3
    assert out["twin/--until-ci 0.1% --stop-on-verdict, reps 1"]["median_passes"] == 5  # never clear: runs on
    names = [d.name for d in ttv.designs_for([0.2], [1], verdict_stop=True)]
    assert names == ["fixed 3 passes × 3 reps", "--until-ci 20%, reps 1", "--until-ci 20% --stop-on-verdict, reps 1"]
