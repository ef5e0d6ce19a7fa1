"""The pass loop: the planned passes, then the passes a policy adds, for ``run``, ``tune`` and ``gate`` alike.

A run first measures the passes it planned (through its executor). Then each :class:`PassPolicy` in turn is asked
after every pass which arms the next pass runs, until it says none (in the shape of GuideLLM's profiles, whose
``next_strategy`` is asked the same way): :class:`UntilDecided` (``--until-ci``, the gate's "until decided"),
:class:`ExtraLaunches` (issue 33 item 2's launch states) and the tuning race (core/run/tune.py ``Race``). A pass a
policy adds has the order a longer plan would have drawn from the seed (:func:`~bakeoff.core.run.plan.add_pass`),
less the arms the policy leaves out; it is recorded in run.json ``orders`` before it runs. No policy: the fixed
passes the file planned, no more.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Protocol

from ..analysis.launches import launches_to_draw
from ..measure.points import DoneKeys
from ..results.record import ExtraLaunches as ExtraLaunchesRecord
from ..results.store import RunDir
from .events import RunEvents
from .executor import Executor
from .plan import Plan
from .protocol import run_extra_pass

__all__ = ["ExtraLaunches", "PassPolicy", "UntilDecided", "add_passes", "run_extra_launches", "run_passes"]


class PassPolicy(Protocol):
    """What decides the passes after the planned ones."""

    def next_pass(self, run: RunDir, plan: Plan) -> Collection[str] | None:
        """The arms the next pass runs (in the order the seed draws), or None: no more passes.

        Asked after every pass; ``plan.orders`` holds the passes run so far."""

    def drawn(self, run: RunDir, plan: Plan, index: int) -> None:
        """The pass ``index`` is drawn (``plan.orders[index]``) and about to run: record or say what it is for."""


def run_passes(plan: Plan, run: RunDir, events: RunEvents, executor: Executor, done: DoneKeys,
               policies: list[PassPolicy]) -> None:
    """The planned passes through ``executor`` (less what ``done`` holds), then each policy's passes in turn."""
    executor.run(plan, run, events, done)
    for policy in policies:
        add_passes(plan, run, events, policy)


def add_passes(plan: Plan, run: RunDir, events: RunEvents, policy: PassPolicy) -> None:
    """Run the passes ``policy`` asks for, one at a time, each decided after the one before has run."""
    while (arms := policy.next_pass(run, plan)) is not None:
        run_extra_pass(plan, run, events, arms=arms,
                       drawn=lambda index: _drawn(plan, run, events, policy, index))


def _drawn(plan: Plan, run: RunDir, events: RunEvents, policy: PassPolicy, index: int) -> None:
    policy.drawn(run, plan, index)
    events.on_pass_added(plan.pass_requests(plan.orders[index]))


class UntilDecided:
    """Another pass of every arm while ``rule(run, passes done)`` says so; each answer's line is a note.

    The rule of ``--until-ci`` (core/run/bakeoff.py) and of the regression gate (core/cli/regression.py)."""

    def __init__(self, rule: Callable[[RunDir, int], tuple[bool, str]], say: Callable[[str], None]) -> None:
        self.rule, self.say = rule, say

    def next_pass(self, run: RunDir, plan: Plan) -> Collection[str] | None:
        more, why = self.rule(run, len(plan.orders))
        self.say(why)
        return [a.arm.name for a in plan.arms] if more else None

    def drawn(self, run: RunDir, plan: Plan, index: int) -> None:
        pass


class ExtraLaunches:
    """Launch states (issue 33 item 2): while an arm's launches fall in two speed bands with a band too small for
    its own interval, or too few launches lie a band apart to tell, one more pass of those arms and the baseline
    (new engine starts, paired with the baseline; every launched arm when the baseline is the one in two states),
    at most ``workload.extra_launches`` passes in all.

    Recorded in run.json ``extra_launches`` (a resumed run counts the passes it already drew); :attr:`record` is
    None when no arm asked for more. Attached arms (``url:``) are never relaunched by bakeoff, so they draw nothing.
    """

    def __init__(self, events: RunEvents) -> None:
        self.events = events
        self.record: ExtraLaunchesRecord | None = None
        self._want: dict[str, str] = {}

    def next_pass(self, run: RunDir, plan: Plan) -> Collection[str] | None:
        bound = plan.config.workload.extra_launches
        if self.record is None:
            self.record = run.read_record().extra_launches or ExtraLaunchesRecord(bound=bound)
            self.record.bound = bound
        record = self.record
        self._want = launches_to_draw(run.samples(), [a.arm.name for a in plan.arms if not a.arm.attached])
        if not self._want:
            if not record.passes:
                self.record = None  # no arm asked for more: nothing to record
                return None
            record.stopped = "every bimodal arm's bands have enough launches, or its launches form one band"
        elif len(record.passes) >= record.bound:
            record.stopped = (f"workload.extra_launches ({record.bound}) reached with "
                              f"{', '.join(self._want)} still short of launches")
            self.events.on_warning(f"{', '.join(self._want)}: no more launches drawn: {record.stopped}")
        else:
            baseline = plan.config.baseline_arm  # it pairs with every arm: in two states, every launched arm runs
            return [a.arm.name for a in plan.arms
                    if a.arm.name in (baseline, *self._want) or baseline in self._want]
        run.update_record(extra_launches=record.model_dump(mode="json"))
        return None

    def drawn(self, run: RunDir, plan: Plan, index: int) -> None:
        record = self.record
        assert record is not None  # next_pass made it
        record.passes.append(index)
        for name in plan.orders[index]:
            record.drawn[name] = record.drawn.get(name, 0) + 1
        record.why.append("; ".join(f"{arm}: {why}" for arm, why in self._want.items()))
        run.update_record(extra_launches=record.model_dump(mode="json"))
        self.events.on_note(f"extra launch {len(record.passes)} of at most {record.bound} "
                            f"({', '.join(plan.orders[index])}): {record.why[-1]}")


def run_extra_launches(plan: Plan, run: RunDir, events: RunEvents | None = None
                       ) -> ExtraLaunchesRecord | None:
    """The launch-state passes alone (after the planned ones have run): :class:`ExtraLaunches`' record."""
    events = events or RunEvents()
    policy = ExtraLaunches(events)
    add_passes(plan, run, events, policy)
    return policy.record
