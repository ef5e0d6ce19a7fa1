"""The one pass loop (core/run/passes.py): the planned passes, then each policy's passes in turn, each pass of the
arms the policy names, recorded in run.json before it runs, its requests added to the progress total. No engine
runs: ``_run_arm`` is replaced by one that records which arm ran in which pass."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest

from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.results.record import ArmAttempt
from bakeoff.core.results.store import RunDir
from bakeoff.core.run import protocol
from bakeoff.core.run.events import RunEvents
from bakeoff.core.run.executor import LocalExecutor
from bakeoff.core.run.passes import run_passes
from bakeoff.core.run.plan import Plan, plan_run, run_record

FILE = """
arms:
  - {name: base, engine: sim, model: x}
  - {name: a, engine: sim, model: x, options: {itl_ms: 1}}
  - {name: b, engine: sim, model: x, options: {itl_ms: 2}, workload: {max_tokens: 8}}
workload: {prompts: [prose, code_bash], reps: 2, passes: 2, gates: []}
"""


class Twice:
    """Two more passes of ``arms``, then no more."""

    def __init__(self, arms: list[str]) -> None:
        self.arms, self.asked = arms, 0
        self.drawn_at: list[int] = []

    def next_pass(self, run: RunDir, plan: Plan) -> Collection[str] | None:
        self.asked += 1
        return self.arms if self.asked <= 2 else None

    def drawn(self, run: RunDir, plan: Plan, index: int) -> None:
        self.drawn_at.append(index)


def test_each_policy_adds_its_passes_of_its_arms_in_turn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ran: list[tuple[str, int]] = []

    def fake_run_arm(plan: Any, planned: Any, run: Any, pass_index: int, *args: Any) -> ArmAttempt:
        ran.append((planned.arm.name, pass_index))
        return ArmAttempt(status="ok", pass_index=pass_index)

    monkeypatch.setattr(protocol, "_run_arm", fake_run_arm)
    plan = plan_run(parse_bakeoff(FILE))
    run = RunDir(tmp_path / "run")
    run.write_record(run_record(plan))
    added: list[int] = []
    first, second = Twice(["base", "b"]), Twice(["a"])
    run_passes(plan, run, RunEvents(on_pass_added=added.append), LocalExecutor(), set(), [first, second])
    assert first.drawn_at == [2, 3] and second.drawn_at == [4, 5]
    assert [sorted(order) for order in plan.orders[2:]] == [["b", "base"], ["b", "base"], ["a"], ["a"]]
    assert run.read_record().orders == plan.orders
    assert ran == [(name, p) for p, order in enumerate(plan.orders) for name in order]
    assert added == [plan.pass_requests(order) for order in plan.orders[2:]]
    assert plan.pass_requests(["base", "a", "b"]) * 2 == plan.requests_total
