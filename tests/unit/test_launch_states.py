"""Issue 33 item 2: launches that come up in a fast or a slow state read "bimodal", never a verdict."""

from __future__ import annotations

from pathlib import Path

import bakeoff
from bakeoff.core.analysis.launches import launch_bands
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.results.sample import Sample
from engines.sim.server import launch_speed


def _samples(per_pass: list[float], arm: str = "a") -> list[Sample]:
    return [Sample(arm=arm, engine="sim", prompt="p", mode="greedy", rep=r, pass_index=i, status="ok",
                   decode_tps=rate * (1 + 0.01 * r)) for i, rate in enumerate(per_pass) for r in range(2)]


def test_two_launch_states_are_two_bands() -> None:
    bands = launch_bands(_samples([100, 51, 98, 50, 102, 49]), "a")
    assert bands is not None and (bands.slow_launches, bands.launches) == (3, 6)
    assert bands.line().startswith("bimodal across launches: fast band 100.")
    assert "slow band 50." in bands.line() and bands.line().endswith("3 of 6 launches slow")


def test_one_launch_state_with_noise_is_not_bimodal() -> None:
    assert launch_bands(_samples([100, 93, 107, 97, 104, 90]), "a") is None
    assert launch_bands(_samples([100, 50, 100]), "a") is None  # too few launches to tell


def _run(tmp_path: Path, candidate_options: str) -> bakeoff.RunSummary:
    text = f"""
arms:
  - {{name: base, engine: sim, model: x, options: {{itl_ms: 8}}}}
  - {{name: cand, engine: sim, model: x, options: {candidate_options}}}
workload: {{prompts: [prose], max_tokens: 24, reps: 2, passes: 6, warmup: 0, gates: []}}
"""
    return bakeoff.run(parse_bakeoff(text, "b.yaml"), out=tmp_path / "runs", reports=False)


def test_a_sim_whose_launches_draw_full_or_half_speed_reads_bimodal_never_faster(tmp_path: Path) -> None:
    speeds = [launch_speed([1.0, 0.5], 1, k) for k in range(6)]
    assert 0 < speeds.count(0.5) < 6  # the seed draws both states
    summary = _run(tmp_path, "{itl_ms: 4, launch_speeds: [1.0, 0.5], launch_seed: 1}")
    c = summary.comparison("cand")
    assert c is not None and c.comparable is not None and c.comparable["ok"] is False
    reason = " ".join(c.comparable["reasons"])
    assert "cand bimodal across launches: fast band" in reason
    assert f"{speeds.count(0.5)} of 6 launches slow" in reason
    assert any("bimodal across launches" in w for w in summary.warnings)
    from bakeoff.core.reports.verdict import verdict_of

    verdict = verdict_of(summary)
    row = next(r for r in verdict.rows if r.arm == "cand")
    assert row.outcome == "not comparable" and row.vs.startswith("not comparable: cand bimodal across launches")
    assert not any("cand:" in line for line in verdict.recommendation), verdict.recommendation


def test_the_same_sim_in_one_launch_state_keeps_its_verdict(tmp_path: Path) -> None:
    summary = _run(tmp_path, "{itl_ms: 4}")
    c = summary.comparison("cand")
    assert c is not None and c.comparable is not None
    assert c.comparable["ok"] is True, c.comparable
    assert c.verdict == "faster" and not any("bimodal" in w for w in summary.warnings)
