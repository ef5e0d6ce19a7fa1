"""Start an engine in its own process group, wait until it is ready, and always stop it.

Every process group bakeoff starts is tracked, so a signal handler or ``atexit`` can take all of them
down: an engine must never outlive the run that started it. Where no handler can run (SIGKILL, the OOM
killer) two more guards hold: on Linux the engine gets SIGTERM when bakeoff dies (``PR_SET_PDEATHSIG``),
and each engine is recorded (pid, start time, the bakeoff that owns it) in a running-engines directory
and in its arm directory, so the next ``bakeoff run`` stops an engine whose bakeoff is gone.

:class:`SharedEngine` keeps one engine up across consecutive arms that the plan says run on the same
server (core/run/plan.py ``server_key``): warm-up is owed only to a fresh start.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TypeVar

import httpx
from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

from ..common.errors import EngineStartupError, EngineUnavailable
from ..host.hostinfo import CpuMeter, docker_container_ids
from .container import ExitGuard
from .contract import EngineAdapter, LaunchSpec
from .launch import install_hint
from .pieces import first_matching_line

__all__ = ["CANNOT_LOAD", "free_port", "port_is_free", "Engine", "stop_all", "LogCursor", "startup_error_from_log",
           "running_dir", "stop_leftover_engines", "NOT_INHERITED", "SharedEngine"]

_LIVE: dict[int, subprocess.Popen[bytes]] = {}
# Never passed on to an engine: one started from a Ray task must not join bakeoff's cluster (vLLM would take
# Ray as its distributed backend instead of its own multiprocessing one).
NOT_INHERITED = ("RAY_ADDRESS",)

# A start that fails this way fails again on every relaunch (the pass loop skips the arm after it): the binary
# or a library it links cannot be found or executed, which the shell reports as exit 127 or 126.
CANNOT_LOAD = "cannot-load"
_CANNOT_LOAD_EXITS = (126, 127)
_ARM_DIRS: dict[int, Path] = {}  # pid -> the directory holding its engine.pid record
T = TypeVar("T")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_is_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


# -- engines outliving a bakeoff that was killed ----------------------------------------------------------
_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> Callable[[], None] | None:
    """A preexec function asking Linux to SIGTERM the child when bakeoff dies, whatever kills it."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # bakeoff died between fork and prctl
            os._exit(1)
    return preexec


def running_dir() -> Path:
    """Where running engines are recorded ($BAKEOFF_RUNNING_DIR, else the cache's running/)."""
    from .models import cache_root

    return Path(os.environ.get("BAKEOFF_RUNNING_DIR") or cache_root() / "running")


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot: a pid plus this names one process, never a reuse."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        state, start = stat[stat.rfind(")") + 2:].split()[0], int(stat[stat.rfind(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None
    return None if state in ("Z", "X") else start


def _group_alive(pid: int, pgid: int, start: int | None, leader: bool) -> bool:
    """The recorded leader still runs; or, for an orphaned group, any member does."""
    return _start_ticks(pid) == start if leader else bool(_group_members(pgid))


def _group_members(pgid: int) -> list[int]:
    """Live processes of process group ``pgid`` (Linux /proc; empty elsewhere)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            fields = text[text.rfind(")") + 2:].split()
        except (OSError, ValueError):
            continue
        if len(fields) > 2 and fields[0] not in ("Z", "X") and fields[2] == str(pgid):
            members.append(int(stat.parent.name))
    return members


def _record_engine(proc: subprocess.Popen[bytes], argv0: str, arm_dir: Path) -> None:
    record = {"pid": proc.pid, "start": _start_ticks(proc.pid), "pgid": proc.pid, "argv0": argv0,
              "bakeoff_pid": os.getpid(), "bakeoff_start": _start_ticks(os.getpid()), "arm_dir": str(arm_dir)}
    text = json.dumps(record) + "\n"
    for path in (running_dir() / f"{proc.pid}.json", arm_dir / "engine.pid"):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        except OSError:
            pass  # a record is a safety net; the engine runs without it


def _forget_engine(pid: int, arm_dir: Path | None) -> None:
    for path in (running_dir() / f"{pid}.json", *([arm_dir / "engine.pid"] if arm_dir else [])):
        path.unlink(missing_ok=True)


def stop_leftover_engines() -> list[str]:
    """Stop engines recorded by a bakeoff that is no longer running; one line per engine for the user."""
    lines = []
    for path in sorted(running_dir().glob("*.json")) if running_dir().is_dir() else []:
        try:
            rec = json.loads(path.read_text())
            pid, pgid = int(rec["pid"]), int(rec["pgid"])
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)
            continue
        owner_alive = (rec.get("bakeoff_start") is not None
                       and _start_ticks(int(rec["bakeoff_pid"])) == rec["bakeoff_start"])
        if owner_alive:
            continue  # another bakeoff is using it
        leader = rec.get("start") is not None and _start_ticks(pid) == rec["start"]
        # the leader gone but its group still populated: an engine behind a wrapper that did not exec, whose
        # parent-death signal reached only the wrapper (FAULTS-2 R17). A group id is never reused while the
        # group has members, and no other process holds the leader's pid, so these are the engine's.
        orphans = not leader and pgid == pid and _start_ticks(pid) is None and bool(_group_members(pgid))

        if leader or orphans:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(pgid, sig)
                except (ProcessLookupError, PermissionError):
                    break
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline and _group_alive(pid, pgid, rec["start"], leader):
                    time.sleep(0.1)
                if not _group_alive(pid, pgid, rec["start"], leader):
                    break
            state = "could NOT stop" if _group_alive(pid, pgid, rec["start"], leader) else "stopped"
            lines.append(f"{state} engine pid {pid} ({rec.get('argv0')}) left running by bakeoff pid "
                         f"{rec.get('bakeoff_pid')}, which died (run files: {rec.get('arm_dir')})")
        path.unlink(missing_ok=True)
        if rec.get("arm_dir"):
            (Path(rec["arm_dir"]) / "engine.pid").unlink(missing_ok=True)
    return lines


def _kill_group(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """SIGTERM the whole group, then SIGKILL what is left after ``grace_s``."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        pgid = proc.pid
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        # The leader is gone; children in the group (vLLM's engine core) may linger briefly.
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    _LIVE.pop(proc.pid, None)
    _forget_engine(proc.pid, _ARM_DIRS.pop(proc.pid, None))


