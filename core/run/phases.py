"""Live knobs in timed phases: baseline, knob, baseline, knob, ..., baseline, against one server that stays up.

Each knob's ``apply`` command runs before its phase and its ``revert`` after it; the revert is
registered with the run's guard (core/run/watchdog.py) before the apply, so it runs on a normal end, on an
error, on Ctrl-C, and — when bakeoff is killed or hangs — by the watchdog. During every phase a probe
thread checks the server's health and, when configured, the kernel log (NVIDIA Xid lines) at a fixed
interval; a failed probe ends the run after the revert. Where NVML sees a GPU, each phase records its
power, clocks and temperature (core/host/telemetry.py, read only). Samples carry their phase (``Sample.phase``,
``arm`` = the knob or ``baseline``); :func:`compare_phases` pairs each knob phase with its neighbouring baselines.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..common.errors import EngineError, MeasurementError
from ..config.live import BASELINE, KernelLogCheck, Phases
from ..host.telemetry import open_monitor
from ..measure.points import Point
from ..results.record import PhaseRecord
from ..results.store import RunDir
from .arm import ArmRun, SampleLabel
from .events import RunEvents
from .plan import Plan, effective_workload
from .watchdog import Guard, health_problem, run_command, shown

__all__ = ["run_phases"]



# -- probes ------------------------------------------------------------------------------------
def _kernel_lines(check: KernelLogCheck, timeout_s: float) -> set[str]:
    try:
        done = subprocess.run(check.command, capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineError(f"phases.kernel_log: {shown(check.command)}: {exc}") from exc
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise EngineError(f"phases.kernel_log: {shown(check.command)} exited with {done.returncode}: "
                          f"{detail[-1] if detail else ''} (dmesg needs root or sysctl kernel.dmesg_restrict=0; "
                          "journalctl -k needs the systemd-journal group)")
    pattern = re.compile(check.pattern)
    return {line for line in done.stdout.splitlines() if pattern.search(line)}


class Prober(threading.Thread):
    """Probes health (and the kernel log) every ``interval_s`` during one phase; ``problem`` is the first failure."""

    def __init__(self, phase: str, health: str, interval_s: float, kernel: KernelLogCheck | None,
                 known_lines: set[str], out: Path) -> None:
        super().__init__(daemon=True, name=f"probe-{phase}")
        self.phase, self.health, self.interval_s, self.kernel = phase, health, interval_s, kernel
        self.known, self.out = known_lines, out
        self.problem: str | None = None
        self.readings: list[dict[str, Any]] = []
        self._done = threading.Event()

    def probe(self) -> None:
        reading: dict[str, Any] = {"phase": self.phase, "at": time.time()}
        problem = health_problem(self.health, None)
        reading["healthy"] = problem is None
        if self.kernel is not None:
            try:
                new = sorted(_kernel_lines(self.kernel, self.interval_s) - self.known)
            except EngineError as exc:
                new, problem = [], problem or str(exc)
            if new:
                reading["kernel_lines"] = new
                problem = problem or f"kernel log: {new[0]}"
        self.readings.append(reading)
        with self.out.open("a") as f:
            f.write(json.dumps(reading) + "\n")
        if problem is not None and self.problem is None:
            self.problem = problem

    def run(self) -> None:
        while not self._done.is_set():
            self.probe()
            self._done.wait(self.interval_s)

    def finish(self) -> None:
        self._done.set()
        self.join(timeout=self.interval_s + 30)


# -- the phases ----------------------------------------------------------------------------------
@dataclass
class _Phase:
    index: int
    phase: str
    setting: str
    record: PhaseRecord


@contextmanager
def _knob(guard: Guard, phases: Phases, setting: str, phase: str, log: Path, record: PhaseRecord
          ) -> Iterator[None]:
    """Apply a knob for the body of the ``with``; its revert is registered first and runs on every way out."""
    knob = next(k for k in phases.knobs if k.name == setting)
    undo_id = f"knob-{phase}"
    guard.push({"id": undo_id, "what": f"knob {knob.name}", "argv": knob.revert,
                "timeout_s": phases.command_timeout_s})
    try:
        code, _ = run_command(knob.apply, phases.command_timeout_s, log)
        record.applied = {"argv": knob.apply, "exit_code": code, "at": time.time()}
        if code != 0:
            raise EngineError(f"knob {knob.name!r}: apply command {knob.apply[0]!r} "
                              f"{'exited with ' + str(code) if code is not None else 'did not finish'} (log: {log}); "
                              "its revert runs now")
        yield
    finally:
        result = guard.undo(undo_id)
        record.reverted = result
        if result is not None and not result.get("ok"):
            raise EngineError(f"knob {knob.name!r}: revert {shown(knob.revert)} failed ({result['detail']}); "
                              f"the setting may still be applied (log: {log})")


def run_phases(plan: Plan, run: RunDir, events: RunEvents, guard: Guard) -> list[PhaseRecord]:
    """Run every phase against the server arm; returns the phase records also written to run.json ``phases``.

    The server arm is one :class:`~bakeoff.core.run.arm.ArmRun` for the whole run: every phase's requests
    go through its ``measure``, so phase samples carry the same guards and flags as any other sample.
    """
    config = plan.config
    phases = config.phases
    assert phases is not None
    planned = plan.arms[0]
    arm, w = planned.arm, effective_workload(config.workload, planned.arm)
    live = config.live
    records: list[PhaseRecord] = []
    run.update_record(baseline=BASELINE, phases=records)
    probes_path = run.path / "live" / "probes.jsonl"
    log = guard.log_path
    known = _kernel_lines(phases.kernel_log, phases.command_timeout_s) if phases.kernel_log else set()
    events.on_arm_start(arm.name, 0)
    session = ArmRun(planned, run, 0, w, prompts=plan.prompts, modes=plan.modes, events=events)
    try:
        with session:
            base = str(session.http.base_url).rstrip("/")
            health = live.health if live is not None and base.startswith(live.base_url) else f"{base}/health"
            session.warm_up()
            for index, (phase, setting) in enumerate(phases.phase_names):
                p = _Phase(index, phase, setting, PhaseRecord(phase=phase, setting=setting))
                records.append(p.record)
                try:
                    if setting == BASELINE:
                        _measure(p, phases, session, plan, health, known, probes_path)
                    else:
                        with _knob(guard, phases, setting, phase, log, p.record):
                            _measure(p, phases, session, plan, health, known, probes_path)
                finally:
                    run.update_record(phases=records)
    except BaseException as exc:
        session.attempt = session.attempt.model_copy(update={"status": "failed", "error": str(exc)[:500]})
        raise
    finally:
        run.append_attempt(arm.name, session.attempt)
    return records


def _measure(p: _Phase, phases: Phases, session: ArmRun, plan: Plan, health: str, known: set[str],
             probes_path: Path) -> None:
    """Requests until the phase's duration ends (at least one round), with the probe thread running."""
    prober = Prober(p.phase, health, phases.probe_interval_s, phases.kernel_log, known, probes_path)
    gpu = open_monitor(interval_s=1.0)  # None without NVML, a driver or a GPU
    p.record.started_at = time.time()
    prober.start()
    if gpu is not None:
        gpu.start()
    label = SampleLabel(arm=p.setting, phase=p.phase, pass_index=p.index)
    try:
        cycle = [(pr, m) for pr in plan.prompts for m in plan.modes]
        end = time.monotonic() + phases.duration_s
        n = 0
        while n < len(cycle) or time.monotonic() < end:
            prompt, mode = cycle[n % len(cycle)]
            session.measure(Point(prompt, mode, n // len(cycle)), label)
            n += 1
            if prober.problem is not None:
                break
    finally:
        prober.finish()
        p.record.ended_at, p.record.requests = time.time(), n
        p.record.probes = len(prober.readings)
        p.record.unhealthy_probes = sum(1 for r in prober.readings if not r["healthy"])
        if gpu is not None:
            p.record.gpu = gpu.stop().model_dump(exclude_none=True)
    if prober.problem is not None:
        p.record.problem = prober.problem
        raise MeasurementError(f"phase {p.phase}: probe failed: {prober.problem}; stopping the phase run")
