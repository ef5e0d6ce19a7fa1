"""End to end with Docker: the CPU llama.cpp stack in compose/, attached with ``url:``, and a ``launch: compose``
arm that bakeoff brings up, measures to healthy and brings down. Skips where no Docker engine answers
(these machines have the docker client only).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bakeoff.core.common.errors import EngineUnavailable
from bakeoff.core.engine.compose import compose_command, docker_engine_running, project_name
from bakeoff.core.engine.launcher import free_port
from bakeoff.core.engine.models import smollm2_gguf
from bakeoff.core.results.store import read_samples

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def compose() -> list[str]:
    if not docker_engine_running():
        pytest.skip("no Docker engine answers `docker info` (the docker client alone cannot run the stacks)")
    try:
        return compose_command()
    except EngineUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def bakeoff_cli() -> str:
    exe = shutil.which("bakeoff")
    assert exe, "the bakeoff console script is not installed (pip install -e .)"
    return exe


def run_dir(out: Path) -> Path:
    (found,) = [d for d in out.iterdir() if d.is_dir()]
    return found


def project_containers(compose: list[str], project: str) -> list[dict[str, object]]:
    done = subprocess.run([*compose, "-p", project, "ps", "--all", "--format", "json"], capture_output=True,
                          text=True, timeout=60, check=False)
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip().startswith("{")]


@pytest.fixture
def cpu_stack(compose: list[str]) -> Iterator[str]:
    model = smollm2_gguf()
    port = free_port()
    env = {**os.environ, "BAKEOFF_MODELS": str(model.parent), "LLAMA_MODEL": model.name,
           "BAKEOFF_PORT": str(port), "LLAMA_THREADS": "2", "LLAMA_CTX": "2048"}
    base = [*compose, "-p", "bakeoff-e2e-cpu", "-f", str(ROOT / "compose/llamacpp-cpu/compose.yaml")]
    try:
        up = subprocess.run([*base, "up", "-d", "--wait", "--wait-timeout", "600"], capture_output=True, text=True,
                            env=env, timeout=1800, check=False)
        assert up.returncode == 0, up.stderr[-3000:]
        yield f"http://127.0.0.1:{port}"
    finally:
        subprocess.run([*base, "down", "--remove-orphans"], capture_output=True, env=env, timeout=300, check=False)


def test_cpu_stack_serves_a_url_arm(cpu_stack: str, tmp_path: Path, bakeoff_cli: str) -> None:
    cfg = tmp_path / "attach.yaml"
    cfg.write_text(f"arms:\n  - {{name: stack, engine: llamacpp, url: '{cpu_stack}'}}\n"
                   "workload: {prompts: [prose], max_tokens: 32, reps: 2, warmup: 1}\n")
    done = subprocess.run([bakeoff_cli, "run", str(cfg), "--out", str(tmp_path / "runs")], capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    samples = read_samples(run_dir(tmp_path / "runs"))
    assert len(samples) == 2 and all(s.status == "ok" and s.completion_tokens == 32 for s in samples)


def test_launch_compose_arm_is_measured_to_healthy_and_brought_down(compose: list[str], tmp_path: Path,
                                                                   bakeoff_cli: str) -> None:
    cfg = tmp_path / "compose.yaml"
    cfg.write_text("name: e2e-compose\narms:\n"
                   "  - {name: cpu-compose, engine: llamacpp, model: smollm2, launch: compose,\n"
                   "     settings: {ctx: 2048, threads: 2}, speculative: {method: ngram, variant: mod}}\n"
                   "workload: {prompts: [code_python], max_tokens: 64, reps: 2, warmup: 1}\n")
    done = subprocess.run([bakeoff_cli, "run", str(cfg), "--out", str(tmp_path / "runs")], capture_output=True,
                          text=True, timeout=1800, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    run = run_dir(tmp_path / "runs")
    record = json.loads((run / "run.json").read_text())["arm_records"]["cpu-compose"][0]
    assert record["status"] == "ok", record
    assert record["boot_s"] > 0
    assert (run / "arms" / "cpu-compose" / "compose.yaml").is_file()
    samples = read_samples(run)
    assert len(samples) == 2 and all(s.status == "ok" and s.completion_tokens == 64 for s in samples)
    assert project_containers(compose, project_name(run.name, "cpu-compose")) == [], "the project was not brought down"
