"""A guard that undoes what bakeoff changed on a live box, even when bakeoff cannot.

Before bakeoff stops a live service or applies a knob it registers the undo (start the service and wait
until it is healthy; run the revert command) in a guard file in the run directory, and a detached
watchdog process — its own session, so a Ctrl-C, SIGKILL or hang of bakeoff does not reach it — keeps
an eye on it. bakeoff performs and clears each undo itself on every normal way out (end, error,
Ctrl-C). The watchdog performs whatever is still registered when bakeoff's process is gone, or at the
deadline (then it first asks bakeoff to stop: SIGTERM, and SIGKILL after a grace period); it also stops
the engine process groups bakeoff had started, which a SIGKILL leaves running. When bakeoff finishes
cleanly the watchdog exits without doing anything. Both sides take the same file lock around an undo,
so it runs exactly once, and both log every command and result into ``RUN/live/``.

Run as ``python -m bakeoff.core.run.watchdog GUARD_DIR``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from ..common.redact import redact_argv

__all__ = ["Guard", "Undo", "health_problem", "perform", "proc_start_time", "shown", "watch"]

POLL_S = 0.5
# at the deadline, how long bakeoff gets to clean up after SIGTERM before SIGKILL
TERM_GRACE_S = float(os.environ.get("BAKEOFF_WATCHDOG_GRACE_S", "20"))

Undo = dict[str, Any]  # {"id", "what", "argv", "timeout_s", and for a service: "health", "model"}


# -- processes (read from /proc, so a recycled pid is never taken for the one we knew) ----------
def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name: [state, ppid, pgrp, ..., starttime at 19]."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def proc_start_time(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[19]) if fields else None


def _alive(pid: int, start: int | None) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X") and (start is None or int(fields[19]) == start)


def _child_groups(parent: int, skip: set[int]) -> dict[int, int]:
    """Process groups led by children of ``parent`` (engines run in their own session): pgid -> start time."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        fields = _stat(int(entry.name))
        if fields and int(fields[1]) == parent and int(fields[2]) == int(entry.name):
            out[int(entry.name)] = int(fields[19])
    return out


def _kill_groups(groups: dict[int, int], log: Callable[[str], None]) -> None:
    """SIGTERM, then SIGKILL, every group whose leader is still the process we saw."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
        live = {g: s for g, s in groups.items() if _alive(g, s)}
        for pgid in live:
            log(f"sending {sig.name} to process group {pgid} (started by bakeoff)")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, sig)
        deadline = time.monotonic() + wait
        while live and time.monotonic() < deadline and any(_alive(g, s) for g, s in live.items()):
            time.sleep(0.1)


# -- undo actions: the same code in bakeoff and in the watchdog ----------------------------------
def health_problem(url: str, model: str | None, timeout: float = 5.0) -> str | None:
    """None when ``url`` answers 200 (and, with ``model``, /v1/models lists it); else what is wrong."""
    try:
        r = httpx.get(url, timeout=timeout)
        if r.status_code != 200:
            return f"{url} answered HTTP {r.status_code}"
        if model is None:
            return None
        base = url.split("://", 1)[0] + "://" + url.split("://", 1)[1].split("/", 1)[0]
        models = httpx.get(f"{base}/v1/models", timeout=timeout)
        ids = {str(m.get("id")) for m in (models.json().get("data") or []) if isinstance(m, dict)}
        aliases = {str(a) for m in (models.json().get("models") or []) if isinstance(m, dict)
                   for a in (m.get("aliases") or [])}
        if model not in ids | aliases:
            return f"{base}/v1/models does not list model {model!r} (it lists {sorted(ids) or 'nothing'})"
        return None
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        return f"{url}: {type(exc).__name__}: {exc}"


def wait_healthy(url: str, model: str | None, timeout_s: float) -> str | None:
    """Poll until healthy; None when it is, else the last problem seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        problem = health_problem(url, model)
        if problem is None or time.monotonic() > deadline:
            return problem
        time.sleep(0.5)


