"""Issue 33 item 7: a container is the Docker daemon's child, so the parent-death signal that stops a native
engine never reaches it. A bakeoff killed past every handler (SIGKILL) must still bring its compose project
down and remove its ``docker run`` container; a bakeoff that cleaned up itself must not do it twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

# a compose or docker CLI stand-in: records its arguments (after -p/-f), a healthy container for `ps`,
# and `docker run` stays in the foreground like the real one
FAKE_CLI = textwrap.dedent('''
    import json, os, sys, time
    args = sys.argv[1:]
    while args[:1] in (["-p"], ["-f"]):
        args = args[2:]
    with open(os.environ["FAKE_CALLS"], "a") as f:
        f.write(json.dumps(args) + "\\n")
    if args[0] == "ps":
        print(json.dumps({"ID": "c0ffee", "Service": "fake", "State": "running", "Health": "healthy"}))
    elif args[0] == "run":
        time.sleep(600)
''')

COMPOSE_BAKEOFF = textwrap.dedent('''
    import sys, time
    from pathlib import Path
    from bakeoff.core.config.schema import Arm
    from bakeoff.core.engine.contract import EngineAdapter, LaunchSpec
    from bakeoff.core.engine.compose import ComposeEngine
    from bakeoff.core.engine.container import ComposeImage

    class Fake(EngineAdapter):
        name = "fake"
        compose = ComposeImage("fake/engine:1.0", 80, ("CMD", "probe"))
        def launch_spec(self, arm, launch):
            return LaunchSpec(["serve", "--model", launch.model])

    tmp, cli, keep = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "killed"
    model = tmp / "m.gguf"
    model.write_bytes(b"GGUF")
    arm = Arm(name="a", engine="fake", model=str(model), launch="compose")
    with ComposeEngine(Fake(), arm, 18080, tmp / "arm", tmp / "arm" / "engine.log", 30, project="bakeoff-g-a",
                       command=[sys.executable, cli]):
        print("up", flush=True)
        if keep:
            time.sleep(600)  # until SIGKILLed
''')

DOCKER_BAKEOFF = textwrap.dedent('''
    import sys, time
    from pathlib import Path
    from bakeoff.core.engine.contract import LaunchSpec
    from bakeoff.core.engine.launcher import Engine
    from bakeoff.engines.sim.adapter import SimAdapter

    tmp, docker = Path(sys.argv[1]), sys.argv[2]
    spec = LaunchSpec([docker, "run", "--rm", "--name", "bakeoff-g-c", "img"], container="bakeoff-g-c")
    engine = Engine(SimAdapter(), spec, "http://127.0.0.1:1", tmp / "arm" / "engine.log")
    engine.start()
    print("up", flush=True)
    time.sleep(600)  # until SIGKILLed
''')


def _calls(path: Path) -> list[list[str]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _kill_when_up(script: str, *args: str, env: dict[str, str]) -> None:
    """Run ``script`` as a bakeoff, and SIGKILL it once its engine is up (no handler, no atexit runs)."""
    proc = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _wait_for(path: Path, verb: str, timeout_s: float = 60) -> list[list[str]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not any(c[0] == verb for c in _calls(path)):
        time.sleep(0.1)
    return _calls(path)


def _setup(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    cli = tmp_path / "fake_cli.py"
    cli.write_text(FAKE_CLI)
    calls = tmp_path / "calls.jsonl"
    return cli, calls, {**os.environ, "FAKE_CALLS": str(calls)}


def test_a_killed_bakeoff_still_brings_its_compose_project_down(tmp_path: Path) -> None:
    cli, calls, env = _setup(tmp_path)
    _kill_when_up(COMPOSE_BAKEOFF, str(tmp_path), str(cli), "killed", env=env)
    verbs = [c[0] for c in _wait_for(calls, "down")]
    assert verbs[:2] == ["create", "start"] and "down" in verbs, verbs
    assert _calls(calls)[-1] == ["down", "--remove-orphans", "--timeout", "5"]


def test_a_compose_project_brought_down_by_bakeoff_is_not_brought_down_again(tmp_path: Path) -> None:
    cli, calls, env = _setup(tmp_path)
    done = subprocess.run([sys.executable, "-c", COMPOSE_BAKEOFF, str(tmp_path), str(cli), "normal"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    time.sleep(1)  # a guard that (wrongly) ran would have recorded its call by now
    assert [c[0] for c in _calls(calls)].count("down") == 1


def test_a_killed_bakeoff_still_removes_its_docker_container(tmp_path: Path) -> None:
    _cli, calls, env = _setup(tmp_path)
    docker = tmp_path / "docker"
    docker.write_text(f"#!{sys.executable}\n" + FAKE_CLI)
    docker.chmod(0o755)
    _kill_when_up(DOCKER_BAKEOFF, str(tmp_path), str(docker), env=env)
    assert ["rm", "-f", "bakeoff-g-c"] in _wait_for(calls, "rm")
