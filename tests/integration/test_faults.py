"""The fault matrix (issue 5): misbehaving engines as real processes, each case asserting the classified
outcome and that no sample already collected was lost; Ctrl-C/SIGTERM and ``--resume``; secrets.

The sim engine (engines/sim/server.py, standard library only) is always available. The boot failures
use a real llama-server and skip when it is not installed; run them by hand under
``flock /tmp/bakeoff-engine.lock``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from io import StringIO
from pathlib import Path
from typing import Any

import psutil
import pytest
from rich.console import Console

from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.results.sample import Sample
from bakeoff.core.results.store import RunDir, read_samples
from bakeoff.core.run.events import RunEvents
from bakeoff.core.run.plan import plan_run, run_record
from bakeoff.core.run.protocol import run_plan

pytestmark = pytest.mark.integration


class Recorder:
    """Protocol events as a test sees them: every sample handed out must be on disk afterwards."""

    def __init__(self) -> None:
        self.samples: list[Sample] = []
        self.failed: dict[str, str] = {}
        self.ready: list[str] = []
        self.on_ready: Callable[[str], None] = lambda arm: None

    def events(self) -> RunEvents:
        def ready(arm: str, eff: Any, boot: float | None) -> None:
            self.ready.append(arm)
            self.on_ready(arm)

        return RunEvents(on_sample=self.samples.append, on_arm_failed=self.failed.__setitem__,
                         on_arm_ready=ready)


def run_yaml(tmp_path: Path, text: str, recorder: Recorder | None = None) -> tuple[RunDir, dict[str, Any], Recorder]:
    recorder = recorder or Recorder()
    plan = plan_run(parse_bakeoff(text))
    run = RunDir(tmp_path / "run")
    run.write_record(run_record(plan))
    records = run_plan(plan, run, recorder.events())
    # the last attempt of each arm, as the JSON it is stored as
    return run, {name: recs[-1].model_dump(mode="json", by_alias=True) for name, recs in records.items()}, recorder


def assert_nothing_lost(run: RunDir, recorder: Recorder) -> list[Sample]:
    """Every sample the protocol handed out is in samples.jsonl and in the index, once."""
    on_disk = read_samples(run.path)
    assert on_disk == recorder.samples
    assert run.db.samples(run.run_id) == on_disk
    keys = [(s.arm, s.prompt, s.mode, s.rep, s.pass_index) for s in on_disk]
    assert len(keys) == len(set(keys))
    return on_disk


def by_arm(samples: list[Sample], arm: str) -> list[Sample]:
    return sorted((s for s in samples if s.arm == arm), key=lambda s: s.rep)


# -- engine killed mid-stream ---------------------------------------------------------------------------
def test_sigkill_mid_stream_is_an_error_sample_the_arm_fails_with_its_log_and_the_run_goes_on(
        tmp_path: Path) -> None:
    run, records, rec = run_yaml(tmp_path, """\
arms:
  - name: killed
    engine: sim
    model: sim
    # request 1 is the warm-up: the second timed request dies after 5 tokens
    options: {fault: kill, fault_after_tokens: 5, fault_on_requests: [3], itl_ms: 1}
  - {name: next, engine: sim, model: sim}
workload: {prompts: [prose], max_tokens: 16, reps: 3, warmup: 1, warmup_settle: null}
""")
    samples = assert_nothing_lost(run, rec)
    killed = by_arm(samples, "killed")
    assert [s.status for s in killed] == ["ok", "error"]
    assert killed[0].completion_tokens == 16
    assert "incomplete chunked read" in (killed[1].error or "") or "RemoteProtocolError" in (killed[1].error or "")
    assert records["killed"]["status"] == "failed" and records["killed"]["reason"] == "died"
    assert "exit -9" in records["killed"]["error"]
    assert "killing myself with SIGKILL" in records["killed"]["log_tail"]
    assert [s.status for s in by_arm(samples, "next")] == ["ok"] * 3
    assert records["next"]["status"] == "ok"


def test_an_engine_shared_by_two_arms_that_dies_is_relaunched_for_the_next(tmp_path: Path) -> None:
    """Arms differing only in request-level values share one engine; its death must not sink the second."""
    run, records, rec = run_yaml(tmp_path, """\
