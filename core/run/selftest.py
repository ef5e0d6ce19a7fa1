"""Self-test: run every speculative method an adapter maps through the real engine, through the normal protocol.

Engines rename and reshape speculative flags often, and some accept a flag and then silently run without
speculation. A self-test case is one arm (usually on tiny synthesized models that the adapter provides)
plus what must be true once it ran: the engine started, speculation was really on or off, drafts were
made, and acceptance is what the weights force. Each case is planned and run exactly like an arm of
``bakeoff run`` (preflight, launch, readiness, effective settings, one timed request), so the self-test
checks the very flags a bakeoff would pass. This module is engine-neutral: adapters build the cases.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from ..common.errors import BakeoffError
from ..config.schema import BakeoffFile, Prompt, Workload
from ..engine.checks import selftest_cases
from ..engine.contract import EngineAdapter
from ..engine.pieces import SelftestCase, SelftestRow
from ..results.flags import SETTINGS_MISMATCH, flag_name
from ..results.store import RunDir, new_run_dir, read_samples
from .plan import plan_run, run_record
from .protocol import run_plan

# SelftestCase and SelftestRow live beside the adapter hook that returns them (core/engine/pieces.py); re-exported.
__all__ = ["SelftestCase", "SelftestRow", "run_case", "run_cases", "run_selftest", "selftest_workload"]

SELFTEST_PROMPT = Prompt(name="selftest", kind="code", messages=[
    {"role": "user", "content": "Count from one to twenty, one number per line."}])


def selftest_workload(max_tokens: int = 48, prompt: Prompt = SELFTEST_PROMPT) -> Workload:
    """One short greedy fixed-length request per case, no warm-up: enough to see drafts and acceptance."""
    return Workload(suite=[prompt], max_tokens=max_tokens, reps=1, passes=1, warmup=0,
                    request_timeout_s=120, boot_timeout_s=120)


def _engine_log_problems(adapter: EngineAdapter, arm_dir: Path) -> list[str]:
    """The adapter's startup-failure classifier must not trip on the log of an engine that started fine."""
    logs = sorted(arm_dir.glob("engine-*.log"))
    text = logs[0].read_text(errors="replace") if logs else ""
    classified = adapter.classify_startup_failure(text) if text else None
    if classified is not None:
        return [f"the startup-failure classifier trips on a healthy start ({classified.reason}): "
                f"{classified.log_line}"]
    return []


def run_case(case: SelftestCase, workdir: Path, workload: Workload | None = None) -> SelftestRow:
    """Plan and run one case through the protocol and judge it."""
    row = SelftestRow(case.label, case.flags)
    t0 = time.perf_counter()
    if workload is None:
        workload = selftest_workload(prompt=case.prompt or SELFTEST_PROMPT)
    elif case.prompt is not None:
        workload = workload.model_copy(update={"suite": [case.prompt]})
    config = BakeoffFile(name=f"selftest-{case.label}", arms=[case.arm], workload=workload)
    try:
        plan = plan_run(config)
    except BakeoffError as exc:
        row.problems.append(f"refused before launch: {exc}")
        row.seconds = time.perf_counter() - t0
        return row
    run = RunDir(new_run_dir(workdir, case.label))
    row.run_dir = run.path
    run.write_record(run_record(plan))
    records = run_plan(plan, run)
    row.seconds = time.perf_counter() - t0
    record = records[case.arm.name][0]
    if record.status != "ok":
        row.problems.append(str(record.error or record.status))
        return row
    row.started = True
    row.version = record.version
    effective = record.effective
    row.speculative = effective.get("speculative") if isinstance(effective.get("speculative"), bool) else None
    samples = read_samples(run.path)
    for s in samples:
        if s.status != "ok":
            row.problems.append(f"request failed: {s.error}")
        row.problems += [f"sample flag: {f}" for f in s.flags
                         if "mismatch" in flag_name(f) and flag_name(f) != SETTINGS_MISMATCH.name]
    if not samples:
        row.problems.append("no sample was recorded")
    drafted = [s.drafted for s in samples if s.drafted is not None]
    accepted = [s.accepted for s in samples if s.accepted is not None]
    row.drafted = sum(drafted) if drafted else None
    row.accepted = sum(accepted) if accepted else None
    row.problems += [f"settings: {m}" for m in record.mismatches]
    if case.expect_speculation:
        if row.speculative is False:
            row.problems.append("the engine started but reports speculation off")
        if case.need_drafts and not row.drafted:
            row.problems.append("speculation is on, but no token was drafted")
        acc = row.acceptance
        if case.min_acceptance is not None and row.drafted and (acc is None or acc < case.min_acceptance):
            row.problems.append(f"acceptance {acc:.3f} is below {case.min_acceptance:g} "
                                f"({row.accepted}/{row.drafted}) although the weights agree")
    else:
        if row.speculative:
            row.problems.append("speculation is off in the arm, but the engine reports it on")
        if row.drafted:
            row.problems.append(f"speculation is off, yet {row.drafted} tokens were drafted")
    row.problems += _engine_log_problems(plan.arms[0].adapter, run.arm_dir(case.arm.name))
    return row


def run_cases(cases: list[SelftestCase], workdir: Path, log: Callable[[str], None] = lambda msg: None,
              workload: Workload | None = None) -> list[SelftestRow]:
    """Run every case in order; one failing case never stops the others."""
    rows = []
    for case in cases:
        log(f"{case.label}: {case.flags}")
        row = run_case(case, workdir, workload)
        log(f"{case.label}: {'ok' if row.ok else 'FAILED'} in {row.seconds:.1f} s")
        rows.append(row)
    return rows


def run_selftest(adapter: EngineAdapter, log: Callable[[str], None], workdir: Path) -> list[SelftestRow]:
    """The adapter's self-test: its cases run in order, and a failed row for each mapped method without one.

    :raises CapabilityNotSupported: the adapter has no self-test.
    """
    cases, untested = selftest_cases(adapter, log)
    rows = run_cases(cases, workdir, log)
    for method in untested:
        rows.append(SelftestRow(method, "", problems=[f"the {adapter.name} self-test has no case for method "
                                                      f"{method!r}; add one to its selftest piece"]))
    return rows
