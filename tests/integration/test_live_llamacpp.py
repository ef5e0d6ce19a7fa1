"""A real llama-server as the live service: stopped for the arms and restored (by bakeoff, or by the watchdog
after `kill -9`), live knobs in phases against it, and promote/rollback/revert under the same port and name.

The live server is started by the test through tests/fixtures/live_service.py (as a user's start/stop
commands would), on a fixed port, serving SmolLM2 under the name ``qwen-live`` (``--alias``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from bakeoff.core.common.errors import PromoteError
from bakeoff.core.engine.launcher import free_port
from bakeoff.core.results.record import RunRecord
from bakeoff.core.run.promote import promote, revert
from bakeoff.core.run.watchdog import health_problem

pytestmark = pytest.mark.integration

SERVICE = Path(__file__).resolve().parents[1] / "fixtures" / "live_service.py"
NAME = "qwen-live"
WORKLOAD = {"prompts": ["code_python"], "max_tokens": 8, "reps": 1, "warmup": 0}


class LiveLlama:
    def __init__(self, binary: Path, model: Path, tmp: Path) -> None:
        self.port = free_port()
        self.pidfile, self.log = tmp / "live.pid", tmp / "live.log"
        self.health = f"http://127.0.0.1:{self.port}/health"
        argv = ["env", f"LD_LIBRARY_PATH={binary.parent}", str(binary), "-m", str(model), "--host", "127.0.0.1",
                "--port", str(self.port), "-np", "1", "-c", "1024", "-t", "2", "--alias", NAME]
        self.start = [sys.executable, str(SERVICE), "start", str(self.pidfile), str(self.log), "--", *argv]
        self.stop = [sys.executable, str(SERVICE), "stop", str(self.pidfile)]

    def section(self, **extra: Any) -> dict[str, Any]:
        return {"kind": "command", "name": "llama-live", "stop": self.stop, "start": self.start,
                "health": self.health, "model": NAME, "port": self.port, **extra}

    def n_ctx(self) -> int:
        return int(httpx.get(f"http://127.0.0.1:{self.port}/props", timeout=5).json()
                   ["default_generation_settings"]["n_ctx"])


def wait_for(check: Any, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def live(llama_server: Path, smollm2: Path, tmp_path: Path) -> Iterator[LiveLlama]:
    service = LiveLlama(llama_server, smollm2, tmp_path)
    subprocess.run(service.start, check=True)
    assert wait_for(lambda: health_problem(service.health, NAME) is None, 120), service.log.read_text()[-2000:]
    yield service
    subprocess.run(service.stop, check=False)


def arms(smollm2: Path) -> list[dict[str, Any]]:
    return [{"name": "ctx1k", "engine": "llamacpp", "model": str(smollm2), "settings": {"ctx": 1024, "threads": 2}},
            {"name": "ctx2k", "engine": "llamacpp", "model": str(smollm2), "settings": {"ctx": 2048, "threads": 2}}]


def bakeoff_run(cli: str, tmp: Path, data: dict[str, Any]) -> subprocess.Popen[str]:
    path = tmp / "bakeoff.yaml"
    path.write_text(yaml.safe_dump(data))
    return subprocess.Popen([cli, "run", str(path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=tmp, start_new_session=True)


def only_run(tmp: Path) -> Path:
    (rd,) = (tmp / "runs").iterdir()
    return rd


def live_record(rd: Path) -> dict[str, Any]:
    return dict(json.loads((rd / "run.json").read_text())["live"])


def test_live_llama_server_is_stopped_for_the_arms_restored_healthy_and_promote_switches_it(
        live: LiveLlama, smollm2: Path, bakeoff_cli: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t0 = time.monotonic()
    proc = bakeoff_run(bakeoff_cli, tmp_path, {"arms": arms(smollm2), "workload": WORKLOAD,
                                               "live": live.section()})
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    rd = only_run(tmp_path)
    rec = live_record(rd)
    assert rec["restored_by"] == "bakeoff" and rec["healthy_after"] is True
    samples = [json.loads(line) for line in (rd / "samples.jsonl").read_text().splitlines()]
    assert {s["arm"] for s in samples if s["status"] == "ok"} == {"ctx1k", "ctx2k"}
    assert all(rec["stopped_at"] < s["started_at"] < rec["restored_at"] for s in samples)
    assert health_problem(live.health, NAME) is None and live.n_ctx() == 1024
    print(f"\nrun {time.monotonic() - t0:.1f} s; live down {rec['restored_at'] - rec['stopped_at']:.1f} s")

    # promote the other arm under the same port and name, then go back
    monkeypatch.setenv("BAKEOFF_STATE_DIR", str(tmp_path / "state"))
    t1 = time.monotonic()
    record = promote(rd, "ctx2k", say=lambda m: None)
    assert record["status"] == "promoted"
    assert health_problem(live.health, NAME) is None and live.n_ctx() == 2048  # the arm's flags, same port/name
    script = (rd / "promote" / "ctx2k" / "launch.sh").read_text()
    assert f"--port {live.port}" in script and f"--alias {NAME}" in script and "-c 2048" in script
    t2 = time.monotonic()
    revert(say=lambda m: None)
    assert health_problem(live.health, NAME) is None and live.n_ctx() == 1024
    print(f"promote {t2 - t1:.1f} s, revert {time.monotonic() - t2:.1f} s")


def test_a_failing_health_gate_rolls_back_to_the_live_llama_server(
        live: LiveLlama, smollm2: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The candidate passes its private gate (one request) and dies on its second request on the live port."""
    from bakeoff.core.config.loader import parse_bakeoff
    from bakeoff.core.results.store import RunDir

    monkeypatch.setenv("BAKEOFF_STATE_DIR", str(tmp_path / "state"))
    crashes = {"name": "crashes", "engine": "sim", "model": "sim", "options": {"fault": "kill",
                                                                              "fault_on_requests": [2]}}
    run = RunDir(tmp_path / "runs" / "r")
    run.write_record(RunRecord.model_validate({
        "config": parse_bakeoff(yaml.safe_dump({"arms": [crashes], "live": live.section()}))
                   .model_dump(mode="json")}))
    old_pid = live.pidfile.read_text()
    with pytest.raises(PromoteError, match=r"rolled back .*smoke request 2.* is healthy again"):
        promote(run.path, "crashes", say=lambda m: None)
    assert live.pidfile.read_text() != old_pid  # it really was stopped, and started again by the rollback
    assert health_problem(live.health, NAME) is None and live.n_ctx() == 1024


