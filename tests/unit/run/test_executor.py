"""Executors and placement without Ray: the local run imports nothing from Ray, --executor ray says how to
install it, hosts: refuses cross-host comparisons, the engine never inherits RAY_ADDRESS, and one host's
block (core/run/block.py, what a Ray task runs) streams back every sample, record and file of its arms."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from bakeoff.core.common.errors import ConfigError
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.config.placement import blocks_of
from bakeoff.core.engine.contract import LaunchSpec
from bakeoff.core.engine.launcher import Engine
from bakeoff.core.results.sample import Sample
from bakeoff.core.run.block import run_block
from bakeoff.core.run.executor import LocalExecutor, executor_for
from bakeoff.engines.sim import SimAdapter

SIM = """\
name: t
arms:
  - {name: base, engine: sim, model: sim}
  - {name: fast, engine: sim, model: sim, options: {tokens_per_event: 2}}
  - {name: other, engine: sim, model: sim, options: {tokens_per_event: 3}}
workload: {prompts: [prose], reps: 1, max_tokens: 8, warmup: 0, gates: []}
"""

HOSTS = SIM + """\
hosts:
  - {name: a, resources: {box-a: 1}, arms: [base, fast]}
  - {name: b, resources: {box-b: 1}, arms: [base, other]}
"""


def _run_cli(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env={**os.environ, "COLUMNS": "200",
                                             "BAKEOFF_RUNNING_DIR": str(tmp_path / "running")})


def test_a_local_run_imports_nothing_from_ray(tmp_path: Path) -> None:
    (tmp_path / "sim.yaml").write_text(SIM)
    proc = _run_cli(
        "import sys\n"
        "from bakeoff.core.cli import main\n"
        "sys.argv = ['bakeoff', 'run', 'sim.yaml', '--out', 'runs']\n"
        "try:\n"
        "    main()\n"
        "finally:\n"
        "    print('RAY-MODULES', sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n",
        tmp_path)
    assert "RAY-MODULES []" in proc.stdout, proc.stdout + proc.stderr
    [samples] = (tmp_path / "runs").glob("*/samples.jsonl")  # the run really ran: one sample per arm
    assert len(samples.read_text().splitlines()) == 3, proc.stdout


def test_executor_ray_without_ray_installed_says_how_to_install_it(tmp_path: Path) -> None:
    (tmp_path / "h.yaml").write_text(HOSTS)
    proc = _run_cli(
        "import sys\n"
        "sys.modules['ray'] = None  # as if Ray were not installed\n"
        "from bakeoff.core.cli import main\n"
        "sys.argv = ['bakeoff', 'run', 'h.yaml', '--executor', 'ray', '--out', 'runs']\n"
        "main()\n", tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "pip install -e '.[ray]' in the bakeoff checkout" in proc.stderr  # the CLI boundary's one line
    assert not (tmp_path / "runs").exists()  # refused before a run directory is made


def test_hosts_need_the_ray_executor_and_local_is_the_default() -> None:
    assert isinstance(executor_for(parse_bakeoff(SIM)), LocalExecutor)
    with pytest.raises(ConfigError, match="--executor ray"):
        executor_for(parse_bakeoff(HOSTS))
    with pytest.raises(ConfigError, match="--address"):
        executor_for(parse_bakeoff(SIM), address="127.0.0.1:6379")
    with pytest.raises(ConfigError, match="use local or ray"):
        executor_for(parse_bakeoff(SIM), kind="slurm")


@pytest.mark.parametrize("hosts, message", [
    ("[{name: a, resources: {x: 1}, arms: [fast]}]", "runs 'fast' without the baseline 'base'"),
    ("[{name: a, resources: {x: 1}, arms: [base, nope]}]", "names 'nope', which is not an arm"),
    ("[{name: a, resources: {x: 1}, arms: [base, fast]}]", "arm 'other' runs on no host"),
    ("[{name: a, resources: {x: 1}}, {name: a, resources: {y: 1}}]", "two hosts are named 'a'"),
    ("[{name: a}]", "give resources: or node_ip:"),
    ("[{name: 'a/b', resources: {x: 1}}]", "hosts[0].name"),
])
def test_placement_that_would_compare_across_hosts_or_drop_an_arm_is_refused(hosts: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_bakeoff(SIM + f"hosts: {hosts}\n")


def test_an_arm_on_several_hosts_is_stored_once_per_host() -> None:
    config = parse_bakeoff(HOSTS)
    assert config.hosts is not None
    blocks = blocks_of(config.hosts, [a.name for a in config.arms], config.baseline_arm)
    assert [(b.host.name, b.stored, b.baseline) for b in blocks] == [
        ("a", {"base": "base@a", "fast": "fast"}, "base@a"),
        ("b", {"base": "base@b", "other": "other"}, "base@b")]


def test_an_engine_never_inherits_ray_address(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    monkeypatch.setenv("BAKEOFF_RUNNING_DIR", str(tmp_path / "running"))
    out = tmp_path / "env.txt"
    spec = LaunchSpec(argv=["/bin/sh", "-c", f"env > {out}; sleep 30"], env={})
    engine = Engine(SimAdapter(), spec, "http://127.0.0.1:9", tmp_path / "engine.log")
    engine.start()
    try:
        for _ in range(100):
            if out.exists() and out.read_text().strip():
                break
            time.sleep(0.05)
    finally:
        engine.stop()
    env = out.read_text()
    assert "PATH=" in env and "RAY_ADDRESS" not in env


def _messages(payload: dict[str, Any]) -> list[tuple[Any, ...]]:
    return list(run_block(payload))


def test_a_block_streams_its_samples_records_and_files_and_skips_what_is_done(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BAKEOFF_RUNNING_DIR", str(tmp_path / "running"))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    config = parse_bakeoff(HOSTS)
    orders = [["other", "fast", "base"]]
    payload = {"config": config.model_dump(mode="json"), "host": "b", "orders": orders, "run_id": "r1",
               "meta": {"name": "t"}, "done": [["base@b", "prose", "greedy", 0, 0]]}
    messages = _messages(payload)
    kinds = [m[0] for m in messages]
    assert kinds[-1] == "end" and messages[-1][1] is None
    assert kinds.index("host") < kinds.index("sample")
    samples = [Sample.model_validate_json(m[1]) for m in messages if m[0] == "sample"]
    assert [(s.arm, s.run_id, s.pass_index) for s in samples] == [("other", "r1", 0)]  # base@b was done
    records = {m[1]: m[2] for m in messages if m[0] == "record"}
    assert records["other"]["status"] == "ok" and records["base@b"]["status"] == "skipped (already complete)"
    files = {m[1] for m in messages if m[0] == "file"}
    assert "arms/other/engine-pass0.log" in files and "arms/other/argv.txt" in files
    assert not list(scratch.iterdir())  # the block's scratch directory is gone: everything went home
