"""The measurement protocol: the same prompts, sampling and definitions on every arm.

For each pass, every arm runs once, in an order shuffled per pass from the recorded seed. An arm's
engine is launched (or attached to), warmed up untimed, asked every prompt × mode × rep one request at
a time, and stopped — always, also on error and Ctrl-C. Each request becomes a Sample appended to the
run directory the moment it completes. An arm that fails to start, or whose engine dies, is recorded
as failed with its log tail and the run moves on to the next arm.
"""

from __future__ import annotations

import errno
import os
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import SecretStr

from ..analysis.fairness import OUTPUTS_FILE, finish_flags, output_line
from ..common.errors import BakeoffError, EngineError, EngineStartupError, MeasurementError
from ..common.redact import Redactor, redact_argv
from ..config.schema import Arm
from ..engine.adapter import Effective, read_effective
from ..engine.attach import attach_base, probe_attached
from ..engine.client import stream_chat
from ..engine.compose import ComposeEngine, project_name
from ..engine.hardware import attach_gpu_sample, offload_mismatch, visible_devices_env
from ..engine.launcher import Engine, LogCursor, SharedEngine, free_port, port_is_free
from ..engine.readback import EngineLog
from ..host.hostinfo import CpuMeter, docker_container_ids
from ..host.telemetry import GpuMonitor, open_monitor
from ..measure import points as _points
from ..measure.definitions import build_request, make_sample, request_fields
from ..measure.gates import run_gates
from ..results.sample import Sample
from ..results.store import RunDir
from .plan import Plan, PlannedArm, add_pass, effective_workload, plan_run, plan_warnings, run_metadata, server_key

# The run loop is run_plan. The planning names stay importable from here for callers written before
# core/run/plan.py existed; new code imports them from core/run/plan.py.
__all__ = ["run_plan", "run_extra_pass", "ProtocolEvents", "is_write_failure", "engine_for",
           "PlannedArm", "Plan", "plan_run", "add_pass", "plan_warnings", "run_metadata"]


@dataclass
class ProtocolEvents:
    """Callbacks for progress display; all optional."""

    on_arm_start: Callable[[str, int], None] = lambda arm, pass_index: None
    on_arm_ready: Callable[[str, Effective, float | None], None] = lambda arm, eff, boot: None
    on_sample: Callable[[Sample], None] = lambda s: None
    on_arm_failed: Callable[[str, str], None] = lambda arm, why: None
    on_warning: Callable[[str], None] = lambda msg: None


def _headers(arm: Arm) -> dict[str, str]:
    """The Authorization header from the variable named by ``api_key_env``; the key is written nowhere."""
    if arm.api_key_env:
        key = SecretStr(os.environ.get(arm.api_key_env, ""))
        if key.get_secret_value():
            return {"Authorization": f"Bearer {key.get_secret_value()}"}
    return {}


@contextmanager
def engine_for(planned: PlannedArm, run: RunDir, pass_index: int, boot_timeout_s: float,
                monitor: GpuMonitor | None = None, record: dict[str, Any] | None = None
                ) -> Iterator[tuple[str, Engine | ComposeEngine | None]]:
    arm = planned.arm
    if monitor is not None and record is not None and not arm.attached:
        record["gpu_idle_power_w"] = monitor.idle_power_w()  # before this arm's engine loads anything
    if arm.attached:
        assert arm.url is not None
        yield attach_base(arm.url), None
        return
    port = arm.settings.port or free_port(arm.settings.host)
    port_taken = bool(arm.settings.port) and not port_is_free(arm.settings.host, port)
    log_path = run.arm_dir(arm.name) / f"engine-pass{pass_index}.log"
    try:
        if arm.launch == "compose":  # the adapter's compose service, up until healthy, always brought down
            with ComposeEngine(planned.adapter, arm, port, run.arm_dir(arm.name), log_path, boot_timeout_s,
                               project=project_name(run.run_id, arm.name)) as compose_engine:
                yield compose_engine.base_url, compose_engine
            return
        spec = planned.adapter.launch_spec(arm, port, run.arm_dir(arm.name))
        spec.env.update(visible_devices_env(arm))
        host = "127.0.0.1" if arm.settings.host in ("0.0.0.0", "::") else arm.settings.host
        base = f"http://{host}:{port}"
        run.write_arm_text(arm.name, "argv.txt", " ".join(redact_argv(spec.argv)) + "\n")
        with Engine(planned.adapter, spec, base, log_path, boot_timeout_s, port_taken=port_taken) as engine:
            yield base, engine
    finally:  # the engine wrote its log itself: mask any secret of this run it printed
        with suppress(OSError):
            run.redactor.file(log_path)


