"""live: and phases: end to end against the sim engine (a real server process; no model needed).

A sim server on a fixed port stands in for the live service, started and stopped by
tests/fixtures/live_service.py as a user's stop/start commands would. bakeoff runs in a subprocess, so
SIGINT, SIGKILL and SIGSTOP reach it exactly as they would from a terminal.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bakeoff.core.analysis.phases import compare_phases
from bakeoff.core.common.errors import ConfigError
from bakeoff.core.config.checks import check_live_config
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.engine.launcher import free_port
from bakeoff.core.results.record import PhaseRecord
from bakeoff.core.results.sample import Sample
from bakeoff.core.run.live import redact
from bakeoff.core.run.watchdog import health_problem
from bakeoff.engines.sim import SERVER

SERVICE = Path(__file__).resolve().parents[2] / "fixtures" / "live_service.py"
BAKEOFF = shutil.which("bakeoff") or str(Path(sys.executable).with_name("bakeoff"))


class LiveSim:
    """A sim server on a fixed port with served model name ``qwen-live``, run like a user's service."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.pidfile, self.log = tmp / "live.pid", tmp / "live.log"
        self.health = f"http://127.0.0.1:{self.port}/health"
        argv = [sys.executable, "-u", str(SERVER), "--host", "127.0.0.1", "--port", str(self.port),
                "--behaviour", json.dumps({"model_id": "qwen-live"})]
        self.start = [sys.executable, str(SERVICE), "start", str(self.pidfile), str(self.log), "--", *argv]
        self.stop = [sys.executable, str(SERVICE), "stop", str(self.pidfile)]

    def up(self) -> None:
        subprocess.run(self.start, check=True)
        assert wait_for(lambda: health_problem(self.health, "qwen-live") is None, 15)

    def section(self, **extra: Any) -> dict[str, Any]:
        return {"kind": "command", "name": "sim-live", "stop": self.stop, "start": self.start,
                "health": self.health, "model": "qwen-live", "port": self.port, **extra}


def wait_for(check: Any, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveSim]:
    service = LiveSim(tmp_path)
    yield service
    subprocess.run(service.stop, check=False)


def write_file(tmp: Path, data: dict[str, Any]) -> Path:
    path = tmp / "bakeoff.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def sim_arm(**options: Any) -> dict[str, Any]:
    # itl_ms: with none the sim sends every event at once, a burst with no rate, and the run exits non-zero
    return {"name": "candidate", "engine": "sim", "model": "sim", "options": {"itl_ms": 2, **options}}


WORKLOAD = {"prompts": ["code_python"], "max_tokens": 8, "reps": 1, "warmup": 0}


def bakeoff(*args: str, tmp: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "BAKEOFF_WATCHDOG_GRACE_S": "1"}
    return subprocess.Popen([BAKEOFF, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=tmp, env=env, start_new_session=True, preexec_fn=_ctrl_c_not_ignored)


def _ctrl_c_not_ignored() -> None:
    # A background job (`cmd &` without job control, as CI scripts run) starts with SIGINT ignored, and Python then
    # never raises KeyboardInterrupt; these tests send SIGINT as a terminal's Ctrl-C would reach a foreground run.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_dir(tmp: Path) -> Path:
    dirs = sorted((tmp / "runs").iterdir())
    assert len(dirs) == 1, dirs
    return dirs[0]


# -- config and guard rails ------------------------------------------------------------------
def test_live_section_validates_and_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"live: .*kind 'command' needs both 'stop' and 'start'"):
        parse_bakeoff("arms: [{name: a, engine: sim, model: sim}]\n"
                      "live: {kind: command, name: x, health: 'http://127.0.0.1:1/health'}\n")
    with pytest.raises(ConfigError, match=r"live.health: .*http\(s\) URL"):
        parse_bakeoff("arms: [{name: a, engine: sim, model: sim}]\n"
                      "live: {kind: docker, name: x, health: '127.0.0.1:1'}\n")
    with pytest.raises(ConfigError, match=r"phases.knobs\[0\].name: .*'baseline'"):
        parse_bakeoff("arms: [{name: a, engine: sim, model: sim}]\n"
                      "phases: {knobs: [{name: baseline, apply: [true], revert: [true]}]}\n")


