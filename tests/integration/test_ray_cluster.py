"""--executor ray on a real multi-node Ray cluster on this machine (ray.cluster_utils.Cluster: a head and two
nodes offering the custom resources box-a and box-b) with real llama-server arms (SmolLM2, 16 tokens).

One run split over two hosts must report like a local run of the same arms; a host killed mid-run must leave
its finished samples and no engine behind, and --resume must finish its block without a duplicate.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from bakeoff.core.results.db import point_of
from bakeoff.core.results.store import RunDir, read_samples

ray_cluster_utils = pytest.importorskip("ray.cluster_utils", reason="Ray is not installed: pip install -e '.[ray]'")

pytestmark = [pytest.mark.integration, pytest.mark.shared_processes("ray::")]

ARMS = """\
arms:
  - {name: spec-off, engine: llamacpp, model: smollm2, settings: {ctx: 1024, threads: 1}}
  - {name: ngram, engine: llamacpp, model: smollm2, speculative: {method: ngram, variant: mod},
     settings: {ctx: 1024, threads: 1}}
  - {name: draft, engine: llamacpp, model: smollm2, speculative: {method: draft, draft_model: smollm2, n_max: 3},
     settings: {ctx: 1024, threads: 1}}
"""
SPLIT_HOSTS = """\
hosts:
  - {name: a, resources: {box-a: 1}, arms: [spec-off, ngram]}
  - {name: b, resources: {box-b: 1}, arms: [spec-off, draft]}