_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO}
_PATH_ERRNOS = {errno.EACCES, errno.EPERM, errno.ENAMETOOLONG, errno.ENOTDIR}


def is_write_failure(exc: BaseException) -> bool:
    """An OSError that means the run directory cannot be written: the whole run stops, not one arm."""
    return isinstance(exc, OSError) and (exc.errno in _DISK_ERRNOS
                                         or (exc.errno in _PATH_ERRNOS and exc.filename is not None))


def _keep_output(run: RunDir, sample: Sample, text: str) -> None:
    """A greedy output's text in ``arms/<arm>/outputs.jsonl`` (samples keep only its hash)."""
    try:
        with (run.arm_dir(sample.arm) / OUTPUTS_FILE).open("a") as f:
            f.write(run.redactor.text(output_line(sample, text)))
    except OSError:
        pass  # the sample itself is what must not be lost


def _cpu_meter(engine: Any) -> CpuMeter:
    """The noise guard for an arm: the engine's process group, and its container's processes when it runs
    in one (``launch: compose``, or a ``docker run`` LaunchSpec naming its container)."""
    if engine is None:
        return CpuMeter(set())
    if isinstance(engine, ComposeEngine):
        return CpuMeter(set(), containers=engine.container_ids())
    pgids = {os.getpgid(engine.proc.pid)} if engine.proc else set()
    name = getattr(engine.spec, "container", None)
    return CpuMeter(pgids, containers=docker_container_ids([name]) if name else None)


