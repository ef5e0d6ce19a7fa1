"""The live service around a run: check it, record it, stop it, and always bring it back.

``bakeoff run`` with a ``live:`` section checks that the service is healthy (and serves its model
name), records its configuration in ``RUN/live/``, starts the watchdog (core/run/watchdog.py), stops the
service, runs the arms on private loopback ports, then restores it and checks its health again. What
happened is in run.json under ``live``: stopped_at, restored_at, restored_by (bakeoff or watchdog) and
healthy_after. Nothing is stopped without a ``live:`` section naming it; ``--dry-run`` prints every
command instead of running any.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from ..common.errors import EngineError
from ..common.redact import redact_argv, redact_text
from ..config.checks import check_live_config, stops_live
from ..config.live import LiveService
from ..config.schema import BakeoffFile
from ..engine.launch import build_launch
from ..results.record import LiveRecord
from ..results.store import RunDir
from .plan import plan_run
from .watchdog import Guard, health_problem, run_command, shown

__all__ = ["LIVE_UNDO", "LiveRun", "check_live_config", "dry_run_lines", "redact", "service_commands"]

LIVE_UNDO = "live"
_SECRET = re.compile(r"(?i)((?:api[_-]?key|token|secret|password|passwd)[\w-]*[=:]\s*\"?|--api-key[= ])[^\s\",]+")


def redact(text: str) -> str:
    """Values of anything that looks like a key, token or password, replaced (records keep no secrets):
    core/common/redact.py's shapes, plus ``HF_TOKEN=...`` environment lines and ``--api-key X`` in free text."""
    return redact_text(_SECRET.sub(r"\1***", text))


def service_commands(live: LiveService) -> dict[str, list[str]]:
    """stop, start and record argv for the service (the user's own commands win)."""
    if live.kind == "compose":
        from ..engine.compose import compose_command

        base = [*compose_command(), *(["-f", live.compose_file] if live.compose_file else [])]
        defaults = {"stop": [*base, "stop", live.name], "start": [*base, "start", live.name],
                    "record": [*base, "config", "--format", "json", live.name]}
    elif live.kind == "docker":
        defaults = {"stop": ["docker", "stop", live.name], "start": ["docker", "start", live.name],
                    "record": ["docker", "inspect", live.name]}
    elif live.kind == "systemd":
        defaults = {"stop": ["systemctl", "stop", live.name], "start": ["systemctl", "start", live.name],
                    "record": ["systemctl", "cat", live.name]}
    else:
        defaults = {"stop": [], "start": [], "record": []}
    return {"stop": live.stop or defaults["stop"], "start": live.start or defaults["start"],
            "record": live.record or defaults["record"]}


def deadline_s(config: BakeoffFile) -> float:
    if config.live is not None:
        return config.live.watchdog_s
    assert config.phases is not None
    return config.phases.deadline_s()


