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
import random
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import SecretStr

from . import points as _points
from .adapter import Effective, EngineAdapter, check_arm_capabilities
from .attach import attach_base, probe_attached
from .client import account, stream_chat
from .compose import ComposeEngine, project_name
from .concurrency import check_levels_before_launch
from .config import Arm, BakeoffFile, Prompt, SamplingMode
from .depth import check_depths_before_launch
from .errors import BakeoffError, ConfigError, EngineError, EngineStartupError, MeasurementError
from .fairness import OUTPUTS_FILE, finish_flags, output_line
from .gates import run_gates
from .hardware import attach_gpu_sample, hardware_record, offload_mismatch, visible_devices_env
from .hostinfo import FOREIGN_LOAD_FLOOR, CpuMeter, docker_container_ids, host_info
from .launcher import Engine, LogCursor, free_port, port_is_free
from .prompts import resolve_prompts
from .redact import Redactor, redact_argv, redact_config
from .registry import load_engine
from .sample import Sample
from .store import RunDir
from .sweep import SharedEngine, effective_workload, order_for_sharing, refuse_ineffective_arms, server_key
from .telemetry import GpuMonitor, open_monitor

__all__ = ["PlannedArm", "Plan", "plan_run", "run_plan", "ProtocolEvents", "build_request"]


@dataclass
class PlannedArm:
    arm: Arm
    adapter: EngineAdapter
    index: int


@dataclass
class Plan:
    config: BakeoffFile
    arms: list[PlannedArm]
    prompts: list[Prompt]
    modes: dict[str, SamplingMode]
    orders: list[list[str]]  # arm names per pass

    @property
    def requests_total(self) -> int:
        w = self.config.workload
        return w.passes * sum(_points.samples_expected(effective_workload(w, a.arm), len(self.prompts), len(w.modes))
                              for a in self.arms)


@dataclass
class ProtocolEvents:
    """Callbacks for progress display; all optional."""

    on_arm_start: Callable[[str, int], None] = lambda arm, pass_index: None
    on_arm_ready: Callable[[str, Effective, float | None], None] = lambda arm, eff, boot: None
    on_sample: Callable[[Sample], None] = lambda s: None
    on_arm_failed: Callable[[str, str], None] = lambda arm, why: None
    on_warning: Callable[[str], None] = lambda msg: None


def plan_run(config: BakeoffFile) -> Plan:
    """Load adapters, validate engine options and capabilities, and preflight every arm.

    Nothing is launched: a config or preflight problem in any arm stops the run before it starts.
    """
    arms = []
    for i, arm in enumerate(config.arms):
        adapter = load_engine(arm.engine)
        adapter.options(arm, i)
        check_arm_capabilities(adapter, arm)
        arms.append(PlannedArm(arm, adapter, i))
    for planned in arms:
        if planned.arm.api_key_env and not os.environ.get(planned.arm.api_key_env):
            raise ConfigError(f"arm {planned.arm.name!r}: api_key_env names ${planned.arm.api_key_env}, "
                              f"which is not set")
        if not planned.arm.attached:
            planned.adapter.preflight(planned.arm)
    refuse_ineffective_arms([(a.arm, a.adapter) for a in arms], config.workload)
    w = config.workload
    rng = random.Random(w.seed)
    names = [a.arm.name for a in arms]
    orders = []
    for p in range(w.passes):
        order = list(names)
        if p > 0 or w.passes > 1:
            rng.shuffle(order)
        orders.append(order)
    modes = {m: w.sampling_modes()[m] for m in w.modes}
    check_depths_before_launch(config, {a.arm.name: a.adapter for a in arms})
    check_levels_before_launch(config)
    return Plan(config, arms, resolve_prompts(w), modes, order_for_sharing(orders, config.arms))


def build_request(planned: PlannedArm, workload: Any, prompt: Prompt, mode: SamplingMode,
                  model_id: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model_id or planned.arm.name,
        "messages": prompt.messages,
        "max_tokens": workload.max_tokens,
        "stream": True,
        "stream_options": planned.adapter.stream_options(),
        "temperature": mode.temperature,
    }
    for key in ("top_p", "top_k", "seed"):
        if getattr(mode, key) is not None:
            body[key] = getattr(mode, key)
    body.update(planned.adapter.request_fields(planned.arm, workload))
    return body


