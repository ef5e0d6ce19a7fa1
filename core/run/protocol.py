"""The measurement protocol: the same prompts, sampling and definitions on every arm.

For each pass, every arm runs once, in an order shuffled per pass from the recorded seed. An arm's
engine is launched (or attached to), warmed up untimed, asked every prompt × mode × rep one request at
a time, and stopped — always, also on error and Ctrl-C (core/run/arm.py owns one arm's start and every
timed request). An arm that fails to start, or whose engine dies, is recorded as failed with its log
tail and the run moves on to the next arm; one whose start failed for a reason a relaunch does not change (a
missing binary or library, a fixed port another process holds) is not relaunched in the later passes. The
passes after the planned ones are decided in core/run/passes.py.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Collection

from ..common.errors import BakeoffError, EngineError, EngineUnavailable, MeasurementError, is_write_failure
from ..common.redact import Redactor
from ..engine.launcher import CANNOT_LOAD, SharedEngine
from ..measure.points import DoneKeys, arm_points, is_done
from ..results.record import ArmAttempt
from ..results.store import RunDir
from .arm import ArmRun
from .events import RunEvents
from .plan import Plan, PlannedArm, add_pass, effective_workload, plan_warnings

__all__ = ["NOT_RELAUNCHED", "run_plan", "run_extra_pass"]

# Start failures that a relaunch in the next pass would meet again, seconds later: the arm is skipped after them,
# with what to do. A crash, a timeout or a dead engine may pass; those are retried every pass.
NOT_RELAUNCHED = {
    CANNOT_LOAD: "its engine cannot load",
    "port-in-use": "its fixed port is held by another process (free it, or leave settings.port out)",
}


def _run_arm(plan: Plan, planned: PlannedArm, run: RunDir, pass_index: int, events: RunEvents,
             done: DoneKeys, shared: SharedEngine | None = None) -> ArmAttempt:
    """One arm in one pass: its points not yet stored, measured through one ArmRun; a failure is recorded."""
    arm = planned.arm
    w = effective_workload(plan.config.workload, arm)
    points = arm_points(w, plan.prompts, plan.modes, plan.sessions)
    todo = [pt for pt in points if not is_done(done, arm.name, pt, pass_index)]
    if plan.sessions is not None:  # a replay runs every turn in order (a turn's time depends on the prefix the
        # turns before it left in the cache): one not stored whole runs again, its stored turns resent untimed
        unfinished = {(pt.mode, pt.rep, pt.session) for pt in todo}
        todo = [pt for pt in points if (pt.mode, pt.rep, pt.session) in unfinished]
    if not todo:
        return ArmAttempt(status="skipped (already complete)", pass_index=pass_index)
    events.on_arm_start(arm.name, pass_index)
    session = ArmRun(planned, run, pass_index, w, prompts=plan.prompts, modes=plan.modes, shared=shared,
                     events=events)
    try:
        with session:
            todo = session.accept(todo)
            session.warm_up()
            for point in todo:
                if point.session is not None and is_done(done, arm.name, point, pass_index):
                    session.resend(point)
                else:
                    session.measure(point)
            session.gates()
    except (EngineError, MeasurementError) as exc:  # MeasurementError: e.g. a depth prompt could not be fitted
        session.attempt = session.attempt.model_copy(update={
            "status": "failed", "error": str(exc), "log_tail": getattr(exc, "log_tail", ""),
            "reason": CANNOT_LOAD if isinstance(exc, EngineUnavailable) else getattr(exc, "reason", None)})
        events.on_arm_failed(arm.name, str(exc))
    except BakeoffError:
        raise  # the run itself cannot go on (a config problem found mid-run, a run directory it cannot write)
    except Exception as exc:
        if is_write_failure(exc):
            raise
        cause = f"{type(exc).__name__}: {exc}"[:500]
        try:
            trace = run.write_arm_text(arm.name, f"traceback-pass{pass_index}.txt",  # secrets masked
                                       "".join(traceback.format_exception(exc)))  # for a bug report
            why = f"unexpected {cause} (traceback in {trace})"
        except (OSError, BakeoffError):
            why = f"unexpected {cause}"
        session.attempt = session.attempt.model_copy(update={
            "status": "failed", "reason": "internal-error", "log_tail": "", "error": why})
        events.on_arm_failed(arm.name, why)
    return session.attempt


def run_plan(plan: Plan, run: RunDir, events: RunEvents | None = None,
             done: DoneKeys | None = None, start_pass: int = 0) -> dict[str, list[ArmAttempt]]:
    """Run every pass of the plan into ``run``; returns the per-arm records also written to run.json.

    ``start_pass`` skips the passes before it (adaptive passes run only the one :func:`add_pass` added).
    """
    events = events or RunEvents()
    done = done or set()
    for msg in plan_warnings(plan) if start_pass == 0 else []:
        events.on_warning(msg)
    run.redactor = Redactor.for_config(plan.config.model_dump(mode="json"))
    arm_records = run.arm_records()
    by_name = {a.arm.name: a for a in plan.arms}
    shared = SharedEngine()  # arms differing only in request-level values reuse one engine start
    try:
        for pass_index, order in list(enumerate(plan.orders))[start_pass:]:
            for name in order:
                if name in plan.not_relaunched:  # a relaunch would fail the same way: said once, no attempt recorded
                    if why := plan.not_relaunched[name]:
                        events.on_warning(f"arm {name}: not relaunched in pass {pass_index + 1} or later: {why}")
                        plan.not_relaunched[name] = ""
                    continue
                attempt = _run_arm(plan, by_name[name], run, pass_index, events, done, shared)
                arm_records.setdefault(name, []).append(attempt)
                run.append_attempt(name, attempt)  # one line per arm: no rewrite of run.json per arm
                if attempt.failed and attempt.reason in NOT_RELAUNCHED:
                    plan.not_relaunched[name] = f"{NOT_RELAUNCHED[attempt.reason]} (it failed in pass {pass_index + 1})"
            shared.close()
    finally:
        shared.close()
    run.update_record(finished_at=time.time(), arm_records=arm_records)  # a copy for readers of run.json alone
    return arm_records


def run_extra_pass(plan: Plan, run: RunDir, events: RunEvents | None = None, done: DoneKeys | None = None,
                   arms: Collection[str] | None = None, drawn: Callable[[int], None] | None = None) -> int:
    """Run one more pass (``arms``, default every arm, relaunched in a fresh order) and record it in run.json
    ``orders``; ``drawn(index)`` is told of the pass before it runs. The pass loop's one step
    (core/run/passes.py)."""
    index = add_pass(plan)
    if arms is not None:
        plan.orders[index] = [n for n in plan.orders[index] if n in arms]
    if drawn is not None:
        drawn(index)
    run.update_record(orders=plan.orders)
    run_plan(plan, run, events, done, start_pass=index)
    return index