def _record_config(live: LiveService, commands: dict[str, list[str]], directory: Path) -> dict[str, Any]:
    """What the live service runs with: its own API's answers and the kind's record command, redacted."""
    record: dict[str, Any] = {"kind": live.kind, "name": live.name, "health": live.health, "model": live.model,
                              "port": live.port, "commands": {k: redact_argv(v) for k, v in commands.items()}}
    for path in ("/v1/models", "/props"):
        try:
            r = httpx.get(live.base_url + path, timeout=5)
            if r.status_code == 200:
                record[path] = json.loads(redact(r.text))
        except (httpx.HTTPError, ValueError):
            continue
    if commands["record"]:
        try:
            done = subprocess.run(commands["record"], capture_output=True, text=True, timeout=60,
                                  check=False)
            record["record_command"] = {"argv": redact_argv(commands["record"]), "exit_code": done.returncode,
                                        "output": redact(done.stdout or done.stderr)[-20000:]}
        except (OSError, subprocess.TimeoutExpired) as exc:
            record["record_command"] = {"argv": redact_argv(commands["record"]), "error": redact(str(exc))}
    (directory / "config.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    return record


class LiveRun:
    """The live side of one run: opened before the first arm, closed on every way out.

    Without ``live:`` and ``phases:`` it does nothing. ``guard`` is the run's undo guard (phases register
    their reverts there too).
    """

    def __init__(self, config: BakeoffFile, run: RunDir, say: Callable[[str], None]) -> None:
        self.config, self.run, self.say = config, run, say
        self.guard: Guard | None = None
        self.stopped = False

    def open(self) -> LiveRun:
        live = self.config.live
        if live is None and self.config.phases is None:
            return self
        check_live_config(self.config)
        directory = self.run.path / "live"
        directory.mkdir(exist_ok=True)
        guard = Guard(directory)
        if live is not None:
            commands = service_commands(live)
            problem = health_problem(live.health, live.model)
            self.run.update_record(live=LiveRecord(name=live.name, kind=live.kind, health=live.health,
                                                   model=live.model, healthy_before=problem is None,
                                                   log_dir="live"))
            if problem is not None:
                if live.if_unhealthy == "refuse":
                    raise EngineError(f"live service {live.name!r} is unhealthy before the run: {problem}; nothing "
                                      "was stopped (set live.if_unhealthy: proceed to run anyway)")
                self.say(f"live service {live.name!r} is unhealthy before the run ({problem}); proceeding as told")
            _record_config(live, commands, directory)
        guard.start(deadline_s(self.config), self.run.path)
        self.guard = guard  # from here on, close() releases (or leaves armed) the watchdog
        if live is not None and stops_live(self.config):
            self._stop(live)
        return self

    def _stop(self, live: LiveService) -> None:
        assert self.guard is not None
        commands = service_commands(live)
        self.guard.push({"id": LIVE_UNDO, "what": "live", "argv": commands["start"], "health": live.health,
                         "model": live.model, "timeout_s": live.restore_timeout_s})
        self.say(f"stopping live service {live.name!r}: {shown(commands['stop'])}")
        self.stopped = True
        code, _ = run_command(commands["stop"], live.stop_timeout_s, self.guard.log_path)
        self._update_live(stopped_at=time.time())
        if code != 0:
            raise EngineError(f"live service {live.name!r}: stop command {commands['stop'][0]!r} "
                              f"{'exited with ' + str(code) if code is not None else 'did not finish'} "
                              f"(log: {self.guard.log_path})")
        deadline = time.monotonic() + live.stop_timeout_s
        while health_problem(live.health, None, timeout=2) is None:
            if time.monotonic() > deadline:
                raise EngineError(f"live service {live.name!r} still answers at {live.health} "
                                  f"{live.stop_timeout_s:g} s after its stop command")
            time.sleep(0.5)
        self.guard.log("bakeoff", f"live service {live.name} stopped")

    def _update_live(self, **changes: object) -> None:
        live = self.run.read_record().live or LiveRecord()
        self.run.update_record(live=live.model_copy(update=changes))

    def close(self) -> None:
        """Restore the live service (unless the watchdog did) and release the watchdog."""
        if self.guard is None:
            return
        live = self.config.live
        if self.stopped and live is not None:
            self.say(f"restoring live service {live.name!r}")
            result = self.guard.undo(LIVE_UNDO)
            if result is not None:
                self._update_live(restored_at=result["at"], restored_by=result["by"],
                                  healthy_after=result.get("healthy_after"))
                colour = "green" if result.get("healthy_after") else "red"
                self.say(f"[{colour}]live service {live.name!r}: {result['detail']} "
                         f"(restored by {result['by']})[/{colour}]")
        elif live is not None:
            self._update_live(healthy_after=health_problem(live.health, live.model) is None)
        if not self.guard.read().get("pending"):
            self.guard.finish()
        else:
            self.say(f"[red]some changes were not undone; the watchdog still guards them (see {self.guard.dir})[/red]")


def dry_run_lines(config: BakeoffFile) -> list[str]:
    """Every command ``bakeoff run`` would run for this file, in order, without running any."""
    import tempfile

    from ..engine.launcher import free_port

    check_live_config(config)
    plan = plan_run(config)
    out: list[str] = []
    live = config.live
    stops = stops_live(config)
    if live is not None:
        commands = service_commands(live)
        lists_model = f"  and {live.base_url}/v1/models lists {live.model!r}" if live.model else ""
        out.append(f"GET {live.health}{lists_model}")
        if commands["record"]:
            out.append(f"record: {shown(commands['record'])}")
    if live is not None or config.phases is not None:
        out.append(f"watchdog: python -m bakeoff.core.run.watchdog RUN/live (deadline {deadline_s(config):g} s)")
    if stops:
        assert live is not None
        out.append(f"stop live: {shown(service_commands(live)['stop'])}")
    arms = plan.arms
    if config.phases is not None:
        arms = [a for a in arms if a.arm.name == (config.phases.server or config.arms[0].name)]
    with tempfile.TemporaryDirectory() as tmp:
        for planned in arms:
            arm = planned.arm
            if arm.attached:
                out.append(f"arm {arm.name}: attach to {arm.url}")
                continue
            port = arm.settings.port or free_port(arm.settings.host)
            spec = build_launch(planned.adapter, arm, port, Path(tmp))
            out.append(f"arm {arm.name}: {shown(spec.argv)}   (a free loopback port, here {port})")
    if config.phases is not None:
        knobs = {k.name: k for k in config.phases.knobs}
        for phase, setting in config.phases.phase_names:
            if setting in knobs:
                out.append(f"phase {phase}: apply: {shown(knobs[setting].apply)}; "
                           f"{config.phases.duration_s:g} s of requests; revert: {shown(knobs[setting].revert)}")
            else:
                out.append(f"phase {phase}: {config.phases.duration_s:g} s of requests")
    if stops:
        assert live is not None
        out.append(f"restore live: {shown(service_commands(live)['start'])}; then GET {live.health}")
    return out