def test_an_arm_never_binds_outside_loopback_or_on_the_live_port() -> None:
    base = "live: {kind: docker, name: x, health: 'http://127.0.0.1:8094/health', port: 8094}\n"
    wide = parse_bakeoff("arms: [{name: a, engine: sim, model: sim, settings: {host: 0.0.0.0}}]\n" + base)
    with pytest.raises(ConfigError, match=r"settings\.host '0\.0\.0\.0'.*loopback"):
        check_live_config(wide)
    same = parse_bakeoff("arms: [{name: a, engine: sim, model: sim, settings: {port: 8094}}]\n" + base)
    with pytest.raises(ConfigError, match=r"settings\.port 8094 is the live service's port"):
        check_live_config(same)
    attached = parse_bakeoff("arms: [{name: a, engine: sim, model: sim}, {name: b, engine: openai, "
                             "url: 'http://127.0.0.1:8094'}]\n" + base)
    with pytest.raises(ConfigError, match="is the live service, which this run stops"):
        check_live_config(attached)


def test_records_keep_no_secrets() -> None:
    text = 'Environment=API_KEY=sk-123 "HF_TOKEN=hf_abc" --api-key s3cret password: hunter2'
    out = redact(text)
    assert "sk-123" not in out and "hf_abc" not in out and "s3cret" not in out and "hunter2" not in out


