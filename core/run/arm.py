"""One arm on one engine start: launch, compose or attach; read back; warm up; every timed request.

This is the one place a timed request is made. Plain runs, depth and concurrency points, session turns (one
replay at a time, or N at once for a sessions capacity probe), phase runs, calibration arms, Ray blocks,
self-tests and live runs all open an :class:`ArmRun` and call :meth:`ArmRun.measure` (N replays at once:
:meth:`ArmRun.measure_replays`), so every sample gets the same guards whatever the run kind: the noise guard
(CPU used by foreign processes), ``settings-mismatch`` when the read-back differs from what was asked,
the finish flags, the point's own checks (exact depth, fixed length, needle, a structured answer's
validity and stalls), ``speculation-disengaged`` when a structured answer drafts nothing where free text
drafted, GPU telemetry, the kept greedy output, and the check that the engine is still alive and not
stalled. The session fills the arm's typed :class:`~bakeoff.core.results.record.ArmAttempt` as it goes; the
caller appends it to the run.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any

import httpx
from pydantic import SecretStr

from ..analysis.fairness import OUTPUTS_FILE, finish_flags, output_line
from ..common.errors import EngineStartupError
from ..common.redact import LiveLogMasker, redact_argv
from ..config.schema import Arm, Prompt, SamplingMode, Workload
from ..engine.attach import attach_base, probe_attached
from ..engine.checks import read_effective
from ..engine.client import StreamResult, stream_chat
from ..engine.compose import ComposeEngine, project_name
from ..engine.effective import Effective
from ..engine.hardware import attach_gpu_sample, offload_mismatch, visible_devices_env
from ..engine.launch import build_launch
from ..engine.launcher import Engine, LogCursor, RunningEngine, SharedEngine, free_port, port_is_free
from ..engine.models import cache_root
from ..engine.readback import EngineLog
from ..host.hostinfo import CpuMeter
from ..host.telemetry import GpuMonitor, open_monitor
from ..measure.arrivals import run_open_loop, schedule
from ..measure.concurrency import Batch, run_batch, run_replays
from ..measure.definitions import account, build_request, make_sample, request_fields
from ..measure.gates import run_gates
from ..measure.invariants import TOKENIZE_SOURCE, reasoning_tokens
from ..measure.judge import stop_judging
from ..measure.points import Point, PointRunner
from ..measure.structured import DraftTally
from ..results.flags import TIMEOUT
from ..results.record import ArmAttempt, GateAnswer, WarmupRecord
from ..results.sample import Sample
from ..results.store import RunDir
from .events import RunEvents
from .plan import PlannedArm, server_key

__all__ = ["ArmRun", "SampleLabel", "engine_for"]


@dataclass(frozen=True)
class SampleLabel:
    """How a sample is stored when it is not the arm's own: a phase run stores each phase under its setting."""

    arm: str
    phase: str | None = None
    pass_index: int = 0


def _headers(arm: Arm) -> dict[str, str]:
    """The Authorization header from the variable named by ``api_key_env``; the key is written nowhere."""
    if arm.api_key_env:
        key = SecretStr(os.environ.get(arm.api_key_env, ""))
        if key.get_secret_value():
            return {"Authorization": f"Bearer {key.get_secret_value()}"}
    return {}


def _new_replay_salt() -> str:
    """A session replay's salt, drawn at its first turn: the same digit count every time (the same token count on
    every arm), never the same twice, so no replay finds another's prefix in the cache."""
    return f"(session {random.SystemRandom().randrange(10**7, 10**8)})\n"


def _salted_turn(point: Point, salt: str, floor: int | None) -> Point:
    """A turn with its replay's salt at the start of its first message, and the prefix floor it is held to."""
    messages = [dict(m) for m in point.prompt.messages]
    messages[0]["content"] = salt + messages[0]["content"]
    return replace(point, prompt=point.prompt.model_copy(update={"messages": messages}), prefix_floor=floor)