def _headers(arm: Arm) -> dict[str, str]:
    """The Authorization header from the variable named by ``api_key_env``; the key is written nowhere."""
    if arm.api_key_env:
        key = SecretStr(os.environ.get(arm.api_key_env, ""))
        if key.get_secret_value():
            return {"Authorization": f"Bearer {key.get_secret_value()}"}
    return {}


@contextmanager
def _engine_for(planned: PlannedArm, run: RunDir, pass_index: int, boot_timeout_s: float,
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


def _make_sample(planned: PlannedArm, result: Any, stats: Any, run_id: str, prompt: str, mode: str,
                 rep: int, pass_index: int, foreign: float | None, started_at: float,
                 foreign_limit: float = FOREIGN_LOAD_FLOOR) -> Sample:
    caps = planned.adapter.capabilities
    fields = account(result, caps.token_counts)
    flags: list[str] = fields.pop("flags") + list(stats.flags)
    sample = Sample(run_id=run_id, arm=planned.arm.name, engine=planned.adapter.name, prompt=prompt, mode=mode,
                    rep=rep, pass_index=pass_index, started_at=started_at, **fields)
    sample.status = "error" if result.error else "ok"
    sample.error = result.error
    sample.server_completion_tokens = stats.completion_tokens
    sample.server_decode_tps = stats.decode_tps
    sample.server_prefill_tps = stats.prefill_tps
    if stats.completion_tokens is not None and sample.completion_tokens is not None \
            and stats.completion_tokens != sample.completion_tokens:
        flags.append(f"server-count-mismatch: server {stats.completion_tokens}, usage {sample.completion_tokens}")
    if planned.arm.speculative.enabled or stats.drafted:
        sample.drafted, sample.accepted, sample.drafts = stats.drafted, stats.accepted, stats.drafts
        sample.acceptance_source = stats.source
        if stats.drafted:
            sample.acceptance = (stats.accepted or 0) / stats.drafted
        if stats.drafts:
            sample.mean_accepted_len = 1 + (stats.accepted or 0) / stats.drafts
        sample.accepted_per_position = stats.extra.get("accepted_per_position")
    sample.foreign_cpu_cores = foreign
    if foreign is not None and foreign > foreign_limit:  # judged against the cores the engine left free
        flags.append(f"foreign-load: {foreign:.2f} cores used by other processes (limit {foreign_limit:.2f})")
    sample.flags = flags
    return sample


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
        with shared.use(server_key(arm), lambda: _engine_for(planned, run, pass_index, w.boot_timeout_s, monitor,
                                                              record)) as ((base, engine), fresh):
            record["boot_s"] = engine.boot_s if engine and fresh else None
            with httpx.Client(base_url=base, headers=_headers(arm)) as http:
                served = probe_attached(arm, http) if arm.attached else None  # a dead URL fails here, in seconds
                eff = planned.adapter.effective_settings(http, arm)
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
                record.update(effective=eff.values, mismatches=eff.mismatches, version=eff.version,
                              model_id=eff.model_id)
                for msg in eff.mismatches:
                    events.on_warning(f"{arm.name}: {msg}")
                events.on_arm_ready(arm.name, eff, record["boot_s"])
                points = _points.PointRunner(planned.adapter, arm, w, http, eff, events.on_warning)
                todo = points.accept(todo)
                record.update(refused=points.refused, shared_engine=not fresh)
                for i in range(w.warmup if fresh else 0):  # untimed: first-request allocations and caches
                    warm = build_request(planned, w, plan.prompts[i % len(plan.prompts)],
                                         next(iter(plan.modes.values())), eff.model_id)
                    warm["max_tokens"] = min(w.max_tokens, 32)
                    stream_chat(http, warm, w.request_timeout_s)
                log = LogCursor(engine.log_path if engine else None)
                planned.adapter.follow_log(log.read_new if engine else None)
                meter = _cpu_meter(engine)
                for point in todo:
                    prompt, mode_name, rep = point.prompt, point.mode, point.rep
                    if point.concurrency is not None:  # N streams at once: one sample per stream
                        # run_batch calls both right away, inside this iteration: the loop variables are current
                        samples = points.run_batch(point, lambda: build_request(
                            planned, w, prompt, plan.modes[mode_name], eff.model_id),  # noqa: B023
                            lambda res, st, fg, t0: _make_sample(
                                planned, res, st, run.run_id, prompt.name, mode_name, rep,  # noqa: B023
                                pass_index, fg, t0, meter.foreign_limit()), meter)
                    else:
                        body = build_request(planned, w, prompt, plan.modes[mode_name], eff.model_id)
                        depth_info = points.prepare(body, point)
                        before = planned.adapter.before_request(http)
                        log.read_new()
                        started_at = time.time()
                        meter.start()
                        if monitor is not None:
                            monitor.start()
                        result = stream_chat(http, body, w.request_timeout_s, planned.adapter.chunk_token_count)
                        gpu = monitor.stop() if monitor is not None else None
                        foreign = meter.stop()
                        stats = planned.adapter.server_stats(http, result.final, before, log.read_new())
                        sample = _make_sample(planned, result, stats, run.run_id, prompt.name, mode_name, rep,
                                              pass_index, foreign, started_at, meter.foreign_limit())
                        if eff.mismatches:
                            sample.flags.append("settings-mismatch")
                        if gpu is not None:
                            attach_gpu_sample(sample, gpu)
                            vram = gpu.vram_used_mib or 0.0
                            record["gpu_vram_peak_mib"] = max(record.get("gpu_vram_peak_mib") or 0.0, vram)
                        samples = [points.finish(sample, point, body, result, depth_info)]
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
                    gate_fields = planned.adapter.request_fields(arm, w.model_copy(update={"fixed_length": False}))
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


def add_pass(plan: Plan) -> int:
    """Adaptive passes: append one more pass to the plan and return its index.

    Its order is the one a plan made with that many passes would have drawn from the recorded seed, so an
    adaptive run is reproducible; the caller records ``plan.orders`` in run.json and runs it with
    ``run_plan(..., start_pass=index)``.
    """
    rng = random.Random(plan.config.workload.seed)
    names = [a.arm.name for a in plan.arms]
    for _ in range(len(plan.orders) + 1):
        order = list(names)
        rng.shuffle(order)
    plan.orders.append(order_for_sharing([order], plan.config.arms)[0])
    return len(plan.orders) - 1


def run_extra_pass(plan: Plan, run: RunDir, events: ProtocolEvents | None = None,
                   done: set[tuple[str, str, str, int, int]] | None = None) -> int:
    """Run one more pass (every arm, relaunched, in a fresh order) and record it in run.json ``orders``."""
    index = add_pass(plan)
    run.update_run(orders=plan.orders)
    run_plan(plan, run, events, done, start_pass=index)
    return index


def plan_warnings(plan: Plan) -> list[str]:
    """Design caveats known before the first request (a stateful speculator serving several reps)."""
    from .stats import stateful_warning

    out = []
    for a in plan.arms:
        spec = a.arm.speculative
        msg = stateful_warning(a.arm.name, spec.method, spec.variant, a.adapter.capabilities.stateful_speculators,
                               effective_workload(plan.config.workload, a.arm).reps)
        if msg:
            out.append(msg)
    return out


def run_metadata(plan: Plan) -> dict[str, Any]:
    """What run.json records before the first request: resolved config (env values, URL credentials and
    key-flag values masked), order, seed, host, capabilities."""
    from . import __version__

    return {
        "tool": {"name": "bakeoff", "version": __version__},
        "config": redact_config(plan.config.model_dump(mode="json")),
        "baseline": plan.config.baseline_arm,
        "orders": plan.orders,
        "seed": plan.config.workload.seed,
        "prompts": [p.model_dump() for p in plan.prompts],
        "engines": {a.arm.name: {"engine": a.adapter.name,
                                 "capabilities": a.adapter.capabilities.model_dump(mode="json")}
                    for a in plan.arms},
        "host": host_info(),
        **hardware_record([a.arm for a in plan.arms]),
        "started_at": time.time(),
    }


__all__ += ["run_metadata", "add_pass", "run_extra_pass", "plan_warnings", "is_write_failure"]