def test_dry_run_prints_every_command_and_runs_none(tmp_path: Path, live: LiveSim) -> None:
    knob = tmp_path / "knob"
    path = write_file(tmp_path, {"arms": [sim_arm()], "workload": WORKLOAD, "live": live.section()})
    done = subprocess.run([BAKEOFF, "run", str(path), "--dry-run"], capture_output=True, text=True, cwd=tmp_path,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert f"stop live: {' '.join(live.stop)}" in out and f"restore live: {' '.join(live.start)}" in out
    assert "watchdog:" in out and "arm candidate:" in out and "sim/server.py" in out
    assert not live.pidfile.exists() and not (tmp_path / "runs").exists() and not knob.exists()


def test_refuses_to_run_when_the_live_service_is_unhealthy(tmp_path: Path, live: LiveSim) -> None:
    path = write_file(tmp_path, {"arms": [sim_arm()], "workload": WORKLOAD, "live": live.section()})
    proc = bakeoff("run", str(path), tmp=tmp_path)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, out
    assert "live service 'sim-live' is unhealthy before the run" in out and "nothing was stopped" in out
    rd = run_dir(tmp_path)
    assert not (rd / "live" / "commands.log").exists()  # no stop (nor any other) command ran
    assert json.loads((rd / "run.json").read_text())["live"]["healthy_before"] is False


# -- stop, run, restore ---------------------------------------------------------------------------
def test_live_service_is_stopped_for_the_run_and_restored_healthy(tmp_path: Path, live: LiveSim) -> None:
    live.up()
    first_pid = live.pidfile.read_text()
    path = write_file(tmp_path, {"arms": [sim_arm()], "workload": WORKLOAD, "live": live.section()})
    proc = bakeoff("run", str(path), tmp=tmp_path)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    rd = run_dir(tmp_path)
    record = json.loads((rd / "run.json").read_text())["live"]
    assert record["healthy_before"] and record["healthy_after"] and record["restored_by"] == "bakeoff"
    assert record["stopped_at"] < record["restored_at"]
    samples = [json.loads(line) for line in (rd / "samples.jsonl").read_text().splitlines()]
    assert samples and all(record["stopped_at"] < s["started_at"] < record["restored_at"] for s in samples)
    assert live.pidfile.read_text() != first_pid  # really stopped and started again
    assert health_problem(live.health, "qwen-live") is None
    config = json.loads((rd / "live" / "config.json").read_text())
    assert config["/v1/models"]["data"][0]["id"] == "qwen-live"
    assert "watchdog: bakeoff finished and undid its changes itself; exiting" in (rd / "live" / "guard.log").read_text()


def test_watchdog_restores_the_live_service_after_bakeoff_is_killed(tmp_path: Path, live: LiveSim) -> None:
    live.up()
    slow = sim_arm(itl_ms=200)  # 8 tokens x 200 ms per request: time to kill it mid-run
    path = write_file(tmp_path, {"arms": [slow], "workload": {**WORKLOAD, "reps": 50},
                                 "live": live.section(watchdog_s=120)})
    proc = bakeoff("run", str(path), tmp=tmp_path)
    assert wait_for(lambda: (tmp_path / "runs").exists() and (run_dir(tmp_path) / "samples.jsonl").exists(), 60)
    rd = run_dir(tmp_path)
    assert health_problem(live.health, None) is not None  # stopped while the arm runs
    os.kill(proc.pid, signal.SIGKILL)
    killed = time.monotonic()
    proc.communicate(timeout=10)
    assert wait_for(lambda: health_problem(live.health, "qwen-live") is None, 60)
    restored_after = time.monotonic() - killed
    assert wait_for(lambda: "restored_by" in json.loads((rd / "run.json").read_text()).get("live", {}) and
                    json.loads((rd / "run.json").read_text())["live"]["restored_by"] == "watchdog", 30)
    record = json.loads((rd / "run.json").read_text())["live"]
    assert record["healthy_after"] is True
    log = (rd / "live" / "guard.log").read_text()
    assert "bakeoff (pid" in log and "is gone" in log and "undo live: healthy" in log
    # the arm's engine (its own session) was stopped by the watchdog, not left running
    assert wait_for(lambda: not [c for c in _sim_cmdlines() if f"--port\0{live.port}\0" not in c], 15)
    print(f"restored {restored_after:.1f} s after SIGKILL (deadline 120 s)")


def _sim_cmdlines() -> list[str]:
    """Command lines of running sim servers of this test session (this test's tmp paths appear in none)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if str(SERVER) in cmdline and state not in ("Z", "X"):
                out.append(cmdline)
    return out


def test_watchdog_restores_at_its_deadline_when_bakeoff_hangs(tmp_path: Path, live: LiveSim) -> None:
    live.up()
    path = write_file(tmp_path, {"arms": [sim_arm(itl_ms=200)], "workload": {**WORKLOAD, "reps": 50},
                                 "live": live.section(watchdog_s=4)})
    proc = bakeoff("run", str(path), tmp=tmp_path)
    assert wait_for(lambda: (tmp_path / "runs").exists() and (run_dir(tmp_path) / "samples.jsonl").exists(), 60)
    os.kill(proc.pid, signal.SIGSTOP)  # hung: no signal handler, no finally block runs
    stopped = time.monotonic()
    assert wait_for(lambda: health_problem(live.health, "qwen-live") is None, 60)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL  # SIGTERM could not reach a stopped process; SIGKILL did
    rd = run_dir(tmp_path)
    assert wait_for(lambda: json.loads((rd / "run.json").read_text())["live"]["restored_by"] == "watchdog", 30)
    assert json.loads((rd / "run.json").read_text())["live"]["healthy_after"] is True
    log = (rd / "live" / "guard.log").read_text()
    assert "deadline passed; asking bakeoff" in log and "SIGKILL" in log
    print(f"restored {time.monotonic() - stopped:.1f} s after bakeoff hung (deadline 4 s after start)")


# -- phases: apply/revert pairs against a server that stays up --------------------------------------
def phase_file(tmp: Path, *, duration_s: float, apply_extra: str = "", **phases: Any) -> tuple[Path, Path]:
    """A phase run whose knob toggles a file (on while applied, off after the revert)."""
    toggle = tmp / "knob"
    toggle.write_text("off")
    knobs = [{"name": "toggled", "apply": ["sh", "-c", f"echo on > {toggle}{apply_extra}"],
              "revert": ["sh", "-c", f"echo off > {toggle}"]}]
    data = {"arms": [sim_arm(itl_ms=5)], "workload": WORKLOAD,
            "phases": {"knobs": knobs, "duration_s": duration_s, "probe_interval_s": 0.2, **phases}}
    return write_file(tmp, data), toggle


def test_phases_revert_on_success_and_the_report_compares_neighbours(tmp_path: Path) -> None:
    path, toggle = phase_file(tmp_path, duration_s=0.5)
    proc = bakeoff("run", str(path), tmp=tmp_path)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert toggle.read_text().strip() == "off"
    rd = run_dir(tmp_path)
    meta = json.loads((rd / "run.json").read_text())
    assert [p["phase"] for p in meta["phases"]] == ["p00-baseline", "p01-toggled", "p02-baseline"]
    knob = meta["phases"][1]
    assert knob["applied"]["exit_code"] == 0 and knob["reverted"]["ok"] and knob["reverted"]["by"] == "bakeoff"
    assert all(p["probes"] >= 1 and p["unhealthy_probes"] == 0 for p in meta["phases"])
    samples = [Sample.model_validate_json(line) for line in (rd / "samples.jsonl").read_text().splitlines()]
    assert {s.phase for s in samples} == {"p00-baseline", "p01-toggled", "p02-baseline"}
    assert {s.arm for s in samples} == {"baseline", "toggled"}
    assert "each knob against its neighbouring baselines" in out and "p01-toggled" in out
    assert "**Phases**" in (rd / "report" / "report.md").read_text()  # one report, the phase table in it
    summary = json.loads((rd / "report" / "summary.json").read_text())
    assert [p["phase"] for p in summary["phases"]] == ["p00-baseline", "p01-toggled", "p02-baseline"]
    knob_result = summary["phases"][1]
    assert knob_result["ratio"]["lo"] <= knob_result["ratio"]["estimate"] <= knob_result["ratio"]["hi"]
    assert knob_result["baselines"] == ["p00-baseline", "p02-baseline"]
    for report in ("report.md", "report.html"):
        text = (rd / "report" / report).read_text()
        assert "Phases" in text and "p01-toggled" in text, report


def test_a_failed_probe_stops_the_phases_and_reverts(tmp_path: Path) -> None:
    klog = tmp_path / "kern.log"
    klog.write_text("NVRM: Xid (PCI:0000:01:00): 79, an old line from before the run\n")
    path, toggle = phase_file(tmp_path, duration_s=2, apply_extra=f"; echo 'NVRM: Xid (PCI:0000:01:00): 13' >> {klog}",
                              kernel_log={"command": ["cat", str(klog)], "pattern": "NVRM: Xid"})
    proc = bakeoff("run", str(path), tmp=tmp_path)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, out
    assert "kernel log: NVRM: Xid (PCI:0000:01:00): 13" in out
    assert toggle.read_text().strip() == "off"
    meta = json.loads((run_dir(tmp_path) / "run.json").read_text())
    assert meta["phases"][1]["reverted"]["ok"] and meta["phases"][1]["problem"].startswith("kernel log")


def test_phases_revert_on_ctrl_c(tmp_path: Path) -> None:
    path, toggle = phase_file(tmp_path, duration_s=3)
    proc = bakeoff("run", str(path), tmp=tmp_path)
    assert wait_for(lambda: toggle.read_text().strip() == "on", 90)
    os.kill(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert toggle.read_text().strip() == "off"
    meta = json.loads((run_dir(tmp_path) / "run.json").read_text())
    assert meta["phases"][1]["reverted"]["by"] == "bakeoff"


def test_phases_are_reverted_by_the_watchdog_after_sigkill(tmp_path: Path) -> None:
    path, toggle = phase_file(tmp_path, duration_s=3)
    proc = bakeoff("run", str(path), tmp=tmp_path)
    assert wait_for(lambda: toggle.read_text().strip() == "on", 90)
    os.kill(proc.pid, signal.SIGKILL)
    killed = time.monotonic()
    proc.communicate(timeout=10)
    assert wait_for(lambda: toggle.read_text().strip() == "off", 30)
    reverted_after = time.monotonic() - killed
    rd = run_dir(tmp_path)
    assert wait_for(lambda: "watchdog" in json.loads((rd / "run.json").read_text()), 10)
    done = json.loads((rd / "run.json").read_text())["watchdog"]
    assert done[0]["what"] == "knob toggled" and done[0]["ok"] and done[0]["by"] == "watchdog"
    assert wait_for(lambda: not _sim_cmdlines(), 15)  # the server bakeoff launched is gone too
    print(f"reverted {reverted_after:.1f} s after SIGKILL")


def test_compare_phases_pairs_each_knob_with_both_neighbours() -> None:
    def sample(phase: str, setting: str, rep: int, tps: float) -> Sample:
        return Sample(arm=setting, engine="sim", prompt="p", mode="greedy", rep=rep, decode_tps=tps, phase=phase)

    records = [{"phase": "p00-baseline", "setting": "baseline"}, {"phase": "p01-slow", "setting": "slow"},
               {"phase": "p02-baseline", "setting": "baseline"}]
    samples = [sample("p00-baseline", "baseline", r, 100 + r) for r in range(20)]
    samples += [sample("p01-slow", "slow", r, 0.8 * (100 + r) * 1.1 ** 0.5) for r in range(20)]  # geometric mean
    samples += [sample("p02-baseline", "baseline", r, (100 + r) * 1.1) for r in range(20)]  # drift of +10 %
    slow = compare_phases(samples, [PhaseRecord.model_validate(r) for r in records])[1]
    assert slow.baselines == ["p00-baseline", "p02-baseline"]
    assert slow.ratio is not None and abs(slow.ratio.estimate - 0.8) < 1e-6  # the drift cancels out
    assert slow.verdict == "slower"


EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("live-*.yaml"))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_live_examples_are_valid_and_keep_the_guard_rails(example: Path) -> None:
    from bakeoff.core.config.checks import check_phases_config
    from bakeoff.core.config.loader import load_bakeoff

    config = load_bakeoff(example)
    check_live_config(config)
    check_phases_config(config)
    assert config.live is not None or config.phases is not None


def test_numbers_in_an_argv_are_words_and_dry_run_lists_every_apply_and_revert(tmp_path: Path) -> None:
    config = parse_bakeoff("arms: [{name: a, engine: sim, model: sim}]\n"
                           "phases: {duration_s: 5, knobs: [{name: pl, apply: [nvidia-smi, -pl, 400], "
                           "revert: [nvidia-smi, -pl, 700]}]}\n")
    assert config.phases is not None and config.phases.knobs[0].apply == ["nvidia-smi", "-pl", "400"]
    from bakeoff.core.run.live import dry_run_lines

    lines = dry_run_lines(config)
    assert any("phase p01-pl: apply: nvidia-smi -pl 400; 5 s of requests; revert: nvidia-smi -pl 700" in x
               for x in lines)
    assert [x.split(":")[0] for x in lines if x.startswith("phase")] == ["phase p00-baseline", "phase p01-pl",
                                                                          "phase p02-baseline"]
    assert not any(x.startswith("stop live") for x in lines)  # nothing named, nothing stopped


def test_secrets_in_live_commands_stay_out_of_run_json_and_logs(tmp_path: Path, live: LiveSim) -> None:
    live.up()
    section = live.section(stop=[*live.stop, "--api-key", "s3cret-live-key"])  # extra words: ignored by the stop
    path = write_file(tmp_path, {"arms": [sim_arm()], "workload": WORKLOAD, "live": section})
    proc = bakeoff("run", str(path), tmp=tmp_path)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    rd = run_dir(tmp_path)
    for file in rd.rglob("*"):
        if file.is_file():
            assert b"s3cret-live-key" not in file.read_bytes(), file
    assert "s3cret-live-key" not in out


def test_the_phase_table_shows_gpu_readings_where_a_phase_has_them() -> None:
    from bakeoff.core.reports.tables import phase_rows

    records = [{"phase": "p00-baseline", "setting": "baseline", "probes": 3, "unhealthy_probes": 0,
                "gpu": {"power_mean_w": 612.4, "sm_clock_mhz": 1980.0, "mem_clock_mhz": 3201.0, "temp_max_c": 61.0}},
               {"phase": "p01-pl400", "setting": "pl400", "probes": 3, "unhealthy_probes": 1,
                "gpu": {"power_mean_w": 398.7, "sm_clock_mhz": 1410.0, "mem_clock_mhz": 3201.0, "temp_max_c": 52.0}}]
    header, rows = phase_rows(compare_phases([], [PhaseRecord.model_validate(r) for r in records]))
    assert header[-4:] == ["power W", "SM MHz", "mem MHz", "temp C"]
    assert rows[1][-4:] == ["399", "1410", "3201", "52"] and rows[1][6] == "2/3 healthy"
    assert phase_rows(compare_phases([], [PhaseRecord(phase="p00-baseline", setting="baseline")]))[0][-1] == "probes"
