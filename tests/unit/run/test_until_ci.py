"""Adaptive passes (--until-ci) and plan-time warnings in core/run/protocol.py, with a fake adapter: no engine runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.engine.contract import Capabilities, EngineAdapter, MethodKnobs
from bakeoff.core.results.record import ArmAttempt
from bakeoff.core.results.store import RunDir
from bakeoff.core.run import plan as plan_module
from bakeoff.core.run import protocol
from bakeoff.core.run.events import RunEvents
from bakeoff.core.run.plan import run_record


def _config(passes: int, reps: int = 1) -> str:
    arms = "\n".join(f"  - {{name: arm{i}, engine: fake, model: m{i}.gguf}}" for i in range(5))
    return (f"name: t\narms:\n{arms}\n  - {{name: ngram, engine: fake, model: n.gguf, speculative: {{method: ngram, "
            f"variant: mod}}}}\nworkload: {{passes: {passes}, reps: {reps}, seed: 11, prompts: [prose]}}\n")


@pytest.fixture(autouse=True)
def fake_engines(monkeypatch: pytest.MonkeyPatch, fake_adapter: Callable[..., EngineAdapter]) -> None:
    stateful = fake_adapter(capabilities=Capabilities(speculative={"none": MethodKnobs(), "ngram/mod": MethodKnobs()},
                                                      stateful_speculators=("ngram-mod",)),
                            argv=lambda arm, launch: ["true", str(arm.model), arm.speculative.method])
    monkeypatch.setattr(plan_module, "load_engine", lambda name: stateful)


def test_added_pass_has_the_order_a_longer_plan_would_have() -> None:
    longer = plan_module.plan_run(parse_bakeoff(_config(4)))
    plan = plan_module.plan_run(parse_bakeoff(_config(2)))
    assert plan_module.add_pass(plan) == 2 and plan_module.add_pass(plan) == 3
    assert plan.orders == longer.orders
    assert len({tuple(o) for o in plan.orders}) > 1  # shuffled per pass


def test_run_extra_pass_runs_only_the_new_pass_and_records_its_order(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    calls: list[tuple[str, int]] = []

    def fake_run_arm(plan: Any, planned: Any, run: Any, pass_index: int, *args: Any) -> ArmAttempt:
        calls.append((planned.arm.name, pass_index))
        return ArmAttempt(status="ok", pass_index=pass_index)

    monkeypatch.setattr(protocol, "_run_arm", fake_run_arm)
    plan = plan_module.plan_run(parse_bakeoff(_config(1)))
    run = RunDir(tmp_path / "run")
    run.write_record(run_record(plan))
    protocol.run_plan(plan, run)
    assert {p for _, p in calls} == {0}
    calls.clear()
    assert protocol.run_extra_pass(plan, run) == 1
    assert calls == [(name, 1) for name in plan.orders[1]]
    meta = run.read_record().to_json()
    assert meta["orders"] == plan.orders and len(meta["orders"]) == 2
    assert [r["pass"] for r in meta["arm_records"]["arm0"]] == [0, 1]


def test_stateful_speculator_with_reps_warns_at_plan_time(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(protocol, "_run_arm", lambda *a, **k: ArmAttempt(status="ok", pass_index=0))
    warnings: list[str] = []
    events = RunEvents(on_warning=warnings.append)
    plan = plan_module.plan_run(parse_bakeoff(_config(1, reps=3)))
    protocol.run_plan(plan, RunDir(tmp_path / "a"), events)
    assert len(warnings) == 1 and warnings[0].startswith("ngram: the ngram-mod speculator")
    warnings.clear()
    protocol.run_plan(plan_module.plan_run(parse_bakeoff(_config(1, reps=1))), RunDir(tmp_path / "b"), events)
    assert warnings == []