def test_watchdog_restores_the_live_llama_server_after_kill_9(
        live: LiveLlama, smollm2: Path, bakeoff_cli: str, tmp_path: Path) -> None:
    long = {**WORKLOAD, "reps": 40, "max_tokens": 32}
    proc = bakeoff_run(bakeoff_cli, tmp_path, {"arms": arms(smollm2)[:1], "workload": long,
                                               "live": live.section(watchdog_s=300)})
    assert wait_for(lambda: (tmp_path / "runs").exists() and (only_run(tmp_path) / "samples.jsonl").exists(), 300)
    rd = only_run(tmp_path)
    arm_port = (rd / "arms" / "ctx1k" / "argv.txt").read_text().split("--port ")[1].split()[0]
    os.kill(proc.pid, signal.SIGKILL)
    killed = time.monotonic()
    proc.communicate(timeout=10)
    assert wait_for(lambda: health_problem(live.health, NAME) is None, 300)
    healthy_after = time.monotonic() - killed
    assert wait_for(lambda: live_record(rd).get("restored_by") == "watchdog", 30)
    assert live_record(rd)["healthy_after"] is True
    # the arm's llama-server (its own session, orphaned by the SIGKILL) was stopped by the watchdog
    assert wait_for(lambda: health_problem(f"http://127.0.0.1:{arm_port}/health", None) is not None, 30)
    print(f"\nlive llama-server healthy {healthy_after:.1f} s after kill -9 of bakeoff (watchdog deadline 300 s)")


def test_phases_against_the_live_llama_server_revert_on_success_and_after_kill_9(
        live: LiveLlama, tmp_path: Path, bakeoff_cli: str) -> None:
    toggle = tmp_path / "knob"
    toggle.write_text("off")
    knob = {"name": "toggled", "apply": ["sh", "-c", f"echo on > {toggle}"],
            "revert": ["sh", "-c", f"echo off > {toggle}"]}
    server = {"name": "live", "engine": "llamacpp", "url": f"http://127.0.0.1:{live.port}"}
    pid = live.pidfile.read_text()

    def phase_run(where: Path, duration_s: float) -> subprocess.Popen[str]:
        where.mkdir()
        return bakeoff_run(bakeoff_cli, where, {
            "arms": [server], "workload": {**WORKLOAD, "warmup": 1}, "live": live.section(),
            "phases": {"knobs": [knob], "duration_s": duration_s, "probe_interval_s": 0.5}})

    ok = phase_run(tmp_path / "ok", 1.0)
    out, _ = ok.communicate(timeout=300)
    assert ok.returncode == 0, out
    assert toggle.read_text().strip() == "off"
    rd = only_run(tmp_path / "ok")
    phases = json.loads((rd / "run.json").read_text())["phases"]
    assert [p["setting"] for p in phases] == ["baseline", "toggled", "baseline"]
    assert phases[1]["reverted"]["ok"] and all(p["unhealthy_probes"] == 0 for p in phases)
    samples = [json.loads(line) for line in (rd / "samples.jsonl").read_text().splitlines()]
    assert all(s["status"] == "ok" and s["phase"] for s in samples) and len({s["phase"] for s in samples}) == 3
    assert live.pidfile.read_text() == pid  # the live server stayed up: a phase run stops nothing
    assert "p01-toggled" in out

    killed = phase_run(tmp_path / "killed", 5.0)
    assert wait_for(lambda: toggle.read_text().strip() == "on", 120)
    os.kill(killed.pid, signal.SIGKILL)
    t = time.monotonic()
    killed.communicate(timeout=10)
    assert wait_for(lambda: toggle.read_text().strip() == "off", 30)
    print(f"\nknob reverted by the watchdog {time.monotonic() - t:.1f} s after kill -9")
    assert live.pidfile.read_text() == pid and health_problem(live.health, NAME) is None