arms:
  - {name: short, engine: sim, model: sim, workload: {max_tokens: 8},
     options: {fault: kill, fault_after_tokens: 2, fault_on_requests: [2]}}
  - {name: long, engine: sim, model: sim, workload: {max_tokens: 12},
     options: {fault: kill, fault_after_tokens: 2, fault_on_requests: [2]}}
workload: {prompts: [prose], max_tokens: 16, reps: 2, warmup: 1, warmup_settle: null}
""")
    samples = assert_nothing_lost(run, rec)
    first, second = run.read_record().to_json()["orders"][0]
    assert records[first]["status"] == "failed" and records[first]["reason"] == "died"
    # the second arm got a fresh engine (booted, warmed up): its own request 2 died mid-stream the same way,
    # where a reused dead engine would have refused the connection
    assert records[second]["status"] == "failed" and records[second]["reason"] == "died"
    assert records[second]["boot_s"] is not None
    for arm in (first, second):
        [sample] = by_arm(samples, arm)
        assert sample.status == "error" and "incomplete chunked read" in (sample.error or "")


# -- stall ------------------------------------------------------------------------------------------------
def test_a_stall_longer_than_the_timeout_is_an_error_sample_and_the_engine_is_stopped(
        tmp_path: Path, live_test_processes: Callable[[], dict[int, str]]) -> None:
    rec = Recorder()
    engines_seen: list[dict[int, str]] = []
    rec.on_ready = lambda arm: engines_seen.append(
        {pid: cmd for pid, cmd in live_test_processes().items() if "sim/server.py" in cmd})
    run, records, rec = run_yaml(tmp_path, """\
arms:
  - {name: stalls, engine: sim, model: sim, options: {fault: stall, fault_after_tokens: 4, fault_on_requests: [3]}}
  - {name: fine, engine: sim, model: sim, options: {itl_ms: 1}}
workload: {prompts: [prose], max_tokens: 16, reps: 3, warmup: 1, warmup_settle: null, request_timeout_s: 1.5}
""", rec)
    samples = assert_nothing_lost(run, rec)
    stalls = by_arm(samples, "stalls")
    assert [s.status for s in stalls] == ["ok", "error"]
    assert "timeout" in stalls[1].flags and "timeout after 1.5 s" in (stalls[1].error or "")
    assert records["stalls"]["status"] == "failed" and records["stalls"]["reason"] == "stalled"
    assert "stalls for 3600 s" in records["stalls"]["log_tail"]
    stalled_engine = engines_seen[run.read_record().to_json()["orders"][0].index("stalls")]
    assert len(stalled_engine) == 1
    assert not set(stalled_engine) & set(live_test_processes())  # stopped, not left hanging
    assert [s.status for s in by_arm(samples, "fine")] == ["ok"] * 3


# -- flagged, never silently re-counted ------------------------------------------------------------------
def test_bad_streams_become_flagged_or_error_samples_never_a_silent_recount(tmp_path: Path) -> None:
    run, records, rec = run_yaml(tmp_path, """\
arms:
  - {name: malformed, engine: sim, model: sim, options: {fault: malformed, fault_after_tokens: 3}}
  - {name: no-usage, engine: sim, model: sim, options: {usage: missing}}
  - {name: wrong-usage, engine: sim, model: sim, options: {usage: wrong, usage_offset: -3}}
  - {name: over-limit, engine: sim, model: sim, options: {usage: wrong, usage_offset: 5}}
  - {name: packed, engine: sim, model: sim, options: {tokens_per_event: 4}}
  - {name: http500, engine: sim, model: sim, options: {fault: http, http_status: 500, fault_on_requests: [2]}}
  - {name: http503, engine: sim, model: sim, options: {fault: http, http_status: 503, fault_on_requests: [2]}}
  - {name: reset, engine: sim, model: sim, options: {fault: reset, fault_after_tokens: 3, fault_on_requests: [2]}}