"""
LOOPBACK = "127.0.0.1"  # the house rule: no test listens on the machine's interfaces
WORKLOAD = "workload: {prompts: [code_python], max_tokens: 16, reps: 2, warmup: 1, warmup_settle: null, gates: []}\n"


class LocalCluster:
    """A Ray head (no host resource) and one node per host, each with one CPU, all on loopback; always shut
    down."""

    def __init__(self, running: Path) -> None:
        self.running = running  # BAKEOFF_RUNNING_DIR of every process the cluster starts
        self.cluster = ray_cluster_utils.Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "include_dashboard": False, "node_ip_address": LOOPBACK})
        self.nodes: dict[str, Any] = {}

    def add(self, host: str) -> None:
        self.nodes[host] = self.cluster.add_node(num_cpus=1, resources={f"box-{host}": 1},
                                                 node_ip_address=LOOPBACK)
        self.cluster.wait_for_nodes()

    @property
    def address(self) -> str:
        return str(self.cluster.address)


def _is_loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    mapped = getattr(addr, "ipv4_mapped", None)  # Ray's gRPC servers listen on ::ffff:127.0.0.1
    return (mapped or addr).is_loopback


def _listening_off_loopback() -> list[str]:
    """TCP sockets that this test's processes (the Ray nodes, their workers, bakeoff and its engines) listen on
    at an address other than loopback."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            for conn in proc.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN and not _is_loopback(conn.laddr.ip):
                    found.append(f"{proc.name()} (pid {proc.pid}) on {conn.laddr.ip}:{conn.laddr.port}")
    return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One cluster for the module (starting and stopping one is about a minute on 2 cores). The workers Ray starts
    during a run stay for the next test (this module's shared_processes marker); engines do not, and the test that
    kills node b adds it back, and runs last."""
    running = tmp_path_factory.mktemp("ray-running")
    with pytest.MonkeyPatch.context() as mp:
        # Ray's processes inherit this: the engines they start are recorded here, not in the shared cache.
        mp.setenv("BAKEOFF_RUNNING_DIR", str(running))
        mp.delenv("RAY_ADDRESS", raising=False)
        local = LocalCluster(running)
        try:
            local.add("a")
            local.add("b")
            yield local
        finally:
            local.cluster.shutdown()  # no raylet is left behind


def _bakeoff(bakeoff_cli: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([bakeoff_cli, "run", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200"})


def _only_run(out: Path) -> Path:
    [run] = [p for p in out.iterdir() if p.is_dir()]
    return run


def _shape(summary: dict[str, Any]) -> dict[str, Any]:
    """summary.json's shape: its sections, the fields of each arm, comparison and engine entry."""
    def fields(items: Any) -> list[str]:
        return sorted({k for item in items for k in item})

    return {"sections": sorted(summary), "arms": fields(summary["arms"]),
            "comparisons": fields(summary["comparisons"]), "engines": fields(summary["engines"].values())}


def test_a_run_split_over_two_hosts_reports_like_a_local_run(cluster: LocalCluster, llama_server: Path,
                                                             smollm2: Path, tmp_path: Path,
                                                             bakeoff_cli: str) -> None:
    (tmp_path / "local.yaml").write_text("name: split\n" + ARMS + WORKLOAD)
    (tmp_path / "ray.yaml").write_text("name: split\n" + ARMS + WORKLOAD + SPLIT_HOSTS)
    local = _bakeoff(bakeoff_cli, str(tmp_path / "local.yaml"), "--out", str(tmp_path / "local"))
    assert local.returncode == 0, local.stdout + local.stderr
    proc = _bakeoff(bakeoff_cli, str(tmp_path / "ray.yaml"), "--executor", "ray", "--address", cluster.address,
                    "--out", str(tmp_path / "ray"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _listening_off_loopback() == []  # the nodes and their workers, after a run
    run = _only_run(tmp_path / "ray")
    samples = read_samples(run)
    assert Counter(s.arm for s in samples) == {"spec-off@a": 2, "ngram": 2, "spec-off@b": 2, "draft": 2}
    assert all(s.status == "ok" and s.completion_tokens == 16 for s in samples), [s.error for s in samples]

    record = RunDir.open(run).read_record()
    assert record.executor == "ray" and record.placement is not None
    assert record.placement.baselines == {"a": "spec-off@a", "b": "spec-off@b"}
    assert set(record.hosts) == {"a", "b"}
    for name, host in record.hosts.items():
        assert host.host.get("cpu_model") is not None and host.ray_node_id and host.lost is None
        assert host.engines and all(host.engines.values()), (name, host.engines)  # the engine build per arm
    assert {(a, r[-1].host) for a, r in RunDir.open(run).arm_records().items()} == {
        ("spec-off@a", "a"), ("ngram", "a"), ("spec-off@b", "b"), ("draft", "b")}
    assert (run / "arms" / "draft" / "engine-pass0.log").stat().st_size > 0  # engine logs came home

    ray_summary = json.loads((run / "report" / "summary.json").read_text())
    local_summary = json.loads((_only_run(tmp_path / "local") / "report" / "summary.json").read_text())
    assert _shape(ray_summary) == _shape(local_summary)
    assert set(ray_summary["engines"]) == {"spec-off@a", "ngram", "spec-off@b", "draft"}
    pairs = {(c["arm"], c["reference"]) for c in ray_summary["comparisons"]}
    assert pairs == {("ngram", "spec-off@a"), ("draft", "spec-off@b")}  # never across hosts
    assert len(ray_summary["comparisons"]) == len(local_summary["comparisons"])


def _engines_of(running: Path, host: str) -> list[psutil.Process]:
    """The engine processes a block on ``host`` recorded (launcher records; scratch dir bakeoff-HOST-*)."""
    out = []
    for path in running.glob("*.json") if running.is_dir() else []:
        rec = json.loads(path.read_text())
        if f"/bakeoff-{host}-" in rec.get("arm_dir", ""):
            with contextlib.suppress(psutil.NoSuchProcess):
                out.append(psutil.Process(int(rec["pid"])))
    return out


def test_a_node_killed_mid_run_keeps_its_samples_leaves_no_engine_and_resume_completes_it(
        cluster: LocalCluster, llama_server: Path, smollm2: Path, tmp_path: Path, bakeoff_cli: str) -> None:
    file = tmp_path / "ray.yaml"
    file.write_text("name: kill\n" + ARMS.split("  - {name: draft")[0]
                    + "workload: {prompts: [code_python, prose], max_tokens: 16, reps: 3, warmup: 1, "
                    + "warmup_settle: null, gates: []}\n"
                    + "hosts:\n  - {name: a, resources: {box-a: 1}}\n  - {name: b, resources: {box-b: 1}}\n")
    out = tmp_path / "runs"
    proc = subprocess.Popen([bakeoff_cli, "run", str(file), "--executor", "ray", "--address", cluster.address,
                             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "COLUMNS": "200"})
    try:
        engines: list[psutil.Process] = []
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            lines = [json.loads(x) for p in out.glob("*/samples.jsonl") for x in p.read_text().splitlines()]
            engines = _engines_of(cluster.running, "b")
            if any(x["arm"].endswith("@b") for x in lines) and engines:
                break
            time.sleep(0.5)
        assert proc.poll() is None and engines, "host b stored no sample while its engine ran"
        assert _listening_off_loopback() == []  # mid-run: bakeoff (the Ray driver), the nodes, the engines
        cluster.cluster.remove_node(cluster.nodes.pop("b"), allow_graceful=False)  # the node dies
        output, _ = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 4, output  # partial: host b's block stopped short
    assert "host b" in output and "--resume" in output

    _, alive = psutil.wait_procs(engines, timeout=60)
    assert not alive, f"engine(s) of the lost node still running: {[p.pid for p in alive]}"
    run = _only_run(out)
    before = read_samples(run)
    on_b = [s for s in before if s.arm.endswith("@b")]
    assert 1 <= len(on_b) < 12, len(on_b)  # its finished samples are stored, the rest is missing
    lines_before = set((run / "samples.jsonl").read_text().splitlines())
    assert RunDir.open(run).read_record().hosts["b"].lost

    cluster.add("b")  # the host is back (a new node offering box-b)
    try:
        resumed = _bakeoff(bakeoff_cli, "--resume", str(run), "--executor", "ray", "--address", cluster.address)
    finally:  # the node this test started goes with it; the module's cluster keeps the ones it started
        cluster.cluster.remove_node(cluster.nodes.pop("b"))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    after = read_samples(run)
    assert len(after) == 24  # 2 hosts x 2 arms x 2 prompts x 3 reps
    points = Counter(point_of(s) for s in after)
    assert max(points.values()) == 1  # no point measured twice
    assert lines_before <= set((run / "samples.jsonl").read_text().splitlines())  # nothing lost or rewritten
    print(f"node kill: {len(before)} samples stored ({len(on_b)} of host b) before the kill, "
          f"{len(after)} after --resume")
