"""bakeoff promote: launch definitions (compose validated by the compose CLI), the gate, rollback and revert.

The switch itself runs against sim servers (real processes on loopback); tests/integration/test_live_llamacpp.py
does it with llama-server.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from compose_cli import compose_cli, compose_config
from test_live import LiveSim, live  # noqa: F401 - the fixture

from bakeoff.core.common.errors import PromoteError
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.results.record import RunRecord
from bakeoff.core.results.store import RunDir
from bakeoff.core.run.live import service_commands
from bakeoff.core.run.promote import prepare, promote, record_path, revert
from bakeoff.core.run.watchdog import health_problem

ROOT = Path(__file__).resolve().parents[3]


def recorded_run(tmp: Path, text: str) -> Path:
    """A run directory whose run.json records this bakeoff file (as `bakeoff run` writes it)."""
    run = RunDir(tmp / "runs" / "r1")
    run.write_record(RunRecord.model_validate({"config": parse_bakeoff(text).model_dump(mode="json")}))
    return run.path


LIVE_COMPOSE = "live: {kind: compose, name: llama-live, health: 'http://127.0.0.1:8094/health', model: qwen-live, " \
               "port: 8094, compose_file: FILE}\n"


def test_promote_writes_a_compose_service_on_the_live_port_that_the_compose_cli_accepts(tmp_path: Path) -> None:
    rd = recorded_run(tmp_path, "arms: [{name: winner, engine: llamacpp, model: smollm2, launch: compose, "
                                "settings: {ctx: 2048, threads: 2}}]\n" + LIVE_COMPOSE)
    c = prepare(rd, "winner", None, None)
    assert c.files == [rd / "promote" / "winner" / "compose.yaml"]
    project = compose_config(compose_cli(), c.files[0])
    (service,) = project["services"].values()
    assert service["ports"][0]["host_ip"] == "127.0.0.1" and service["ports"][0]["published"] == "8094"
    command = service["command"]
    assert command[command.index("--alias") + 1] == "qwen-live" and command[command.index("-c") + 1] == "2048"
    assert service["healthcheck"]["test"][:2] == ["CMD", "curl"]
    assert all(v["read_only"] for v in service["volumes"])


def test_a_live_compose_service_is_stopped_started_and_recorded_with_the_compose_cli(tmp_path: Path) -> None:
    stack = ROOT / "compose" / "llamacpp-cpu" / "compose.yaml"
    config = parse_bakeoff("arms: [{name: a, engine: sim, model: sim}]\n" + LIVE_COMPOSE.replace("FILE", str(stack))
                           .replace("llama-live", "llamacpp"))
    assert config.live is not None
    commands = service_commands(config.live)
    cli = compose_cli()
    assert commands["stop"] == [*cli, "-f", str(stack), "stop", "llamacpp"]
    assert commands["start"] == [*cli, "-f", str(stack), "start", "llamacpp"]
    done = subprocess.run(commands["record"], capture_output=True, text=True, timeout=60, check=False,
                          env={"LLAMA_MODEL": "m.gguf", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "llamacpp" in json.loads(done.stdout)["services"]


def sim_run(tmp: Path, service: LiveSim, **options: Any) -> Path:
    data = {"arms": [{"name": "winner", "engine": "sim", "model": "sim", "options": options}],
            "live": service.section()}
    return recorded_run(tmp, yaml.safe_dump(data))


def test_native_definition_and_dry_run_print_every_command(tmp_path: Path, live: LiveSim,  # noqa: F811
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BAKEOFF_STATE_DIR", str(tmp_path / "state"))
    rd = sim_run(tmp_path, live)
    lines: list[str] = []
    promote(rd, "winner", dry_run=True, say=lines.append)
    script = (rd / "promote" / "winner" / "launch.sh").read_text()
    assert f"--port {live.port}" in script and "qwen-live" in script and script.startswith("#!/bin/sh")
    unit = (rd / "promote" / "winner" / "bakeoff-winner.service").read_text()
    assert f"ExecStart={(rd / 'promote' / 'winner' / 'launch.sh').resolve()}" in unit
    text = "\n".join(lines)
    assert f"stop live: {' '.join(live.stop)}" in text and ' '.join(live.start) in text
    assert not live.pidfile.exists() and not record_path(live.port).exists()  # nothing ran


def test_promote_switches_and_revert_restores(tmp_path: Path, live: LiveSim,  # noqa: F811
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BAKEOFF_STATE_DIR", str(tmp_path / "state"))
    live.up()
    original = live.pidfile.read_text()
    rd = sim_run(tmp_path, live, prompt_tokens=7)
    record = promote(rd, "winner", say=lambda m: None)
    assert record["status"] == "promoted" and record["current"]["pid"]
    assert health_problem(live.health, "qwen-live") is None
    assert live.pidfile.read_text() == original  # the old process was stopped, not restarted
    assert not _alive(int(original))
    with pytest.raises(PromoteError, match="already live on port"):
        promote(rd, "winner", say=lambda m: None)
    back = revert(say=lambda m: None)
    assert back["status"] == "reverted" and back["reverted"]["healthy_after"]
    assert live.pidfile.read_text() != original and health_problem(live.health, "qwen-live") is None
    assert not _alive(int(record["current"]["pid"]))


def test_a_failing_gate_on_the_live_port_rolls_back(tmp_path: Path, live: LiveSim,  # noqa: F811
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The candidate answers one request (the private gate) and dies on its second (on the live port)."""
    monkeypatch.setenv("BAKEOFF_STATE_DIR", str(tmp_path / "state"))
    live.up()
    rd = sim_run(tmp_path, live, fault="kill", fault_on_requests=[2])
    with pytest.raises(PromoteError, match=r"rolled back .*smoke request 2.*is healthy again"):
        promote(rd, "winner", say=lambda m: None)
    assert health_problem(live.health, "qwen-live") is None
    record = json.loads(record_path(live.port).read_text())
    assert record["status"] == "rolled-back" and record["rollback"]["by"] == "bakeoff"