@contextmanager
def engine_for(planned: PlannedArm, run: RunDir, pass_index: int, boot_timeout_s: float
               ) -> Iterator[tuple[str, RunningEngine | None]]:
    """The arm's server for one start: its base URL, and the engine bakeoff started (None when attached)."""
    arm = planned.arm
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
        spec = build_launch(planned.adapter, arm, port, run.arm_dir(arm.name))
        spec.env.update(visible_devices_env(arm))
        host = "127.0.0.1" if arm.settings.host in ("0.0.0.0", "::") else arm.settings.host
        base = f"http://{host}:{port}"
        run.write_arm_text(arm.name, "argv.txt", " ".join(redact_argv(spec.argv)) + "\n")
        with LiveLogMasker(run.redactor, log_path), \
                Engine(planned.adapter, spec, base, log_path, boot_timeout_s, port_taken=port_taken) as engine:
            yield base, engine
    finally:  # the engine wrote its log itself: mask any secret of this run it printed
        with suppress(OSError):
            run.redactor.file(log_path)


def _keep_output(run: RunDir, sample: Sample, text: str, budget_s: float) -> None:
    """A greedy output's text in ``arms/<arm>/outputs.jsonl`` (samples keep only its hash); masking it takes at
    most ``budget_s`` (the request timeout), however long the text."""
    try:
        with (run.arm_dir(sample.arm) / OUTPUTS_FILE).open("a") as f:
            # the text is masked, not the JSON line: a masked number would leave a line that is not JSON (R7)
            f.write(output_line(sample, run.redactor.text_within(text, budget_s)))
    except OSError:
        pass  # the sample itself is what must not be lost


def _settled(rates: Sequence[float | None], tolerance: float | None) -> bool | None:
    """Whether the last two warm-up rates agree within ``tolerance`` (None: not asked, or nothing to judge yet)."""
    if tolerance is None:
        return None
    if len(rates) < 2:
        return False
    a, b = rates[-2], rates[-1]
    if not a or not b:
        return None  # a request without a decode rate (too short, burst delivery): nothing to judge
    return abs(b / a - 1) <= tolerance