def run_command(argv: list[str], timeout_s: float, log_path: Path, keep_running_if: Callable[[], bool] | None = None
                ) -> tuple[int | None, int | None]:
    """Run argv in its own session with output appended to ``log_path``.

    :param keep_running_if: a callable; while the command still runs, returning True ends the wait and
        leaves it running (a start command that stays in the foreground as the service itself).
    :returns: (exit code or None when left running or timed out, pid when left running).
    """
    with log_path.open("ab") as log:
        log.write(f"$ {' '.join(redact_argv(argv))}\n".encode())
        log.flush()
        try:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            log.write(f"[bakeoff] cannot run {argv[0]!r}: {exc}\n".encode())
            return 127, None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            return code, None
        if keep_running_if is not None and keep_running_if():
            return None, proc.pid
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    with log_path.open("ab") as log:
        log.write(f"[bakeoff] {argv[0]} did not finish in {timeout_s:g} s; killed\n".encode())
    return None, None


def perform(undo: Undo, log_path: Path) -> dict[str, Any]:
    """Run one undo; returns its result record (ok, healthy_after, detail, left_running pid)."""
    argv, timeout_s = list(undo["argv"]), float(undo.get("timeout_s", 120.0))
    health, model = undo.get("health"), undo.get("model")
    if health and health_problem(health, model) is None:  # a stop that failed, or someone restarted it
        return {"ok": True, "healthy_after": True, "detail": "already healthy; start command not run"}
    healthy_now = (lambda: health_problem(health, model) is None) if health else None
    code, left = run_command(argv, timeout_s, log_path, keep_running_if=healthy_now)
    result: dict[str, Any] = {"exit_code": code, "left_running": left}
    if health:
        problem = wait_healthy(health, model, timeout_s)
        result.update(ok=problem is None and code in (0, None), healthy_after=problem is None,
                      detail=problem or "healthy")
    else:
        result.update(ok=code == 0, detail=f"exit {code}" if code is not None else "did not finish")
    return result


def shown(argv: list[str]) -> str:
    """An argv as one line for logs and the terminal, secrets masked."""
    return " ".join(redact_argv(argv))


# -- the guard file --------------------------------------------------------------------------------
class Guard:
    """The pending undos of one run (``RUN/live/guard.json``), shared by bakeoff and its watchdog."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.file, self.lock_file = directory / "guard.json", directory / "guard.lock"
        self.log_path = directory / "commands.log"
        self.watchdog: subprocess.Popen[bytes] | None = None

    # state, written atomically; changes only under the lock
    def read(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.file.read_text()))
        except (OSError, ValueError):
            return {}

    def _write(self, state: dict[str, Any]) -> None:
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self.file)

    @contextlib.contextmanager
    def locked(self) -> Iterator[dict[str, Any]]:
        """The state under the exclusive lock; changes to the yielded dict are written back."""
        with self.lock_file.open("a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            state = self.read()
            yield state
            self._write(state)

    def log(self, who: str, message: str) -> None:
        with (self.dir / "guard.log").open("a") as f:
            f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {who}: {message}\n")

    # bakeoff's side
    def start(self, deadline_s: float, run_dir: Path | None = None) -> None:
        """Write the guard file and start the detached watchdog (before anything is changed)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        me = os.getpid()
        with self.locked() as state:
            state.clear()
            state.update(parent_pid=me, parent_start=proc_start_time(me), deadline=time.time() + deadline_s,
                         run_dir=str(run_dir) if run_dir else None, pending=[], done=[], spare=[],
                         finished=False)
        with (self.dir / "watchdog.log").open("ab") as out:
            self.watchdog = subprocess.Popen(
                [sys.executable, "-m", "bakeoff.core.run.watchdog", str(self.dir)], stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, close_fds=True)
        self.log("bakeoff", f"watchdog started (pid {self.watchdog.pid}), deadline in {deadline_s:g} s")

    def push(self, undo: Undo) -> None:
        """Register an undo before the change it undoes."""
        with self.locked() as state:
            state.setdefault("pending", []).append(undo)
        self.log("bakeoff", f"registered undo {undo['id']}: {shown(undo['argv'])}")

    def undo(self, undo_id: str, who: str = "bakeoff") -> dict[str, Any] | None:
        """Perform a registered undo unless the watchdog already did; returns its result record."""
        with self.locked() as state:
            done = next((d for d in state.get("done", []) if d["id"] == undo_id), None)
            if done is not None:
                return dict(done)
            entry = next((u for u in state.get("pending", []) if u["id"] == undo_id), None)
            if entry is None:
                return None
            self.log(who, f"undo {undo_id}: {shown(entry['argv'])}")
            result = {"id": undo_id, "what": entry.get("what"), "by": who, **perform(entry, self.log_path),
                      "at": time.time()}
            self.log(who, f"undo {undo_id}: {result['detail']}")
            state["pending"] = [u for u in state["pending"] if u["id"] != undo_id]
            state.setdefault("done", []).append(result)
            if result.get("left_running"):
                state.setdefault("spare", []).append(result["left_running"])
            return result

    def discard(self, undo_id: str) -> None:
        """Drop a registered undo that is no longer wanted (the change it would undo is to stay)."""
        with self.locked() as state:
            state["pending"] = [u for u in state.get("pending", []) if u["id"] != undo_id]
        self.log("bakeoff", f"undo {undo_id} no longer needed")

    def seal(self) -> None:
        """Mask secrets in the commands kept in guard.json once no one needs to run them any more."""
        with self.locked() as state:
            for entry in [*state.get("pending", []), *state.get("done", [])]:
                if "argv" in entry:
                    entry["argv"] = redact_argv(entry["argv"])

    def finish(self) -> None:
        """bakeoff undid everything itself: the watchdog may exit quietly."""
        with self.locked() as state:
            state["finished"] = True
            for entry in state.get("pending", []):
                entry["argv"] = redact_argv(entry["argv"])
        self.log("bakeoff", "finished; watchdog released")
        if self.watchdog is not None:
            try:
                self.watchdog.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.log("bakeoff", f"watchdog (pid {self.watchdog.pid}) did not exit; it still guards")