def _run_arm(plan: Plan, planned: PlannedArm, run: RunDir, pass_index: int, events: ProtocolEvents,
             done: set[tuple[Any, ...]], shared: SharedEngine | None = None) -> dict[str, Any]:
    arm = planned.arm
    w = effective_workload(plan.config.workload, arm)
    own_engine, shared = shared is None, shared or SharedEngine()  # a caller's SharedEngine outlives this arm
    record: dict[str, Any] = {"status": "ok", "pass": pass_index}
    todo = [pt for pt in _points.arm_points(w, plan.prompts, plan.modes)
            if not _points.is_done(done, arm.name, pt, pass_index)]
    if not todo:
        record["status"] = "skipped (already complete)"
        return record
    events.on_arm_start(arm.name, pass_index)
    monitor = open_monitor(arm.settings.gpus, w.gpu_sample_interval_s)
    if monitor is not None:
        record["gpu_state"] = monitor.settings_state()
    try:
        with shared.use(server_key(arm), lambda: engine_for(planned, run, pass_index, w.boot_timeout_s, monitor,
                                                              record)) as ((base, engine), fresh):
            record["boot_s"] = engine.boot_s if engine and fresh else None
            with httpx.Client(base_url=base, headers=_headers(arm)) as http:
                served = probe_attached(arm, http) if arm.attached else None  # a dead URL fails here, in seconds
                eff = read_effective(planned.adapter, http, arm, EngineLog(engine.log_text()) if engine else None)
                if served is not None:
                    eff.model_id = served  # the arm's model, never whichever the server lists first
                if engine is not None and fresh:
                    eff.mismatches += planned.adapter.log_mismatches(arm, engine.log_text())
                    proc = getattr(engine, "proc", None)
                    if monitor is not None and proc is not None:
                        facts = run.read_run().get("roofline_models", {}).get(arm.name) or {}
                        record["gpu_engine_mib"], problem = offload_mismatch(
                            monitor, arm, proc.pid, facts.get("weights"), facts.get("layers", 0))
                        eff.mismatches += [problem] if problem else []
                record.update(effective=eff.record(), mismatches=eff.mismatches, version=eff.version,
                              model_id=eff.model_id)
                for msg in eff.mismatches:
                    events.on_warning(f"{arm.name}: {msg}")
                events.on_arm_ready(arm.name, eff, record["boot_s"])
                runner = _points.PointRunner(planned.adapter, arm, w, http, eff, events.on_warning)
                todo = runner.accept(todo)
                record.update(refused=runner.refused, shared_engine=not fresh)
                for i in range(w.warmup if fresh else 0):  # untimed: first-request allocations and caches
                    warm = build_request(arm, planned.adapter, w, plan.prompts[i % len(plan.prompts)],
                                         next(iter(plan.modes.values())), eff.model_id, min(w.max_tokens, 32))
                    stream_chat(http, warm, w.request_timeout_s)
                log = LogCursor(engine.log_path if engine else None)
                meter = _cpu_meter(engine)
                for point in todo:
                    prompt, mode_name, rep = point.prompt, point.mode, point.rep
                    if point.concurrency is not None:  # N streams at once: one sample per stream
                        samples = runner.run_batch(point, plan.modes[mode_name], eff.model_id, meter, run.run_id,
                                                   pass_index)
                    else:
                        body = build_request(arm, planned.adapter, w, prompt, plan.modes[mode_name], eff.model_id)
                        depth_info = runner.prepare(body, point)
                        before = planned.adapter.before_request(http)
                        log.read_new()
                        started_at = time.time()
                        meter.start()
                        if monitor is not None:
                            monitor.start()
                        result = stream_chat(http, body, w.request_timeout_s, planned.adapter.chunk_token_count)
                        gpu = monitor.stop() if monitor is not None else None
                        foreign = meter.stop()
                        request_log = EngineLog(log.read_new(), log.read_new if engine else None)
                        stats = planned.adapter.server_stats(http, result.final, before, request_log)
                        sample = make_sample(arm, planned.adapter, result, stats, run.run_id, prompt.name, mode_name,
                                             rep, pass_index, foreign, started_at, meter.foreign_limit(),
                                             settings_mismatch=bool(eff.mismatches))
                        if gpu is not None:
                            attach_gpu_sample(sample, gpu)
                            vram = gpu.vram_used_mib or 0.0
                            record["gpu_vram_peak_mib"] = max(record.get("gpu_vram_peak_mib") or 0.0, vram)
                        samples = [runner.finish(sample, point, body, result, depth_info)]
                        if plan.modes[mode_name].temperature == 0.0:  # greedy: kept for spec correctness
                            _keep_output(run, samples[0], result.text)
                    for sample in samples:
                        sample.flags += finish_flags(sample, w.fixed_length)
                        run.append(sample)
                        events.on_sample(sample)
                    if engine is not None and not engine.alive:
                        raise EngineStartupError(
                            f"{planned.adapter.name} died during the run (exit {engine.proc.returncode})",  # type: ignore[union-attr]
                            reason="died", log_tail=engine.log_tail())
                    if any("timeout" in s.flags for s in samples):  # a hung engine would stall every request
                        raise EngineStartupError(
                            f"{planned.adapter.name} stalled: no data for {w.request_timeout_s:g} s; engine stopped",
                            reason="stalled", log_tail=engine.log_tail() if engine else "")
                if fresh and pass_index == 0 and w.gates:  # quality probes, once per arm, after the timed part
                    gate_fields = request_fields(arm, planned.adapter, w, None)  # probes answer freely
                    record["gates"] = run_gates(http, w.gates, eff.model_id or arm.name, gate_fields,
                                                planned.adapter.stream_options(), w.seed, w.request_timeout_s)
    except (EngineError, MeasurementError) as exc:  # MeasurementError: e.g. a depth prompt could not be fitted
        record.update(status="failed", error=str(exc),
                      log_tail=getattr(exc, "log_tail", ""), reason=getattr(exc, "reason", None))
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
        record.update(status="failed", reason="internal-error", log_tail="", error=why)
        events.on_arm_failed(arm.name, why)
    finally:
        if own_engine:
            shared.close()
    return record


def run_plan(plan: Plan, run: RunDir, events: ProtocolEvents | None = None,
             done: set[tuple[str, str, str, int, int]] | None = None, start_pass: int = 0) -> dict[str, Any]:
    """Run every pass of the plan into ``run``; returns the per-arm records also written to run.json.

    ``start_pass`` skips the passes before it (adaptive passes run only the one :func:`add_pass` added).
    """
    events = events or ProtocolEvents()
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
                record = _run_arm(plan, by_name[name], run, pass_index, events, done, shared)
                arm_records.setdefault(name, []).append(record)
                run.append_arm_record(name, record)  # one line per arm: no rewrite of run.json per arm
            shared.close()
    finally:
        shared.close()
    run.update_run(finished_at=time.time(), arm_records=arm_records)  # a copy for readers of run.json alone
    return arm_records


def run_extra_pass(plan: Plan, run: RunDir, events: ProtocolEvents | None = None,
                   done: set[tuple[str, str, str, int, int]] | None = None) -> int:
    """Run one more pass (every arm, relaunched, in a fresh order) and record it in run.json ``orders``."""
    index = add_pass(plan)
    run.update_run(orders=plan.orders)
    run_plan(plan, run, events, done, start_pass=index)
    return index

