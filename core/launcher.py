"""Start an engine in its own process group, wait until it is ready, and always stop it.

Every process group bakeoff starts is tracked, so a signal handler or ``atexit`` can take all of them
down: an engine must never outlive the run that started it.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

import httpx
from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

from .adapter import EngineAdapter, LaunchSpec, first_matching_line
from .errors import EngineStartupError, EngineUnavailable

__all__ = ["free_port", "port_is_free", "Engine", "stop_all", "LogCursor", "startup_error_from_log"]

_LIVE: dict[int, subprocess.Popen[bytes]] = {}


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
        env = {**os.environ, **self.spec.env}
        with self.log_path.open("ab") as log:
            try:
                self.proc = subprocess.Popen(  # noqa: S603 - argv list, never a shell
                    self.spec.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env=env, cwd=self.spec.cwd, start_new_session=True)
            except FileNotFoundError as exc:
                raise EngineUnavailable(f"{self.adapter.name}: cannot run {self.spec.argv[0]!r}: "
                                        f"{exc.strerror}. {self.adapter.install_hint()}") from exc
        _LIVE[self.proc.pid] = self.proc
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
            raise self._startup_error(f"exited with code {self.proc.returncode} before it was ready")
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

    def stop(self) -> None:
        if self.proc is not None:
            _kill_group(self.proc)