def startup_error_from_log(adapter: EngineAdapter, text: str, what: str, log_path: Path,
                           reason: str = "unclassified") -> EngineStartupError:
    """The adapter's classification of a failed start, else ``what`` plus the first error-looking log line.

    Both carry the last 30 log lines for the arm's failure record.
    """
    tail = "\n".join(text.splitlines()[-30:])
    classified = adapter.classify_startup_failure(text)
    if classified is not None:
        classified.log_tail = tail
        return classified
    line = first_matching_line(text, (" E ", "error", "Error", "ERROR"))
    detail = f": {line}" if line else ""
    return EngineStartupError(f"{what}{detail} (log: {log_path})", reason=reason, log_line=line, log_tail=tail)


def stop_all() -> None:
    """Stop every engine still running (for signal handlers and interpreter exit)."""
    for proc in list(_LIVE.values()):
        _kill_group(proc, grace_s=2.0)


atexit.register(stop_all)


class LogCursor:
    """Reads what an engine log gained since the last call (for per-request log lines)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.offset = path.stat().st_size if path and path.exists() else 0

    def read_new(self) -> str:
        if self.path is None or not self.path.exists():
            return ""
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        return data.decode(errors="replace")


class RunningEngine(Protocol):
    """What a run asks of an engine bakeoff started: a process (:class:`Engine`) or a compose service
    (core/engine/compose.py ``ComposeEngine``)."""

    base_url: str
    boot_s: float | None
    log_path: Path

    @property
    def alive(self) -> bool: ...

    @property
    def exit_code(self) -> int | None: ...

    @property
    def pid(self) -> int | None:
        """The engine's main process on this machine (its process group's leader), None in a container."""

    def log_text(self) -> str: ...

    def log_tail(self, lines: int = 30) -> str: ...

    def noise_guard(self) -> CpuMeter:
        """A CPU meter that counts the engine's own processes as its own, everything else as foreign load."""