# -- the watchdog's side ---------------------------------------------------------------------------
def _record_in_run(run_dir: str | None, results: list[dict[str, Any]]) -> None:
    """Write what the watchdog did into run.json (``live`` when it restored the live service)."""
    if not run_dir or not results:
        return
    from ..results.store import RunDir

    run = RunDir(Path(run_dir))
    record = run.read_record()
    live = record.live
    for r in results:
        if r.get("what") == "live" and live is not None:
            live = live.model_copy(update={"restored_at": r["at"], "restored_by": "watchdog",
                                           "healthy_after": r.get("healthy_after")})
    run.update_record(watchdog=[*record.watchdog, *results], live=live)


def watch(directory: Path) -> int:
    """The watchdog loop: 0 when bakeoff finished on its own or every undo succeeded, else 1."""
    guard = Guard(directory)

    def log(msg: str) -> None:
        guard.log("watchdog", msg)

    state = guard.read()
    parent, start = int(state["parent_pid"]), state.get("parent_start")
    groups: dict[int, int] = {}
    log(f"watching bakeoff pid {parent}")
    while True:
        state = guard.read()
        if state.get("finished"):
            log("bakeoff finished and undid its changes itself; exiting")
            return 0
        alive = _alive(parent, start)
        if alive:  # remember bakeoff's engine groups while we can still see who started them
            current = _child_groups(parent, {os.getpid(), *state.get("spare", [])})
            groups = {g: s for g, s in groups.items() if _alive(g, s)} | current
        overdue = time.time() > float(state["deadline"])
        if alive and not overdue:
            time.sleep(POLL_S)
            continue
        if alive:
            log(f"deadline passed; asking bakeoff (pid {parent}) to stop")
            os.kill(parent, signal.SIGTERM)
            end = time.monotonic() + TERM_GRACE_S
            while _alive(parent, start) and time.monotonic() < end and not guard.read().get("finished"):
                time.sleep(0.2)
            if guard.read().get("finished"):
                log("bakeoff stopped and undid its changes itself; exiting")
                return 0
            if _alive(parent, start):
                log(f"bakeoff did not stop in {TERM_GRACE_S:g} s; SIGKILL")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(parent, signal.SIGKILL)
        else:
            log(f"bakeoff (pid {parent}) is gone")
        spare = set(guard.read().get("spare", []))
        _kill_groups({g: s for g, s in groups.items() if g not in spare}, log)
        results = []
        for undo in reversed(guard.read().get("pending", [])):  # last change first
            result = guard.undo(undo["id"], who="watchdog")
            if result is not None and result.get("by") == "watchdog":
                results.append(result)
        guard.seal()
        _record_in_run(guard.read().get("run_dir"), results)
        if not results:
            log("nothing was left to undo; exiting")
        return 0 if all(r.get("ok") for r in results) else 1


if __name__ == "__main__":
    sys.exit(watch(Path(sys.argv[1])))