def test_a_candidate_failing_its_private_gate_never_touches_the_live_service(tmp_path: Path, live: LiveSim,  # noqa: F811
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BAKEOFF_STATE_DIR", str(tmp_path / "state"))
    live.up()
    original = live.pidfile.read_text()
    rd = sim_run(tmp_path, live, fault="http", http_status=500)
    with pytest.raises(PromoteError, match="failed its private gate: smoke request 1: HTTP 500"):
        promote(rd, "winner", say=lambda m: None)
    assert live.pidfile.read_text() == original and health_problem(live.health, "qwen-live") is None


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False




def test_tune_promote_puts_the_verified_winner_live_and_revert_restores(tmp_path: Path, live: LiveSim,  # noqa: F811
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from bakeoff.core.run.tune import run_tune

    monkeypatch.setenv("BAKEOFF_STATE_DIR", str(tmp_path / "state"))
    live.up()
    data = {"arms": [{"name": "spec-off", "engine": "sim", "model": "sim", "options": {"itl_ms": 20}}],
            "workload": {"prompts": ["prose"], "max_tokens": 16, "reps": 2, "warmup": 0, "gates": []},
            "tune": {"space": {"options.itl_ms": [8]}, "max_passes": 3, "verify_streams": [1, 2]},
            "live": live.section()}
    outcome = run_tune(parse_bakeoff(yaml.safe_dump(data)), tmp_path / "runs", promote=True)
    result = outcome.result
    assert result.winner["arm"] == "tune-itl_ms8" and result.verify is not None and not result.verify.collapse
    assert result.promoted is not None and result.promoted["status"] == "promoted"
    assert result.promoted["arm"] == "tune-itl_ms8" and result.promoted["run_dir"] == str(outcome.verify.path
                                                                                         if outcome.verify else "")
    assert health_problem(live.health, "qwen-live") is None  # the winner serves the live name on the live port
    back = revert(say=lambda m: None)
    assert back["status"] == "reverted" and health_problem(live.health, "qwen-live") is None