class Engine:
    """A running engine: context manager that launches, waits for readiness and stops it.

    :param adapter: the engine's adapter (readiness and failure classification).
    :param spec: argv/env from the adapter.
    :param log_path: the engine's stdout+stderr go here, in the run directory.
    """

    def __init__(self, adapter: EngineAdapter, spec: LaunchSpec, base_url: str, log_path: Path,
                 boot_timeout_s: float = 600.0, port_taken: bool = False) -> None:
        self.adapter, self.spec, self.base_url = adapter, spec, base_url
        # Something already listened on the (fixed) port before launch: whatever answers there is not
        # our engine, so readiness is never probed; the engine's own bind failure is quoted instead.
        self.port_taken = port_taken
        self.log_path, self.boot_timeout_s = log_path, boot_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.boot_s: float | None = None
        self._guard: ExitGuard | None = None

    def __enter__(self) -> Engine:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object | TracebackType) -> None:
        self.stop()

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        for rel, content in self.spec.files.items():
            target = (self.spec.cwd or self.log_path.parent) / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
        env = {**{k: v for k, v in os.environ.items() if k not in NOT_INHERITED}, **self.spec.env}
        with self.log_path.open("ab") as log:
            try:
                self.proc = subprocess.Popen(
                    self.spec.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env=env, cwd=self.spec.cwd, start_new_session=True, preexec_fn=_die_with_parent(os.getpid()))
            except FileNotFoundError as exc:
                raise EngineUnavailable(f"{self.adapter.name}: cannot run {self.spec.argv[0]!r}: "
                                        f"{exc.strerror}. {install_hint(self.adapter)}") from exc
        _LIVE[self.proc.pid] = self.proc
        _ARM_DIRS[self.proc.pid] = self.log_path.parent
        _record_engine(self.proc, self.spec.argv[0], self.log_path.parent)
        # `docker run`'s container is the daemon's child: the parent-death signal stops only the CLI, so a
        # killed bakeoff removes the container through a guard
        self._guard = ExitGuard([self.spec.argv[0], "rm", "-f", self.spec.container], env=env) \
            if self.spec.container else None
        self._t0 = time.perf_counter()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def _startup_error(self, what: str) -> EngineStartupError:
        return startup_error_from_log(self.adapter, self.log_text(), f"{self.adapter.name} {what}", self.log_path)

    def _probe(self, http: httpx.Client) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            error = self._startup_error(f"exited with code {self.proc.returncode} before it was ready")
            if self.proc.returncode in _CANNOT_LOAD_EXITS:  # more decisive than the log line's classification
                error.reason = CANNOT_LOAD
            raise error
        try:
            return self.adapter.is_ready(http.get(self.spec.ready_path, timeout=2.0))
        except httpx.HTTPError:
            return False

    def wait_ready(self) -> float:
        """Poll readiness (tenacity) until ready, exit, or the boot timeout; returns boot seconds."""
        if self.port_taken:
            assert self.proc is not None
            try:
                self.proc.wait(timeout=min(30.0, self.boot_timeout_s))
            except subprocess.TimeoutExpired:
                raise EngineStartupError(
                    f"{self.adapter.name}: {self.base_url} was already in use before launch and the engine did "
                    "not exit; refusing to measure whatever answers there", reason="port-in-use",
                    log_tail=self.log_tail()) from None
            raise self._startup_error(f"exited with code {self.proc.returncode}: its port was already in use")
        retrying = Retrying(stop=stop_after_delay(self.boot_timeout_s), wait=wait_fixed(0.1),
                            retry=retry_if_result(lambda ready: not ready))
        with httpx.Client(base_url=self.base_url) as http:
            try:
                retrying(self._probe, http)  # a startup error raised by _probe is not retried
            except RetryError as exc:
                raise self._startup_error(f"not ready after {self.boot_timeout_s:g} s") from exc
        self.boot_s = time.perf_counter() - self._t0
        return self.boot_s

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def exit_code(self) -> int | None:
        return self.proc.returncode if self.proc is not None else None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def noise_guard(self) -> CpuMeter:
        """The engine's process group, and its container's processes when the LaunchSpec names one."""
        pgids = {os.getpgid(self.proc.pid)} if self.proc else set()
        name = self.spec.container
        return CpuMeter(pgids, containers=docker_container_ids([name]) if name else None)

    def stop(self) -> None:
        if self.proc is not None:
            _kill_group(self.proc)
        if self._guard is not None:
            self._guard.release()


class SharedEngine:
    """Keeps one engine up across consecutive arms with the same server key.

    ``use(key, open_engine)`` yields ``(value, fresh)``: the context value of ``open_engine()`` and
    whether it was started for this arm (warm-up is owed only then). A different key, an engine that
    died, an exception inside the block, or :meth:`close` stops the held engine.
    """

    def __init__(self, alive: Callable[[Any], bool] | None = None) -> None:
        self._stack: ExitStack | None = None
        self._key: str | None = None
        self._value: Any = None
        self._alive = alive or _engine_alive

    @contextmanager
    def use(self, key: str, open_engine: Callable[[], AbstractContextManager[T]]) -> Iterator[tuple[T, bool]]:
        fresh = self._stack is None or self._key != key or not self._alive(self._value)
        if fresh:
            self.close()
            stack = ExitStack()
            try:
                value = stack.enter_context(open_engine())
            except BaseException:
                stack.close()
                raise
            self._stack, self._key, self._value = stack, key, value
        try:
            yield self._value, fresh
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        stack, self._stack, self._key, self._value = self._stack, None, None, None
        if stack is not None:
            stack.close()


def _engine_alive(value: Any) -> bool:
    """``(base_url, Engine | None)`` from the protocol: attached servers count as alive."""
    engine = value[1] if isinstance(value, tuple) and len(value) > 1 else None
    return engine is None or bool(getattr(engine, "alive", True))
