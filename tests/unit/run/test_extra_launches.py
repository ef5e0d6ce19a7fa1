"""Issue 33 item 2: an arm bimodal across launches draws more launches (with the baseline), never more than
``workload.extra_launches``; an arm in one launch state draws none. No engine runs: ``_run_arm`` is replaced by one
that stores a sample per request at the rate the test scripts for that launch."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bakeoff.core.analysis.launches import MIN_BAND_LAUNCHES, launches_to_draw
from bakeoff.core.common.errors import ConfigError
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.results.record import ArmAttempt
from bakeoff.core.results.sample import Sample
from bakeoff.core.results.store import RunDir
from bakeoff.core.run import passes, protocol
from bakeoff.core.run.plan import plan_run, run_record


def _file(passes: int, extra: int | None = None, third: bool = False) -> str:
    bound = "" if extra is None else f", extra_launches: {extra}"
    other = "\n  - {name: other, engine: sim, model: x, options: {itl_ms: 6}}" if third else ""
    return f"""
arms:
  - {{name: base, engine: sim, model: x}}
  - {{name: cand, engine: sim, model: x, options: {{itl_ms: 4}}}}{other}
workload: {{prompts: [prose], reps: 2, passes: {passes}, gates: []{bound}}}
"""


def _fake_arms(monkeypatch: pytest.MonkeyPatch, cand_rate: Callable[[int], float],
               bimodal: str = "cand") -> list[tuple[str, int]]:
    """Each arm start stores two requests: ``bimodal`` at ``cand_rate(its launch number)``, the others at 100."""
    calls: list[tuple[str, int]] = []

    def fake_run_arm(plan: Any, planned: Any, run: RunDir, pass_index: int, *args: Any) -> ArmAttempt:
        name = planned.arm.name
        launch = sum(1 for n, _ in calls if n == name)
        calls.append((name, pass_index))
        rate = cand_rate(launch) if name == bimodal else 100.0
        for rep in range(2):
            run.append(Sample(arm=name, engine="sim", prompt="prose", mode="greedy", rep=rep, pass_index=pass_index,
                              status="ok", decode_tps=rate * (1 + 0.01 * rep)))
        return ArmAttempt(status="ok", pass_index=pass_index)

    monkeypatch.setattr(protocol, "_run_arm", fake_run_arm)
    return calls


def _run(tmp_path: Path, text: str) -> tuple[Any, RunDir]:
    plan = plan_run(parse_bakeoff(text, "b.yaml"))
    run = RunDir(tmp_path / "run")
    run.write_record(run_record(plan))
    protocol.run_plan(plan, run)
    return plan, run


def test_a_bimodal_arm_never_draws_more_than_the_bound(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # one fast launch, then slow ones for ever: the fast band never reaches MIN_BAND_LAUNCHES
    calls = _fake_arms(monkeypatch, lambda launch: 200.0 if launch == 0 else 100.0)
    plan, run = _run(tmp_path, _file(passes=4, extra=3))
    extra = passes.run_extra_launches(plan, run)
    assert extra is not None and len(extra.passes) == 3 and extra.passes == [4, 5, 6]
    assert extra.drawn == {"cand": 3, "base": 3}
    assert extra.stopped is not None and "workload.extra_launches (3) reached" in extra.stopped
    assert [p for _, p in calls if p >= 4] == [4, 4, 5, 5, 6, 6]  # each extra pass: cand and its baseline
    record = run.read_record()
    assert len(record.orders) == 7 and all(sorted(o) == ["base", "cand"] for o in record.orders[4:])
    assert record.extra_launches is not None and record.extra_launches.drawn == {"cand": 3, "base": 3}
    assert "cand: bimodal across launches" in record.extra_launches.why[0]
    # a second look (a resumed run) counts what it already drew and draws nothing more
    assert passes.run_extra_launches(plan, run) is not None and len(run.read_record().orders) == 7


def test_a_bimodal_arm_stops_drawing_once_each_band_has_enough_launches(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    states = [200.0, 100.0, 200.0, 100.0, 200.0, 100.0, 100.0, 100.0]  # 2 + 2, then one fast and one slow more
    _fake_arms(monkeypatch, states.__getitem__)
    plan, run = _run(tmp_path, _file(passes=4))  # the default bound, 4
    extra = passes.run_extra_launches(plan, run)
    assert extra is not None and extra.bound == 4 and len(extra.passes) == 2
    assert extra.stopped is not None and "enough launches" in extra.stopped
    assert launches_to_draw(run.samples(), ["base", "cand"]) == {}


def test_an_arm_in_one_launch_state_draws_none(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls = _fake_arms(monkeypatch, lambda launch: 150.0 * (1 + 0.03 * (launch % 3)))
    plan, run = _run(tmp_path, _file(passes=4))
    assert passes.run_extra_launches(plan, run) is None
    assert len(calls) == 8 and len(run.read_record().orders) == 4
    assert run.read_record().extra_launches is None


def test_zero_extra_launches_draws_none_and_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_arms(monkeypatch, lambda launch: 200.0 if launch % 2 else 100.0)
    plan, run = _run(tmp_path, _file(passes=4, extra=0))
    extra = passes.run_extra_launches(plan, run)
    assert extra is not None and extra.passes == [] and extra.drawn == {}
    assert len(run.read_record().orders) == 4


def _launches(rates: list[float], reps: int = 2) -> list[Sample]:
    """One launch per rate, ``reps`` requests each, 1 % apart."""
    return [Sample(arm="a", engine="sim", prompt="p", mode="greedy", rep=rep, pass_index=i, status="ok",
                   decode_tps=r * (1 + 0.01 * rep)) for i, r in enumerate(rates) for rep in range(reps)]


def test_what_asks_for_more_launches() -> None:
    assert "each band needs" in launches_to_draw(_launches([100, 50, 100, 50]), ["a"])["a"]  # 2 + 2 launches
    settled = [100.0, 50.0] * MIN_BAND_LAUNCHES
    assert launches_to_draw(_launches(settled), ["a"]) == {}  # both bands big enough
    assert "differ 2.00×" in launches_to_draw(_launches([100, 50]), ["a"])["a"]  # too few launches to test
    assert launches_to_draw(_launches([100, 95, 104]), ["a"]) == {}  # one state, noise
    # two launches 2x apart, but requests inside one launch scatter as widely (a busy box): not a launch state
    scattered = [*_launches([100, 50]), Sample(arm="a", engine="sim", prompt="p", mode="greedy", rep=2,
                                               pass_index=0, status="ok", decode_tps=45.0)]
    assert launches_to_draw(scattered, ["a"]) == {}
    assert launches_to_draw(_launches([100, 50], reps=1), ["a"]) == {}  # reps: 1, the scatter is unknown
    assert "each band needs" in launches_to_draw(_launches([100, 50, 100, 50], reps=1), ["a"])["a"]
    assert launches_to_draw(_launches([100]), ["a"]) == {}


def test_extra_launches_is_validated_by_the_schema() -> None:
    with pytest.raises(ConfigError, match=r"workload\.extra_launches: Input should be greater than or equal to 0"):
        parse_bakeoff(_file(passes=2, extra=-1), "b.yaml")
    assert parse_bakeoff(_file(passes=2), "b.yaml").workload.extra_launches == 4


def test_a_run_with_extra_launch_passes_can_be_resumed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from bakeoff.core.run.resume import load_resume

    _fake_arms(monkeypatch, lambda launch: 200.0 if launch == 0 else 100.0)
    plan, run = _run(tmp_path, _file(passes=4, extra=2, third=True))
    passes.run_extra_launches(plan, run)
    recorded = run.read_record().orders
    assert [len(o) for o in recorded] == [3, 3, 3, 3, 2, 2]  # the unimodal third arm is not relaunched
    resume = load_resume(run.path)
    fresh = plan_run(resume.config)
    resume.apply(fresh)  # the extra passes' orders are subsets of the arms only where run.json says so
    assert fresh.orders == recorded
    resume.run.release()


def test_a_bimodal_baseline_relaunches_every_arm_with_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_arms(monkeypatch, lambda launch: 200.0 if launch == 0 else 100.0, bimodal="base")
    plan, run = _run(tmp_path, _file(passes=4, extra=1, third=True))
    extra = passes.run_extra_launches(plan, run)
    assert extra is not None and extra.drawn == {"base": 1, "cand": 1, "other": 1}  # each arm pairs with base