workload: {prompts: [prose], max_tokens: 16, reps: 2, warmup: 1, warmup_settle: null}
""")
    samples = assert_nothing_lost(run, rec)
    assert len(samples) == 16
    malformed = by_arm(samples, "malformed")
    assert all(s.status == "error" and "malformed-sse" in s.flags for s in malformed)

    for s in by_arm(samples, "no-usage"):
        assert s.status == "ok" and not s.usage_present and s.completion_tokens is None
        assert s.decode_tps is None and "usage-missing" in s.flags  # no rate from counted events
        assert s.server_completion_tokens == 16

    for s in by_arm(samples, "wrong-usage"):
        assert s.completion_tokens == 13
        assert any(f.startswith("token-events-mismatch: events carry 16 tokens, usage says 13") for f in s.flags)
        assert "server-count-mismatch: server 16, usage 13" in s.flags

    for s in by_arm(samples, "over-limit"):  # 21 tokens for max_tokens 16: impossible, whatever fixed_length says
        assert s.status == "error" and "usage-impossible" in s.flags
        assert "completion_tokens 21 > max_tokens 16" in (s.error or "")

    for s in by_arm(samples, "packed"):
        assert s.completion_tokens == 16 and s.token_events == 4
        assert any(f.startswith("token-events-mismatch") for f in s.flags)

    for arm, status in (("http500", "HTTP 500"), ("http503", "HTTP 503")):
        first, second = by_arm(samples, arm)
        assert first.status == "error" and (first.error or "").startswith(status)
        assert second.status == "ok"  # an HTTP error is a failed request, not a dead engine
        assert records[arm]["status"] == "ok"

    reset = by_arm(samples, "reset")
    assert reset[0].status == "error" and "ReadError" in (reset[0].error or "")
    assert reset[1].status == "ok"


# -- boot -------------------------------------------------------------------------------------------------
def test_slow_boot_waits_and_crash_on_start_quotes_the_line(tmp_path: Path) -> None:
    run, records, rec = run_yaml(tmp_path, """\
arms:
  - {name: slow, engine: sim, model: sim, options: {boot_delay_s: 1.0}}
  - {name: oom, engine: sim, model: sim, options: {crash_on_start: "CUDA error: out of memory (tried 24 GiB)"}}
  - {name: bad-flag, engine: sim, model: sim, extra_args: [--no-such-flag]}
workload: {prompts: [prose], max_tokens: 8, reps: 1, warmup: 0}
""")
    samples = assert_nothing_lost(run, rec)
    assert records["slow"]["status"] == "ok" and records["slow"]["boot_s"] >= 1.0
    assert [s.arm for s in samples] == ["slow"]
    assert records["oom"]["reason"] == "out-of-memory"
    assert "E sim: CUDA error: out of memory (tried 24 GiB)" in records["oom"]["error"]
    assert records["bad-flag"]["reason"] == "unknown-flag"
    assert "unrecognized arguments: --no-such-flag" in records["bad-flag"]["error"]


def test_an_engine_never_ready_fails_after_the_boot_timeout(tmp_path: Path) -> None:
    run, records, _rec = run_yaml(tmp_path, """\
arms:
  - {name: never, engine: sim, model: sim, options: {boot_delay_s: 600}}
workload: {prompts: [prose], max_tokens: 8, reps: 1, boot_timeout_s: 1.0}
""")
    assert records["never"]["status"] == "failed"
    assert "not ready after 1 s" in records["never"]["error"]
    assert read_samples(run.path) == []


# -- real llama-server boot failures ---------------------------------------------------------------------
def _llama_arm(extra: str = "", settings: str = "") -> str:
    return f"""\
arms:
  - name: boot
    engine: llamacpp
    model: smollm2
    settings: {{ctx: 1024, threads: 2{settings}}}
    {extra}
workload: {{prompts: [prose], max_tokens: 8, reps: 1, warmup: 0, boot_timeout_s: 120}}
"""


def test_llama_server_asked_for_mtp_on_smollm2_is_classified(tmp_path: Path, llama_server: Path) -> None:
    _, records, _ = run_yaml(tmp_path, _llama_arm("extra_args: [--spec-type, draft-mtp]"))
    rec = records["boot"]
    assert rec["status"] == "failed" and rec["reason"] == "missing-mtp-layers", rec
    assert "failed to create MTP context" in rec["error"] or "doesn't contain MTP layers" in rec["error"]


def test_llama_server_unknown_flag_is_classified(tmp_path: Path, llama_server: Path) -> None:
    _, records, _ = run_yaml(tmp_path, _llama_arm("extra_args: [--no-such-flag]"))
    rec = records["boot"]
    assert rec["status"] == "failed" and rec["reason"] == "unknown-flag", rec
    assert "error: invalid argument: --no-such-flag" in rec["error"]


def test_llama_server_port_in_use_is_classified(tmp_path: Path, llama_server: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        _, records, _ = run_yaml(tmp_path, _llama_arm(settings=f", port: {port}"))
    rec = records["boot"]
    assert rec["status"] == "failed" and rec["reason"] == "port-in-use", rec
    assert f"couldn't bind HTTP server socket, hostname: 127.0.0.1, port: {port}" in rec["error"]


# -- Ctrl-C / SIGTERM, then --resume -----------------------------------------------------------------------
INTERRUPTED = """\
name: interrupted
arms:
  - {name: a, engine: sim, model: sim, options: {itl_ms: 15}}
  - {name: b, engine: sim, model: sim, options: {itl_ms: 15, tokens_per_event: 2}}
