"""Issue 33 item 2: launches that come up in a fast or a slow state read "bimodal", never a verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import bakeoff
from bakeoff.core.analysis.launches import disturbed_launches, launch_bands
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


def test_launches_slowed_by_a_busy_machine_are_not_a_second_band() -> None:
    # issue 40 item 3: on a busy 2-core box 2 of 7 launches of one build came up slow, every request of them
    # flagged foreign-load; that is the machine, not a launch state of the engine
    samples = _samples([100, 51, 98, 50, 102, 99, 101])
    for s in samples:
        if s.pass_index in (1, 3):
            s.flags.append("foreign-load: 1.40 cores used by other processes (limit 0.50)")
    assert launch_bands(samples, "a") is None
    seen = launch_bands(samples, "a", with_busy=True)  # what the old rule read
    assert seen is not None and (seen.slow_launches, seen.launches) == (2, 7)
    assert disturbed_launches(samples, "a") == {1: "foreign-load ×2 of 2", 3: "foreign-load ×2 of 2"}
    # one flagged request in a launch does not move its median: that launch still counts
    samples[0].flags.append("harness-lag: the client was away")
    assert 0 not in disturbed_launches(samples, "a")
    # a real second state on a quiet machine is still found
    assert launch_bands(_samples([100, 51, 98, 50, 102, 49]), "a") is not None


def test_a_summary_says_load_not_launch_states(tmp_path: Path) -> None:
    from bakeoff.core.reports import summarize_run
    from bakeoff.core.results.record import RunRecord
    from bakeoff.core.results.store import RunDir

    run = RunDir(tmp_path / "run")
    run.write_record(RunRecord.model_validate({
        "config": {"name": "busy", "arms": [{"name": "base", "engine": "sim", "model": "x"},
                                            {"name": "cand", "engine": "sim", "model": "x"}],
                   "workload": {"reps": 2, "passes": 7, "max_tokens": 16}},
        "baseline": "base", "orders": [["base", "cand"]] * 7, "seed": 0,
        "prompts": [{"name": "p", "kind": "x", "messages": []}]}))
    for s in _samples([100.0] * 7, "base") + _samples([50, 26, 49, 25, 51, 50, 50], "cand"):
        if s.arm == "cand" and s.pass_index in (1, 3):
            s.flags.append("foreign-load: 1.40 cores used by other processes (limit 0.50)")
        s.completion_tokens, s.n_first, s.usage_present = 16, 1, True
        run.append(s)
    summary = summarize_run(run.path)
    c = summary.comparison("cand")
    assert c is not None and not c.bands and (c.comparable is None or c.comparable["ok"])
    assert c.verdict == "slower"  # the build is slower: said, not hidden behind "bimodal"
    assert summary.launches is not None and summary.launches.busy == {"cand": {"1": "foreign-load ×2 of 2",
                                                                               "3": "foreign-load ×2 of 2"}}
    assert any(w.startswith("cand: 2 of 7 launches slow, but 2 ran on a busy machine (pass 1: foreign-load ×2 of 2;")
               and w.endswith("not read as bimodal") for w in summary.warnings), summary.warnings
    assert not any("bimodal across launches" in w for w in summary.warnings)


@pytest.fixture
def engine_states_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sim's launch states are the engine's; on a busy test box every request is also flagged foreign-load,
    which (rightly) leaves every launch out of the band test. These tests are about the engine's states."""
    monkeypatch.setattr("bakeoff.core.analysis.launches.MACHINE_FLAGS", ())  # as the module reads it


def _run(tmp_path: Path, candidate_options: str) -> bakeoff.RunSummary:
    text = f"""
arms:
  - {{name: base, engine: sim, model: x, options: {{itl_ms: 40}}}}
  - {{name: cand, engine: sim, model: x, options: {candidate_options}}}
workload: {{prompts: [prose], max_tokens: 10, reps: 5, passes: 6, warmup: 0, gates: []}}
"""
    return bakeoff.run(parse_bakeoff(text, "b.yaml"), out=tmp_path / "runs", reports=False)


def test_a_sim_whose_launches_draw_full_or_half_speed_reads_bimodal_never_faster(
        tmp_path: Path, engine_states_only: None) -> None:
    speeds = [launch_speed([1.0, 0.5], 1, k) for k in range(6)]
    assert 0 < speeds.count(0.5) < 6  # the seed draws both states
    summary = _run(tmp_path, "{itl_ms: 20, launch_speeds: [1.0, 0.5], launch_seed: 1}")
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
    assert all(line.startswith("keep base") for line in verdict.recommendation), verdict.recommendation


