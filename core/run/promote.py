"""``bakeoff promote``: put the winning arm on the live endpoint, with a health gate and a way back.

The launch definition is written into ``RUN/promote/<arm>/`` with the live port and served model name:
a compose file (``launch: compose`` arms), or a shell script and a systemd unit (native launches). The
switch is gated: the candidate first runs on a private loopback port (health, model name, one smoke
request); only then is the live service stopped and the candidate started on the live port, where it
must be healthy, list the model name, answer ``gate_requests`` smoke requests and stay up — otherwise it
is stopped and the previous service started again (rollback). The watchdog (core/run/watchdog.py) guards
the window in which the live endpoint is down. A record kept in the state directory
(``$BAKEOFF_STATE_DIR``, default ``~/.local/state/bakeoff``) lets ``bakeoff promote --revert`` go back.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from ..common.errors import ConfigError, EngineError, PromoteError, RunRecordError
from ..common.redact import REDACTED, masked_settings
from ..config.live import LiveService
from ..config.schema import Arm
from ..engine.compose import ComposeEngine, build_project, compose_command
from ..engine.contract import EngineAdapter
from ..engine.launch import build_launch
from ..engine.launcher import Engine, free_port
from ..engine.registry import load_engine
from ..results.store import RunDir
from .live import LIVE_UNDO, service_commands
from .watchdog import Guard, health_problem, proc_start_time, run_command, shown, wait_healthy

__all__ = ["Candidate", "prepare", "promote", "record_path", "revert", "state_dir"]


def state_dir() -> Path:
    base = os.environ.get("BAKEOFF_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "bakeoff")
    return Path(base) / "promotions"


def record_path(port: int) -> Path:
    return state_dir() / f"port-{port}.json"


def _write_record(port: int, record: dict[str, Any]) -> None:
    path = record_path(port)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2, default=str) + "\n")
    tmp.replace(path)


class Candidate:
    """The arm to promote, with the live port and served name, and its written launch definition."""

    def __init__(self, adapter: EngineAdapter, arm: Arm, live: LiveService, port: int, served_name: str | None,
                 directory: Path) -> None:
        self.adapter, self.live, self.port, self.served_name, self.dir = adapter, live, port, served_name, directory
        named = adapter.with_served_name(arm, served_name) if served_name else arm
        self.arm = named.model_copy(update={"settings": named.settings.model_copy(update={"port": port})})
        self.health = f"http://127.0.0.1:{port}/health"
        self.files: list[Path] = []
        self.compose_base: list[str] = []
        self.pid: int | None = None

    @property
    def compose(self) -> bool:
        return self.arm.launch == "compose"

    def write_definition(self) -> list[Path]:
        """compose.yaml, or launch.sh plus a systemd unit, for the live port and served name."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.compose:
            project = build_project(self.adapter, self.arm, self.port, f"bakeoff-live-{self.port}")
            path = self.dir / "compose.yaml"
            path.write_text(yaml.safe_dump(project, sort_keys=False))
            self.files = [path]
            self.compose_base = [*compose_command(), "-p", project["name"], "-f", str(path)]
            return self.files
        spec = build_launch(self.adapter, self.arm, self.port, self.dir)
        script = self.dir / "launch.sh"
        env = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in spec.env.items())
        script.write_text(f"#!/bin/sh\n# bakeoff promote: arm {self.arm.name} on 127.0.0.1:{self.port}"
                          f"{' as ' + repr(self.served_name) if self.served_name else ''}\n{env}"
                          f"exec {shlex.join(spec.argv)}\n")
        script.chmod(0o755)
        unit = self.dir / f"bakeoff-{self.arm.name}.service"
        unit.write_text(f"[Unit]\nDescription=LLM server {self.arm.name} (promoted by bakeoff)\n"
                        "After=network.target\n\n[Service]\nType=simple\n"
                        f"ExecStart={script.resolve()}\nRestart=on-failure\nRestartSec=5\n\n"
                        "[Install]\nWantedBy=multi-user.target\n")
        self.files = [script, unit]
        return self.files

    def start_argv(self) -> list[str]:
        return [*self.compose_base, "up", "-d"] if self.compose else ["sh", str(self.dir / "launch.sh")]

    def stop_argv(self) -> list[str]:
        return [*self.compose_base, "down", "--timeout", "10"] if self.compose else \
            ["kill", "-TERM", "--", f"-{self.pid or 'PID'}"]

    def start_live(self, log: Path) -> None:
        if self.compose:
            code, _ = run_command(self.start_argv(), 600, log)
            if code != 0:
                raise EngineError(f"compose up for {self.arm.name!r} exited with {code} (log: {log})")
            return
        with log.open("ab") as out:
            proc = subprocess.Popen(self.start_argv(), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self.pid = proc.pid

    def alive(self) -> bool:
        if self.compose or self.pid is None:
            return True
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        return state not in ("Z", "X")

    def stop_live(self, log: Path) -> None:
        if self.compose:
            run_command(self.stop_argv(), 180, log)
        elif self.pid is not None:
            _stop_group(self.pid, proc_start_time(self.pid))


def _stop_group(pid: int, start: int | None, grace_s: float = 10.0) -> None:
    """SIGTERM a process group, SIGKILL after ``grace_s``; only while its leader is the process we started."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        if proc_start_time(pid) is None or (start is not None and proc_start_time(pid) != start):
            return
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        end = time.monotonic() + wait
        while time.monotonic() < end:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                return
            if state in ("Z", "X"):
                return
            time.sleep(0.1)


def smoke(base: str, model: str | None, requests: int) -> str | None:
    """``requests`` short streamed chat completions (as agents send them); None when every one streams text
    to its end, else the problem."""
    for i in range(requests):
        body = {"model": model or "default", "max_tokens": 4, "temperature": 0, "stream": True,
                "messages": [{"role": "user", "content": "Say OK."}]}
        try:
            with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=120) as r:
                if r.status_code != 200:
                    return f"smoke request {i + 1}: HTTP {r.status_code}: {r.read()[:200]!r}"
                lines = [line for line in r.iter_lines() if line.startswith("data:")]
            if not lines or lines[-1].strip() != "data: [DONE]":
                return f"smoke request {i + 1}: the stream ended without [DONE]"
        except httpx.HTTPError as exc:
            return f"smoke request {i + 1}: {type(exc).__name__}: {exc}"
    return None


def _gate(url: str, model: str | None, requests: int, timeout_s: float, alive: Callable[[], bool]) -> str | None:
    deadline = time.monotonic() + timeout_s
    while (problem := health_problem(url, model)) is not None:
        if not alive():
            return "the new server exited"
        if time.monotonic() > deadline:
            return f"not healthy after {timeout_s:g} s: {problem}"
        time.sleep(0.5)
    base = url.split("/health")[0]
    problem = smoke(base, model, requests)
    if problem is None and not alive():
        problem = "the new server exited after its smoke requests"
    return problem


def prepare(run_dir: Path, arm_name: str, port: int | None, served_name: str | None) -> Candidate:
    """Find the arm and the live service in the run, and write the launch definition.

    :raises ConfigError: no live: section, unknown or attached arm, no port or served name.
    """
    try:
        config = RunDir.open(run_dir).read_record().config
    except RunRecordError as exc:
        raise ConfigError(str(exc)) from None
    if config is None:
        raise ConfigError(f"{run_dir}: not a bakeoff run directory (no run.json with its config)")
    if config.live is None:
        raise ConfigError(f"{run_dir}: its bakeoff file has no live: section; promote only switches a service "
                          "named there")
    arm = next((a for a in config.arms if a.name == arm_name), None)
    if arm is None:
        raise ConfigError(f"{run_dir}: no arm {arm_name!r} (arms: {', '.join(a.name for a in config.arms)})")
    if arm.attached:
        raise ConfigError(f"arm {arm_name!r} attaches to {arm.url}; promote launches an arm bakeoff started")
    masked = [k for k in ("stop", "start") if REDACTED in (getattr(config.live, k) or [])]
    if masked:
        raise ConfigError(f"{run_dir}: the recorded live.{masked[0]} command had a secret masked (***); promote "
                          "cannot run it")
    if lost := masked_settings({"arms": [arm.model_dump(mode="json")]}):
        raise ConfigError(f"{run_dir}: run.json does not record the secret values of {', '.join(lost)} (***); "
                          "promote cannot launch it with them")
    port = port or config.live.port
    if port is None:
        raise ConfigError("give --port (the live: section has no port)")
    candidate = Candidate(load_engine(arm.engine), arm, config.live, port, served_name or config.live.model,
                          run_dir / "promote" / arm_name)
    candidate.write_definition()
    return candidate


def _private_gate(c: Candidate, say: Callable[[str], None]) -> None:
    """Run the candidate on a private loopback port: healthy, serves the name, answers a smoke request."""
    private = free_port("127.0.0.1")
    arm = c.arm.model_copy(update={"settings": c.arm.settings.model_copy(update={"port": private,
                                                                                 "host": "127.0.0.1"})})
    log = c.dir / "gate-private.log"
    say(f"private gate: {arm.name} on 127.0.0.1:{private}")
    if c.compose:
        engine: Any = ComposeEngine(c.adapter, arm, private, c.dir / "gate", log, project=f"bakeoff-gate-{private}")
    else:
        spec = build_launch(c.adapter, arm, private, c.dir)
        engine = Engine(c.adapter, spec, f"http://127.0.0.1:{private}", log, boot_timeout_s=600)
    with engine:
        problem = health_problem(f"http://127.0.0.1:{private}/health", c.served_name) or \
            smoke(f"http://127.0.0.1:{private}", c.served_name, 1)
    if problem is not None:
        raise PromoteError(f"candidate {arm.name!r} failed its private gate: {problem}; the live service was not "
                           f"touched (log: {log})")


def promote(run_dir: Path, arm_name: str, *, port: int | None = None, served_name: str | None = None,
            gate_requests: int = 3, gate_timeout_s: float = 300.0, dry_run: bool = False,
            say: Callable[[str], None] = print) -> dict[str, Any]:
    """Switch the live endpoint to ``arm_name``; returns the promotion record.

    :raises PromoteError: the gate failed (the previous service was restored, or the message says it was not).
    """
    c = prepare(run_dir, arm_name, port, served_name)
    live = c.live
    previous = service_commands(live)
    say("launch definition: " + ", ".join(str(p) for p in c.files))
    if dry_run:
        lines = [
            (f"private gate: {c.arm.name} as in {c.files[0].name}, on a free loopback port instead of {c.port}; "
             f"GET /health, /v1/models lists {c.served_name!r}, 1 smoke request"),
            f"stop live: {shown(previous['stop'])}",
            f"start: {shown(c.start_argv())}",
            f"gate: GET {c.health}, /v1/models lists {c.served_name!r}, {gate_requests} smoke requests",
            f"on failure: {shown(c.stop_argv())}; then {shown(previous['start'])}",
        ]
        for line in lines:
            say(line)
        return {}
    existing = record_path(c.port)
    if existing.exists() and json.loads(existing.read_text()).get("status") == "promoted":
        raise PromoteError(f"a promotion is already live on port {c.port} ({existing}); run `bakeoff promote "
                           "--revert` first")
    _private_gate(c, say)
    record: dict[str, Any] = {
        "status": "switching", "port": c.port, "served_name": c.served_name, "run_dir": str(run_dir.resolve()),
        "arm": arm_name, "at": time.time(), "definition": [str(p) for p in c.files],
        "previous": {"name": live.name, "kind": live.kind, "start": previous["start"], "stop": previous["stop"],
                     "health": live.health, "model": live.model, "restore_timeout_s": live.restore_timeout_s},
    }
    _write_record(c.port, record)
    guard = Guard(c.dir / "guard")
    guard.start(gate_timeout_s + live.stop_timeout_s + live.restore_timeout_s + 120, None)
    guard.push({"id": LIVE_UNDO, "what": "live", "argv": previous["start"], "health": live.health,
                "model": live.model, "timeout_s": live.restore_timeout_s})
    log = guard.log_path
    problem: str | None = "interrupted"
    try:
        say(f"stopping {live.name!r}: {shown(previous['stop'])}")
        run_command(previous["stop"], live.stop_timeout_s, log)
        deadline = time.monotonic() + live.stop_timeout_s
        while health_problem(live.health, None, timeout=2) is None and time.monotonic() < deadline:
            time.sleep(0.5)
        if health_problem(live.health, None, timeout=2) is None:
            problem = f"{live.name!r} still answers at {live.health} after its stop command"
        else:
            say(f"starting {arm_name!r} on 127.0.0.1:{c.port}: {shown(c.start_argv())}")
            c.start_live(c.dir / "server.log")
            problem = _gate(c.health, c.served_name, gate_requests, gate_timeout_s, c.alive)
    finally:
        if problem is None:
            guard.discard(LIVE_UNDO)
            record.update(status="promoted", current={"launch": "compose" if c.compose else "native",
                                                      "pid": c.pid, "pid_start": proc_start_time(c.pid) if c.pid
                                                      else None, "stop": c.stop_argv(), "health": c.health})
        else:
            say(f"gate failed: {problem}; rolling back")
            c.stop_live(log)
            result = guard.undo(LIVE_UNDO) or {}
            record.update(status="rolled-back", problem=problem, rollback=result)
        guard.finish()
        _write_record(c.port, record)
    if record["status"] != "promoted":
        back = "healthy again" if record["rollback"].get("healthy_after") else \
            f"NOT healthy: {record['rollback'].get('detail')}"
        raise PromoteError(f"promotion of {arm_name!r} rolled back ({problem}); {live.name!r} is {back}")
    say(f"promoted {arm_name!r} on port {c.port} as {c.served_name!r}")
    return record


def revert(port: int | None = None, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Stop the promoted server and start what was live before it, from the promotion record."""
    if port is None:
        records = sorted(state_dir().glob("port-*.json")) if state_dir().exists() else []
        active = [p for p in records if json.loads(p.read_text()).get("status") == "promoted"]
        if len(active) != 1:
            raise PromoteError(f"{len(active)} active promotions in {state_dir()}; give --port" if active else
                               f"no active promotion in {state_dir()}")
        path = active[0]
    else:
        path = record_path(port)
    if not path.exists():
        raise PromoteError(f"no promotion record {path}")
    record: dict[str, Any] = json.loads(path.read_text())
    if record.get("status") != "promoted":
        raise PromoteError(f"{path}: status {record.get('status')!r}; only an active promotion can be reverted")
    prev, cur = record["previous"], record["current"]
    guard = Guard(Path(record["run_dir"]) / "promote" / record["arm"] / "revert")
    guard.start(float(prev.get("restore_timeout_s", 300)) + 180, None)
    guard.push({"id": LIVE_UNDO, "what": "live", "argv": prev["start"], "health": prev["health"],
                "model": prev.get("model"), "timeout_s": prev.get("restore_timeout_s", 300)})
    say(f"stopping the promoted {record['arm']!r} on port {record['port']}")
    if cur["launch"] == "native" and cur.get("pid"):
        _stop_group(int(cur["pid"]), cur.get("pid_start"))
    else:
        run_command(cur["stop"], 180, guard.log_path)
    if wait_healthy(cur["health"], None, 0) is None:
        say(f"warning: {cur['health']} still answers after the promoted server was stopped")
    say(f"starting {prev['name']!r}: {shown(prev['start'])}")
    result = guard.undo(LIVE_UNDO) or {}
    guard.finish()
    record.update(status="reverted" if result.get("healthy_after") else "revert-failed", reverted=result,
                  reverted_at=time.time())
    _write_record(int(record["port"]), record)
    if not result.get("healthy_after"):
        raise PromoteError(f"revert: {prev['name']!r} is not healthy: {result.get('detail')}")
    say(f"reverted: {prev['name']!r} is serving again on port {record['port']}")
    return record