workload: {prompts: [prose], max_tokens: 16, reps: 5, warmup: 1, warmup_settle: null}
"""


def _children(pid: int) -> list[int]:
    return [child.pid for child in psutil.Process(pid).children()]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _bakeoff() -> list[str]:
    exe = shutil.which("bakeoff")
    return [exe] if exe else [sys.executable, "-c", "from bakeoff.core.cli import main; main()"]


def _as_from_a_terminal(ignored: tuple[int, ...] = ()) -> Callable[[], None]:
    """The stop signals as an interactive shell hands them to a foreground command, whatever this test inherited
    (a background job starts with SIGINT ignored, a nohup'd one with SIGHUP ignored); ``ignored`` stay ignored."""
    def setup() -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN if sig in ignored else signal.SIG_DFL)
    return setup


def _run_until_samples(cfg: Path, out: Path, engine_name: bytes, n: int = 2, wait_s: float = 60,
                       ignored: tuple[int, ...] = ()) -> tuple[subprocess.Popen[str], Path, int]:
    """Start ``bakeoff run`` and wait until ``n`` samples are stored; returns it, samples.jsonl and the engine's
    pgid."""
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.Popen([*_bakeoff(), "run", str(cfg), "--out", str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_as_from_a_terminal(ignored))
    try:
        deadline = time.monotonic() + wait_s
        jsonl: Path | None = None
        while time.monotonic() < deadline:
            found = list(out.glob("*/samples.jsonl")) if out.exists() else []
            if found and len(found[0].read_text().splitlines()) >= n:
                jsonl = found[0]
                break
            assert proc.poll() is None, proc.communicate()[0]
            time.sleep(0.05)
        assert jsonl is not None, f"no samples within {wait_s} s"
        engines = [pid for pid in _children(proc.pid) if engine_name in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(engines) == 1
        pgid = os.getpgid(engines[0])
        assert pgid != os.getpgid(proc.pid)  # the engine has a process group of its own
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, jsonl, pgid


def _gone_within(pgid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _group_alive(pgid)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_interrupt_stops_the_engine_group_keeps_samples_and_resume_completes(tmp_path: Path, sig: int) -> None:
    """SIGHUP (a closed terminal, a dropped SSH session) ends a run like Ctrl-C (FAULTS D8)."""
    cfg = tmp_path / "b.yaml"
    cfg.write_text(INTERRUPTED)
    out = tmp_path / "runs"
    env = {**os.environ, "COLUMNS": "200"}
    proc, jsonl, pgid = _run_until_samples(cfg, out, b"sim/server.py")
    try:
        t0 = time.monotonic()
        proc.send_signal(sig)
        output = proc.communicate(timeout=30)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    while _group_alive(pgid) and time.monotonic() - t0 < 5.0:
        time.sleep(0.05)
    assert not _group_alive(pgid), "the engine's process group outlived bakeoff by 5 s"
    assert proc.returncode == 130, output
    assert "interrupted: engines stopped" in output

    run_dir = jsonl.parent
    before = jsonl.read_text()
    kept = read_samples(run_dir)
    assert 2 <= len(kept) < 10 and all(s.status == "ok" for s in kept)
    assert json.loads((run_dir / "run.json").read_text()).get("finished_at") is None

    resumed = subprocess.run([*_bakeoff(), "run", "--resume", str(run_dir)], env=env, capture_output=True,
                             text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"{len(kept)} measurement points already stored" in resumed.stdout
    after = jsonl.read_text()
    assert after.startswith(before)  # nothing rewritten
    samples = read_samples(run_dir)
    keys = sorted((s.arm, s.rep) for s in samples)
    assert keys == sorted((arm, rep) for arm in "ab" for rep in range(5))  # complete, no duplicates
    assert RunDir(run_dir).db.samples(run_dir.name) == samples
    assert json.loads((run_dir / "run.json").read_text())["finished_at"] is not None
    again = subprocess.run([*_bakeoff(), "run", "--resume", str(run_dir)], env=env, capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 0 and jsonl.read_text() == after  # resuming a complete run adds nothing


def test_a_nohup_run_survives_the_hangup_it_was_told_to_ignore(tmp_path: Path) -> None:
    """`nohup bakeoff run` starts with SIGHUP ignored: a closed terminal must not end it."""
    cfg = tmp_path / "b.yaml"
    cfg.write_text(INTERRUPTED)
    proc, jsonl, _ = _run_until_samples(cfg, tmp_path / "runs", b"sim/server.py", ignored=(signal.SIGHUP,))
    try:
        proc.send_signal(signal.SIGHUP)
        output = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, output
    assert len(read_samples(jsonl.parent)) == 10


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGUSR1], ids=["SIGKILL", "SIGUSR1"])
def test_an_engine_dies_with_a_bakeoff_killed_by_any_signal(tmp_path: Path, sig: int) -> None:
    """No handler runs on SIGKILL or an unhandled SIGUSR1: the parent-death signal takes the engine down
    (FAULTS D8), and the run can be resumed."""
    cfg = tmp_path / "b.yaml"
    cfg.write_text(INTERRUPTED)
    proc, jsonl, pgid = _run_until_samples(cfg, tmp_path / "runs", b"sim/server.py")
    proc.send_signal(sig)
    proc.communicate(timeout=30)
    assert proc.returncode == -sig
    assert _gone_within(pgid, 10), "the engine outlived the bakeoff that was killed"
    record = next(jsonl.parent.glob("arms/*/engine.pid"))  # the record of the engine it could not stop itself
    assert json.loads(record.read_text())["bakeoff_pid"] == proc.pid
    resumed = subprocess.run([*_bakeoff(), "run", "--resume", str(jsonl.parent)], capture_output=True, text=True,
                             timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert resumed.returncode == 0, resumed.stdout
    assert sorted((s.arm, s.rep) for s in read_samples(jsonl.parent)) == sorted((a, r) for a in "ab" for r in range(5))


def test_an_engine_left_by_a_dead_bakeoff_is_stopped_by_the_next_run(tmp_path: Path) -> None:
    """Where no parent-death signal could act (another OS, an engine that ignores SIGTERM), the record each
    engine leaves lets the next run stop it and say so."""
    from bakeoff.core.engine.launcher import _start_ticks, running_dir

    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        running_dir().mkdir(parents=True, exist_ok=True)
        (running_dir() / f"{orphan.pid}.json").write_text(json.dumps(
            {"pid": orphan.pid, "start": _start_ticks(orphan.pid), "pgid": orphan.pid, "argv0": "llama-server",
             "bakeoff_pid": dead.pid, "bakeoff_start": 12345, "arm_dir": str(tmp_path / "old-run/arms/a")}))
        cfg = tmp_path / "b.yaml"
        cfg.write_text("arms:\n  - {name: a, engine: sim, model: sim, options: {itl_ms: 2}}\n"
                       "workload: {prompts: [prose], max_tokens: 8, reps: 1, warmup: 1, warmup_settle: null}\n")
        done = subprocess.run([*_bakeoff(), "run", str(cfg), "--out", str(tmp_path / "runs")], capture_output=True,
                              text=True, timeout=120, env={**os.environ, "COLUMNS": "250"})
        assert done.returncode == 0, done.stdout
        assert f"stopped engine pid {orphan.pid} (llama-server) left running by bakeoff pid {dead.pid}" in done.stdout
        assert orphan.wait(timeout=10) == -signal.SIGTERM
        assert not (running_dir() / f"{orphan.pid}.json").exists()
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()


def test_llama_server_dies_with_a_killed_bakeoff(tmp_path: Path, llama_server: Path) -> None:
    cfg = tmp_path / "b.yaml"
    cfg.write_text(_llama_arm().replace("max_tokens: 8, reps: 1", "max_tokens: 8, reps: 50"))
    proc, _, pgid = _run_until_samples(cfg, tmp_path / "runs", b"llama-server", n=1, wait_s=120)
    proc.kill()
    proc.communicate(timeout=30)
    assert _gone_within(pgid, 15), "llama-server outlived the bakeoff that was SIGKILLed"


def test_llama_server_killed_mid_run_is_an_error_the_arm_fails_and_the_next_arm_runs(
        tmp_path: Path, llama_server: Path) -> None:
    rec = Recorder()

    def kill_engine_soon(arm: str) -> None:
        if arm == "boot":
            pid = next(p for p in _children(os.getpid()) if b"llama-server" in Path(f"/proc/{p}/cmdline").read_bytes())
            threading.Timer(1.0, os.kill, (pid, signal.SIGKILL)).start()

    rec.on_ready = kill_engine_soon
    run, records, rec = run_yaml(tmp_path, """\
arms:
  - {name: boot, engine: llamacpp, model: smollm2, settings: {ctx: 1024, threads: 2}}
  - {name: after, engine: sim, model: sim, options: {itl_ms: 2}}
workload: {prompts: [prose], max_tokens: 64, reps: 30, warmup: 0, boot_timeout_s: 120, seed: 3}
""", rec)
    samples = assert_nothing_lost(run, rec)
    assert records["boot"]["status"] == "failed" and records["boot"]["reason"] == "died", records["boot"]
    boot = by_arm(samples, "boot")
    assert boot and boot[-1].status == "error" and len(boot) < 30
    assert all(s.status == "ok" for s in by_arm(samples, "after")) and records["after"]["status"] == "ok"


def test_llama_server_stalled_by_sigstop_is_a_deadline_error_and_the_engine_is_stopped(
        tmp_path: Path, llama_server: Path) -> None:
    rec = Recorder()
    stalled: list[int] = []

    def stop_engine_soon(arm: str) -> None:
        pid = next(p for p in _children(os.getpid()) if b"llama-server" in Path(f"/proc/{p}/cmdline").read_bytes())
        stalled.append(pid)
        threading.Timer(1.0, os.kill, (pid, signal.SIGSTOP)).start()

    rec.on_ready = stop_engine_soon
    text = _llama_arm().replace("max_tokens: 8, reps: 1, warmup: 0, boot_timeout_s: 120",
                                "max_tokens: 64, reps: 30, warmup: 0, boot_timeout_s: 120, request_timeout_s: 3")
    run, records, rec = run_yaml(tmp_path, text, rec)
    samples = assert_nothing_lost(run, rec)
    assert records["boot"]["status"] == "failed" and records["boot"]["reason"] == "stalled", records["boot"]
    last = by_arm(samples, "boot")[-1]
    assert last.status == "error" and "timeout" in last.flags
    assert not _group_alive(stalled[0])  # a stopped engine is killed, not left frozen


# -- hostile servers in attach mode (tests/fixtures/hostile_server.py) -----------------------------------------
VALID_SSE = ("ok", "crlf", "comments_only", "ids_only", "ids_keepalive", "multiline", "split", "nodone")
LYING = ("json_null", "json_list", "json_string", "choices_dict", "content_int", "finish_int", "delta_list",
         "usage_over_max", "usage_neg", "usage_zero", "usage_float", "usage_str", "usage_huge", "usage_null",
         "usage_missing", "usage_notdict", "details_list", "cached_over", "burst", "gzip", "err_in_stream",
         "http429", "http500", "redirect", "html", "nonstream_json", "close200", "sse_plain_json", "reset",
         "slowloris", "slowloris_nl", "silent", "echo_key")


def test_a_hostile_server_never_yields_a_clean_rate_and_valid_sse_always_does(
        tmp_path: Path, hostile_server: Any) -> None:
    """One run, one attached arm per behaviour: valid SSE in any framing measures; every lie, garbage or
    stall is an error sample, a flagged sample without a rate, or a failed arm; nothing raises, nothing is lost."""
    arms = "".join(f"  - {{name: {m}, engine: openai, url: '{hostile_server.url(m)}'}}\n" for m in VALID_SSE + LYING)
    run, records, rec = run_yaml(tmp_path, "arms:\n" + arms + "workload: {prompts: [prose], max_tokens: 12, reps: 2, "
                                 "warmup: 0, request_timeout_s: 2}\n")
    samples = assert_nothing_lost(run, rec)
    for mode in VALID_SSE:
        got = by_arm(samples, mode)
        assert [s.status for s in got] == ["ok", "ok"] and all(s.decode_tps for s in got), (mode, got)
    for mode in LYING:
        clean = [s for s in by_arm(samples, mode) if s.status == "ok" and s.decode_tps and
                 not any(f.split(":")[0] in ("burst-delivery", "usage-impossible", "no-rate") for f in s.flags)]
        assert not clean, (mode, clean[0].flags if clean else None)
        assert records[mode]["status"] in ("ok", "failed")


# -- security ---------------------------------------------------------------------------------------------
def test_the_api_key_is_used_but_never_written_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = "sk-bakeoff-test-" + os.urandom(12).hex()
    monkeypatch.setenv("BAKEOFF_SIM_KEY", key)
    run, _records, rec = run_yaml(tmp_path, """\
arms:
  - {name: keyed, engine: sim, model: sim, api_key_env: BAKEOFF_SIM_KEY, options: {require_api_key: true}}
workload: {prompts: [prose], max_tokens: 8, reps: 2, warmup: 1, warmup_settle: null}
""")
    samples = assert_nothing_lost(run, rec)
    assert [s.status for s in samples] == ["ok", "ok"]  # the server refused requests without it
    from bakeoff.core.reports import print_run

    console_out = StringIO()
    print_run(run.path, Console(file=console_out, width=200))
    files = [p for p in run.path.rglob("*") if p.is_file()]
    assert any(p.name == "samples.jsonl" for p in files) and any(p.suffix == ".log" for p in files)
    leaks = [str(p) for p in files if key.encode() in p.read_bytes()]
    assert leaks == []
    assert key not in console_out.getvalue()
    assert "BAKEOFF_SIM_KEY" in run.run_json.read_text()  # the variable's name is recorded, not its value


def test_the_engine_really_checks_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's copy of the variable is overridden (arm env), so the key bakeoff sends is wrong: 401."""
    sent = "client-side-" + os.urandom(8).hex()
    monkeypatch.setenv("BAKEOFF_SIM_KEY", sent)
    run, _records, rec = run_yaml(tmp_path, """\
arms:
  - {name: keyed, engine: sim, model: sim, api_key_env: BAKEOFF_SIM_KEY, options: {require_api_key: true},
     env: {BAKEOFF_SIM_KEY: engine-side-key}}
workload: {prompts: [prose], max_tokens: 8, reps: 1, warmup: 0}
""")
    [sample] = assert_nothing_lost(run, rec)
    assert sample.status == "error" and (sample.error or "").startswith("HTTP 401")
    assert not [p for p in run.path.rglob("*") if p.is_file() and sent.encode() in p.read_bytes()]


def test_the_engine_listens_on_loopback_only(tmp_path: Path) -> None:
    rec = Recorder()
    listening: list[str] = []

    def check(arm: str) -> None:
        argv = (tmp_path / "run" / "arms" / arm / "argv.txt").read_text().split()
        port = int(argv[argv.index("--port") + 1])
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A" and int(local.split(":")[1], 16) == port:
                listening.append(local.split(":")[0])

    rec.on_ready = check
    run_yaml(tmp_path, """\
arms: [{name: local, engine: sim, model: sim}]
workload: {prompts: [prose], max_tokens: 4, reps: 1, warmup: 0}
""", rec)
    assert listening == ["0100007F"]  # 127.0.0.1, little-endian hex as /proc/net/tcp writes it


def test_fixed_port_answered_by_another_server_is_not_taken_for_our_engine(tmp_path: Path,
                                                                          llama_server: Path) -> None:
    """Another HTTP server already answering /health with 200 on the arm's fixed port must not pass for the
    engine being ready: the engine's own bind failure is reported instead of measuring the stranger."""
    import http.server
    import threading

    class Healthy(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    stranger = http.server.HTTPServer(("127.0.0.1", 0), Healthy)
    port = stranger.server_address[1]
    threading.Thread(target=stranger.serve_forever, daemon=True).start()
    try:
        run, records, _recorder = run_yaml(tmp_path, f"""\
arms:
  - {{name: boot, engine: llamacpp, model: smollm2, settings: {{ctx: 1024, threads: 2, port: {port}}}}}
workload: {{prompts: [prose], max_tokens: 8, reps: 1, warmup: 0, boot_timeout_s: 60}}
""")
    finally:
        stranger.shutdown()
        stranger.server_close()
    rec = records["boot"]
    assert rec["status"] == "failed" and rec["reason"] == "port-in-use", rec
    assert "couldn't bind HTTP server socket" in rec["error"]  # llama-server's own line is quoted
    assert read_samples(run.path) == []  # nothing was measured against the stranger