def test_the_same_sim_in_one_launch_state_keeps_its_verdict(tmp_path: Path, engine_states_only: None) -> None:
    summary = _run(tmp_path, "{itl_ms: 20}")
    c = summary.comparison("cand")
    assert c is not None and c.comparable is not None
    assert c.comparable["ok"] is True, c.comparable
    assert c.verdict == "faster" and not any("bimodal" in w for w in summary.warnings)


def test_a_bimodal_sim_draws_more_launches_and_reads_per_band_never_an_overall_faster(
        tmp_path: Path, engine_states_only: None) -> None:
    """4 passes draw half, half, full, full speed (seed 1): two bands of 2 launches, too few for an interval each,
    so the run draws extra launches of cand and base (the 5th and 6th: half, then full) until each band has 3."""
    speeds = [launch_speed([1.0, 0.5], 1, k) for k in range(6)]
    assert speeds == [0.5, 0.5, 1.0, 1.0, 0.5, 1.0]
    text = """
arms:
  - {name: base, engine: sim, model: x, options: {itl_ms: 40}}
  - {name: cand, engine: sim, model: x, options: {itl_ms: 20, launch_speeds: [1.0, 0.5], launch_seed: 1}}
workload: {prompts: [prose], max_tokens: 10, reps: 5, passes: 4, warmup: 0, gates: []}
"""
    summary = bakeoff.run(parse_bakeoff(text, "b.yaml"), out=tmp_path / "runs", reports=False)
    assert summary.passes == 6 and [sorted(o) for o in summary.orders[4:]] == [["base", "cand"]] * 2
    assert summary.launches is not None and summary.launches.extra is not None
    extra = summary.launches.extra
    assert extra.passes == [4, 5] and extra.drawn == {"cand": 2, "base": 2} and extra.bound == 4
    bands = summary.launches.bands["cand"]
    assert (bands.slow_passes, bands.fast_passes) == ([0, 1, 4], [2, 3, 5])
    c = summary.comparison("cand")
    assert c is not None and c.comparable is not None and c.comparable["ok"] is False
    assert [(b["band"], b["launches"]) for b in c.bands] == [("fast", 3), ("slow", 3)]
    fast = c.bands[0]["ratio"]
    assert fast is not None and 1.6 < fast["estimate"] < 2.4  # cand at full speed: 20 ms a token against 40 ms
    from bakeoff.core.reports.verdict import verdict_of

    row = next(r for r in verdict_of(summary).rows if r.arm == "cand")
    assert row.outcome == "not comparable" and "cand bimodal across launches" in row.vs
    assert "3 of 6 launches slow" in row.vs and "fast band of cand (3 launches): " in row.vs
    assert verdict_of(summary).recommendation == [
        "keep base: no arm is separably faster (cand: bimodal across launches, judged per band above)"]
    assert summary.path is not None
    recorded = json.loads((summary.path / "run.json").read_text())["extra_launches"]
    assert recorded["passes"] == [4, 5] and recorded["drawn"] == {"cand": 2, "base": 2}
    dumped = json.loads(summary.model_dump_json())
    assert dumped["launches"]["extra"]["drawn"] == {"cand": 2, "base": 2}
    assert dumped["launches"]["bands"]["cand"]["launches"] == 6


def test_each_band_gets_its_own_paired_ratio_or_a_reason() -> None:
    from bakeoff.core.analysis.launches import band_ratios

    cand = [200.0, 100.0, 200.0, 100.0, 200.0, 100.0, 100.0]  # 3 fast launches, 4 slow
    samples = _samples(cand, "cand") + _samples([100.0] * 7, "base")
    bands = {"cand": launch_bands(samples, "cand")}
    assert bands["cand"] is not None
    fast, slow = band_ratios(samples, "cand", "base", bands)  # type: ignore[arg-type]
    assert (fast.band, fast.launches, fast.passes, fast.verdict) == ("fast", 3, [0, 2, 4], "faster")
    assert fast.ratio is not None and fast.ratio.estimate == pytest.approx(2.0, rel=0.02)
    assert slow.launches == 4 and slow.ratio is not None and slow.ratio.estimate == pytest.approx(1.0, rel=0.02)
    assert fast.line().startswith("fast band of cand (3 launches): 2.00×")
    few = _samples(cand[1:], "cand") + _samples([100.0] * 6, "base")  # 2 fast launches: no interval
    fast2, _ = band_ratios(few, "cand", "base", {"cand": launch_bands(few, "cand")})  # type: ignore[dict-item]
    assert fast2.ratio is None and "at least 3 launches" in (fast2.refused or "")
    twice = _samples(cand, "cand") + _samples(cand, "base")
    both = {n: launch_bands(twice, n) for n in ("cand", "base")}
    assert all(r.ratio is None and "bimodal too" in (r.refused or "")
               for r in band_ratios(twice, "cand", "base", both))  # type: ignore[arg-type]
    assert band_ratios(samples, "base", "base", {}) == []