class ArmRun:
    """One arm on one engine start (launched, composed or attached), from read-back to the last request.

    Use as a context manager: entering starts (or reuses, through ``shared``) the engine, reads back what it
    runs with and checks it; leaving releases it. ``attempt`` is the arm's record of this start.

    :param shared: keeps one engine up across consecutive arms with the same server key (the caller's,
        which outlives this arm); without one the engine is stopped when the session ends.
    """

    def __init__(self, planned: PlannedArm, run: RunDir, pass_index: int, workload: Workload, *,
                 prompts: Sequence[Prompt], modes: Mapping[str, SamplingMode], shared: SharedEngine | None = None,
                 events: RunEvents | None = None) -> None:
        self.planned, self.arm, self.adapter = planned, planned.arm, planned.adapter
        self.run, self.pass_index, self.workload = run, pass_index, workload
        self.prompts, self.modes = list(prompts), dict(modes)
        self.events = events or RunEvents()
        self._own_shared, self.shared = shared is None, shared or SharedEngine()
        self.attempt = ArmAttempt(status="ok", pass_index=pass_index)
        self.fresh = False
        self.engine: RunningEngine | None = None
        self._drafts = DraftTally()  # free-text drafts of this engine start, to judge structured answers by
        self._requests = 0  # requests built on this engine start, for the token witness's one in so many
        self._replay_salt = ""  # the session replay under way: its salt, and its next turn's prefix floor
        self._prefix_floor: int | None = None
        self._counts = self.adapter.reader.chunk_token_count
        # open loop: asked (requests in flight, seconds since the first was due) before each send; True cuts the
        # rest of the schedule (the capacity search's over-saturation stop, core/run/capacity.py)
        self.open_loop_stop: Callable[[int, float], bool] | None = None
        self._stack = ExitStack()

    # -- opening ---------------------------------------------------------------------------------
    def __enter__(self) -> ArmRun:
        try:
            self._open()
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is not None and not self._own_shared:
            self.shared.close()  # an engine that failed its arm is not handed to the next one
        self._close()

    def _close(self) -> None:
        self._stack.close()
        if self._own_shared:
            self.shared.close()

    def _open(self) -> None:
        arm, w = self.arm, self.workload
        self._stack.callback(stop_judging)  # the child judging patterns, if one started, ends with the session
        self.monitor: GpuMonitor | None = open_monitor(arm.settings.gpus, w.gpu_sample_interval_s)
        if self.monitor is not None:
            self.attempt.gpu_state = self.monitor.settings_state()
            if not arm.attached:  # before this arm's engine loads anything
                self.attempt.gpu_idle_power_w = self.monitor.idle_power_w()
        (base, self.engine), self.fresh = self._stack.enter_context(self.shared.use(
            server_key(arm), lambda: engine_for(self.planned, self.run, self.pass_index, w.boot_timeout_s)))
        engine = self.engine
        self.attempt.boot_s = engine.boot_s if engine is not None and self.fresh else None
        self.attempt.shared_engine = not self.fresh
        self.http = self._stack.enter_context(httpx.Client(base_url=base, headers=_headers(arm)))
        served = probe_attached(arm, self.http) if arm.attached else None  # a dead URL fails here, in seconds
        eff = read_effective(self.adapter, self.http, arm, EngineLog(engine.log_text()) if engine else None)
        if served is not None:
            eff.model_id = served  # the arm's model, never whichever the server lists first
        if engine is not None and self.fresh:
            eff.mismatches += self.adapter.reader.log_mismatches(arm, engine.log_text())
            pid = engine.pid
            if self.monitor is not None and pid is not None:
                facts = self.run.read_record().roofline_models.get(arm.name) or {}
                self.attempt.gpu_engine_mib, problem = offload_mismatch(
                    self.monitor, arm, pid, facts.get("weights"), facts.get("layers", 0))
                eff.mismatches += [problem] if problem else []
        self.effective: Effective = eff
        self.attempt.effective, self.attempt.mismatches = eff.record(), eff.mismatches
        self.attempt.version, self.attempt.model_id = eff.version, eff.model_id
        for msg in eff.mismatches:
            self.events.on_warning(f"{arm.name}: {msg}")
        self.events.on_arm_ready(arm.name, eff, self.attempt.boot_s)
        self.runner = PointRunner(self.adapter, arm, w, self.http, eff, self.events.on_warning)
        self.attempt.refused = self.runner.refused
        self._log = LogCursor(engine.log_path if engine else None)
        self._meter = engine.noise_guard() if engine is not None else CpuMeter(set())

    def _request(self, prompt: Prompt, mode: SamplingMode, model_id: str | None,
                 max_tokens: int | None = None) -> dict[str, Any]:
        """The request body (:func:`build_request`), counted: one in every ``witness.every(arm)`` also asks the
        engine to name the tokens it sends (timed, warm-up and untimed turns alike)."""
        body = build_request(self.arm, self.adapter, self.workload, prompt, mode, model_id, max_tokens)
        body.update(self.adapter.witness.for_request(self.arm, self._requests))
        self._requests += 1
        return body

    # -- before the timed part -------------------------------------------------------------------
    def accept(self, points: Sequence[Point]) -> list[Point]:
        """The points this engine can serve (refused ones were warned about and recorded)."""
        return self.runner.accept(list(points))

    def warm_up(self) -> None:
        """Untimed requests on a fresh engine (first-request allocations and caches; none on a reused one):
        ``warmup`` of them, then more until two consecutive decode rates agree within ``warmup_settle`` (an
        engine can come up in a slow state that passes), at most ``warmup_max``; recorded in the attempt."""
        w = self.workload
        if not self.fresh or w.warmup == 0:
            return
        mode = next(iter(self.modes.values()))
        record = self.attempt.warmup = WarmupRecord()
        most = max(w.warmup, w.warmup_max) if w.warmup_settle is not None else w.warmup
        for i in range(most):
            if i >= w.warmup and record.settled in (True, None):
                break
            body = self._request(self.prompts[i % len(self.prompts)], mode,
                                 self.effective.model_id, min(w.max_tokens, 32))
            result = stream_chat(self.http, body, w.request_timeout_s, self._counts)
            record.decode_tps.append(account(result, self.adapter.capabilities.token_counts).decode_tps)
            record.requests += 1
            record.settled = _settled(record.decode_tps, w.warmup_settle)

    # -- the timed requests ----------------------------------------------------------------------
    def measure(self, point: Point, label: SampleLabel | None = None) -> list[Sample]:
        """One point: a request, ``point.concurrency`` streams at once, or an open-loop rate point (a sample per
        request). Every sample is flagged, stored and announced here; a dead or stalled engine ends the arm
        after it."""
        if point.session is not None:
            point = self._in_replay(point)
        mode = self.modes[point.mode]
        if point.rate is not None:
            samples = self._open_loop(point, mode)
        elif point.concurrency is not None:
            samples = self._batch(point, mode)
        else:
            samples = [self._single(point, mode)]
        stored = self._store(samples, label)
        if point.session is not None:  # the next turn's floor: this turn's whole prompt, when it was answered
            self._prefix_floor = stored[-1].prompt_tokens if stored and stored[-1].status == "ok" else None
        return stored

    def measure_replays(self, replays: Sequence[Sequence[Point]]) -> list[Sample]:
        """Session replays at once (core/measure/points.py ``concurrent_replays``: a sessions capacity probe), each
        its turns in order on its own stream, a sample per turn, flagged, stored and announced as :meth:`measure`
        does. Each replay draws its own salt, so no replay finds another's prefix in the cache, and keeps the
        prefix cache on, so it reuses its own. As in a batch, server stats come from each response only
        (``/metrics`` deltas and log lines would mix the overlapping turns) and the foreign-CPU meter spans the
        whole probe; a turn's usage (cached tokens included) is its own, and its prefix floor is the turn before
        it in its replay."""
        salts: set[str] = set()
        while len(salts) < len(replays):  # distinct: two replays with one salt would share a prefix
            salts.add(_new_replay_salt())
        salted = [[_salted_turn(p, salt, None) for p in turns] for turns, salt in zip(replays, salts, strict=True)]
        mode = self.modes[salted[0][0].mode]
        bodies = [[self._turn_body(p, mode) for p in turns] for turns in salted]
        started_at = time.time()
        self._meter.start()
        batch = run_replays(self.http, bodies, self.workload.request_timeout_s, self._counts)
        foreign = self._meter.stop()
        first_send = min(r.t_send_ns for r in batch.results)
        results = iter(batch.results)
        samples = []
        for turns, turn_bodies in zip(salted, bodies, strict=True):
            floor: int | None = None
            for point, body in zip(turns, turn_bodies, strict=True):
                result = next(results)
                at = replace(point, prefix_floor=floor)
                sample = self._sample(at, result, EngineLog(), None,
                                      started_at + (result.t_send_ns - first_send) / 1e9, foreign)
                sample = self.runner.finish(sample, at, body, result, None)
                sample.batch_id, sample.batch_wall_s = batch.batch_id, batch.wall_s
                samples.append(sample)
                floor = sample.prompt_tokens if sample.status == "ok" else None
        return self._store(samples, None)

    def _store(self, samples: Sequence[Sample], label: SampleLabel | None) -> list[Sample]:
        """Every sample flagged, stored and announced; then the engine checked (dead or stalled ends the arm)."""
        stored = []
        for sample in samples:
            if label is not None:
                sample.arm, sample.phase, sample.pass_index = label.arm, label.phase, label.pass_index
            sample.flags += finish_flags(sample, self.workload.fixed_length)
            if disengaged := self._drafts.judge(sample):
                sample.flags.append(disengaged)
            stored.append(self.run.append(sample))
            self.events.on_sample(stored[-1])
        self._check_engine(stored)
        return stored

    def _in_replay(self, point: Point) -> Point:
        """A turn as its replay sends it (core/measure/points.py ``turn_points``), with the engine's prefix cache on
        (``prefix_cache.request_fields``). The first message carries a salt drawn per replay at its first turn
        (same digit count every time), so no replay, of this arm or another on the same server, finds its prefix
        in the cache: each session starts cold and warms only itself. The previous turn's prompt is the floor
        the cached count is held to."""
        if point.turn == 0:
            self._replay_salt = _new_replay_salt()
            self._prefix_floor = None
        return _salted_turn(point, self._replay_salt, self._prefix_floor)

    def resend(self, point: Point) -> None:
        """A turn a resumed run already stores: sent again untimed, to rebuild the prefix the next turn reuses,
        and never stored twice."""
        self._prefix_floor = self._untimed_turn(self._in_replay(point))

    def _untimed_turn(self, point: Point) -> int | None:
        """A turn a resumed run already stored, sent again with the prefix cache on so the engine holds what the
        next turn reuses; nothing is stored. Its prompt tokens (the next turn's floor), None if it failed."""
        body = self._turn_body(point, self.modes[point.mode])
        result = stream_chat(self.http, body, self.workload.request_timeout_s, self._counts)
        prompt = (result.usage or {}).get("prompt_tokens")
        return prompt if result.error is None and isinstance(prompt, int) else None

    def _sample(self, point: Point, result: StreamResult, stats_log: EngineLog, before: object,
                started_at: float, foreign: float | None) -> Sample:
        stats = self.adapter.reader.server_stats(self.http, result.final, before, stats_log,
                                                 arm=self.arm)
        self._text_witness(point, result)
        return make_sample(self.arm, self.adapter, result, stats, self.run.run_id, point.prompt.name, point.mode,
                           point.rep, self.pass_index, foreign, started_at, self._meter.foreign_limit(),
                           settings_mismatch=bool(self.effective.mismatches))

    @property
    def _synthesized(self) -> bool:
        """A model bakeoff synthesized (random weights, in its cache's synth/): its token sequences do not
        re-tokenize to themselves, so the text witness would read every answer as short."""
        model, synth = str(self.arm.model or ""), str(cache_root() / "synth")
        return bool(model) and os.path.abspath(model).startswith(synth + os.sep)

    def _text_witness(self, point: Point, result: StreamResult) -> None:
        """Where the stream named no token one by one, count the delivered text with the engine's tokenizer,
        after the stream ended (off the clock): a short-changed stream is flagged on every engine that has the
        endpoint, at no cost to the timed rate. Plain answers only: a tool call's or a grammar's text is
        rebuilt from parsed fields, and reasoning streamed apart loses its tags."""
        if not self.workload.text_witness or self._synthesized or result.error is not None \
                or result.witness_tokens is not None \
                or not result.text or result.tool_calls \
                or point.prompt.structured is not None or reasoning_tokens(result.usage):
            return
        if (n := self.adapter.witness.count_output_tokens(self.http, result.text)) is not None:
            result.witness_tokens, result.witness_source = n, TOKENIZE_SOURCE

    def _turn_body(self, point: Point, mode: SamplingMode) -> dict[str, Any]:
        """A session turn's request: the prefix cache on, through the engine's own switch; recorded."""
        body = self._request(point.prompt, mode, self.effective.model_id)
        self.attempt.prefix_cache = self.adapter.prefix_cache.request_fields(self.arm)
        body.update(self.attempt.prefix_cache)
        return body

    def _single(self, point: Point, mode: SamplingMode) -> Sample:
        body = (self._turn_body(point, mode) if point.session is not None
                else self._request(point.prompt, mode, self.effective.model_id))
        depth_info = self.runner.prepare(body, point)
        before = self.adapter.reader.before_request(self.http)
        self._log.read_new()
        started_at = time.time()
        self._meter.start()
        if self.monitor is not None:
            self.monitor.start()
        result = stream_chat(self.http, body, self.workload.request_timeout_s, self._counts)
        gpu = self.monitor.stop() if self.monitor is not None else None
        foreign = self._meter.stop()
        request_log = EngineLog(self._log.read_new(), self._log.read_new if self.engine else None)
        sample = self._sample(point, result, request_log, before, started_at, foreign)
        if gpu is not None:
            attach_gpu_sample(sample, gpu)
            self.attempt.gpu_vram_peak_mib = max(self.attempt.gpu_vram_peak_mib or 0.0, gpu.vram_used_mib or 0.0)
        sample = self.runner.finish(sample, point, body, result, depth_info)
        if mode.temperature == 0.0:  # greedy: kept for spec correctness
            _keep_output(self.run, sample, result.text, self.workload.request_timeout_s)
        return sample

    def _batch(self, point: Point, mode: SamplingMode) -> list[Sample]:
        """``point.concurrency`` streams at once, all sharing the batch's id and wall. Server stats come from
        each response only (``/metrics`` deltas and log lines would mix streams)."""
        n = point.concurrency or 1
        bodies = [self._request(point.prompt, mode, self.effective.model_id)
                  for _ in range(n)]
        infos = [self.runner.prepare(body, point) for body in bodies]
        started_at = time.time()
        self._meter.start()
        batch: Batch = run_batch(self.http, bodies, self.workload.request_timeout_s, self._counts)
        foreign = self._meter.stop()
        samples = []
        for body, info, result in zip(bodies, infos, batch.results, strict=True):
            sample = self._sample(point, result, EngineLog(), None, started_at, foreign)
            sample = self.runner.finish(sample, point, body, result, info)
            sample.batch_id, sample.batch_wall_s = batch.batch_id, batch.wall_s
            samples.append(sample)
        return samples

    def _open_loop(self, point: Point, mode: SamplingMode) -> list[Sample]:
        """``workload.arrival``'s requests at ``point.rate``, each sent when the seeded schedule says (prompts
        in turn), whatever the server is doing. TTFT and end-to-end time are also counted from when each was
        due (``ttft_sched_s``, ``e2e_sched_s``); server stats come from each response only, as in a batch."""
        arrival = self.workload.arrival
        assert arrival is not None and point.rate is not None
        count = arrival.count(point.rate)
        offsets = schedule(point.rate, count, arrival.distribution, arrival.seed)
        prompts = [self.prompts[i % len(self.prompts)] for i in range(count)]
        bodies = [self._request(p, mode, self.effective.model_id)
                  for p in prompts]
        infos = [self.runner.prepare(body, point) for body in bodies]
        started_at = time.time()
        self._meter.start()
        loop = run_open_loop(self.http, bodies, offsets, self.workload.request_timeout_s,
                             self._counts, arrival.max_in_flight, self.open_loop_stop)
        foreign = self._meter.stop()
        if loop.most_waiting > 1:
            self.events.on_warning(f"{self.arm.name}: at {point.rate:g} req/s up to {loop.most_waiting} requests "
                                   f"waited for a place (arrival.max_in_flight); their latency counts from when "
                                   "they were due")
        samples = []
        for i, (prompt, body, info, result) in enumerate(zip(prompts, bodies, infos, loop.results, strict=True)):
            at = Point(prompt, point.mode, i, rate=point.rate)
            sample = self._sample(at, result, EngineLog(), None, started_at + offsets[i], foreign)
            sample = self.runner.finish(sample, at, body, result, info)
            due = loop.due_ns[i]
            lag = (result.t_send_ns - due) / 1e9  # t_first - due = ttft_s + lag
            sample.scheduled_s, sample.send_lag_s = offsets[i], max(0.0, lag)
            if sample.ttft_s is not None:
                sample.ttft_sched_s = sample.ttft_s + lag
            if result.t_done_ns:
                sample.e2e_sched_s = (result.t_done_ns - due) / 1e9
            sample.batch_id, sample.batch_wall_s = loop.run_id, loop.wall_s
            samples.append(sample)
        return samples

    def _check_engine(self, samples: Sequence[Sample]) -> None:
        """:raises EngineStartupError: the engine died, or a request got no data until its timeout."""
        engine = self.engine
        if engine is not None and not engine.alive:
            raise EngineStartupError(f"{self.adapter.name} died during the run (exit {engine.exit_code})",
                                     reason="died", log_tail=engine.log_tail())
        if any(s.has_flag(TIMEOUT) for s in samples):  # a hung engine would stall every request
            raise EngineStartupError(
                f"{self.adapter.name} stalled: no data for {self.workload.request_timeout_s:g} s; engine stopped",
                reason="stalled", log_tail=engine.log_tail() if engine else "")

    # -- after the timed part --------------------------------------------------------------------
    def gates(self) -> None:
        """Quality probes, once per arm (first pass, fresh engine), after the timed part; answers recorded."""
        w = self.workload
        if not (self.fresh and self.pass_index == 0 and w.gates):
            return
        fields = request_fields(self.arm, self.adapter, w, None)  # probes answer freely
        raw = run_gates(self.http, w.gates, self.effective.model_id or self.arm.name, fields,
                        self.adapter.reader.stream_options(self.adapter.capabilities.token_counts), w.seed,
                        w.request_timeout_s)
        self.attempt.gates = {name: GateAnswer.model_validate(g) for name, g in raw.items()}
