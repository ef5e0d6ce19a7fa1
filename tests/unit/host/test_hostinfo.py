"""The noise guard on a fake /proc: which CPU is the engine's own, also when the engine runs in a container.

AUDIT M3: for ``launch: compose`` and ``launch: docker`` the engine's processes are not in bakeoff's process
groups, so its own CPU was counted as foreign load and every sample flagged ``foreign-load``.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from bakeoff.core.engine import launcher
from bakeoff.core.engine.contract import LaunchSpec
from bakeoff.core.host import hostinfo
from bakeoff.core.host.hostinfo import CpuMeter, docker_container_ids
from bakeoff.engines.sim import SimAdapter

CID = "f00dfeedcafe" + "0" * 52  # a container id as Docker prints it (64 hex)


class FakeProc:
    """A /proc with a cpu line and processes (pid -> pgid, ticks, cgroup path); ticks can be advanced."""

    def __init__(self, root: Path) -> None:
        self.root, self.busy = root, 0
        self.procs: dict[int, list[Any]] = {}
        root.mkdir()
        self.write()

    def add(self, pid: int, pgid: int, ticks: int, cgroup: str = "0::/user.slice/session-1.scope") -> None:
        self.procs[pid] = [pgid, ticks, cgroup, 0]
        self.busy += ticks
        self.write()

    def run(self, pid: int, ticks: int) -> None:
        self.procs[pid][1] += ticks
        self.busy += ticks
        self.write()

    def reap(self, child: int, parent: int) -> None:
        """The child ends and its parent waits for it: gone from /proc, its ticks in the parent's cutime."""
        self.procs[parent][3] += self.procs.pop(child)[1]
        shutil.rmtree(self.root / str(child))
        self.write()

    def write(self) -> None:
        (self.root / "stat").write_text(f"cpu  {self.busy} 0 0 100000 0 0 0 0 0 0\n")
        for pid, (pgid, ticks, cgroup, reaped) in self.procs.items():
            d = self.root / str(pid)
            d.mkdir(exist_ok=True)
            # state ppid pgrp … utime stime cutime cstime
            fields = ["S", "1", str(pgid), *["0"] * 8, str(ticks), "0", str(reaped), "0"]
            (d / "stat").write_text(f"{pid} (some (odd) name) {' '.join(fields)}\n")
            (d / "cgroup").write_text(cgroup + "\n")


@pytest.fixture
def proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeProc:
    clock = iter([100.0, 101.0])  # start() and stop(): one second apart
    # the meter's clock only: a patched time.monotonic would also feed the event loop of a server thread that
    # another test left running (the session's hostile server), which then takes these two readings
    monkeypatch.setattr(hostinfo, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    fake = FakeProc(tmp_path / "proc")
    fake.add(4000, 4000, 10)  # the engine bakeoff launched, its own process group
    fake.add(5000, 5000, 10, f"0::/system.slice/docker-{CID}.scope")  # the engine inside a container
    fake.add(6000, 6000, 10)  # somebody else
    return fake


def _measure(proc: FakeProc, meter: CpuMeter) -> float | None:
    meter.start()
    proc.run(4000, 100)
    proc.run(5000, 200)
    proc.run(6000, 50)
    return meter.stop()


def test_container_processes_are_the_engines_own(proc: FakeProc) -> None:
    foreign = _measure(proc, CpuMeter({4000}, containers=[CID], proc=proc.root))
    assert foreign == pytest.approx(50 / hostinfo._TICK)


def test_cgroup_v1_paths_are_recognised_too(tmp_path: Path, proc: FakeProc) -> None:
    proc.procs[5000][2] = f"12:cpu,cpuacct:/docker/{CID}"
    proc.write()
    assert _measure(proc, CpuMeter({4000}, containers=[CID], proc=proc.root)) == pytest.approx(50 / hostinfo._TICK)


def test_without_the_container_its_cpu_would_count_as_foreign(proc: FakeProc) -> None:
    foreign = _measure(proc, CpuMeter({4000}, proc=proc.root))
    assert foreign == pytest.approx(250 / hostinfo._TICK)  # what every compose/docker sample got before


def test_a_child_that_ends_inside_the_window_stays_ours(proc: FakeProc) -> None:
    """llama-bench run to its end by bakeoff (--llama-bench): gone from /proc at stop(), its time is in its
    parent's cutime, so it is not foreign load (it read as one whole core before)."""
    meter = CpuMeter({4000}, proc=proc.root)
    meter.start()
    proc.add(4100, 4000, 0)  # the tool, in the engine's (here: bakeoff's) process group
    proc.run(4100, 100)
    proc.reap(4100, 4000)
    proc.run(6000, 5)
    assert meter.stop() == pytest.approx(5 / hostinfo._TICK)


def test_a_container_whose_processes_cannot_be_seen_gives_no_figure(proc: FakeProc) -> None:
    # Docker Desktop (a VM), or ids that could not be read: no foreign-load figure rather than a wrong one
    assert _measure(proc, CpuMeter({4000}, containers=["abc123" * 8], proc=proc.root)) is None
    assert _measure(proc, CpuMeter({4000}, containers=[], proc=proc.root)) is None


def test_docker_run_containers_are_found_by_name(tmp_path: Path) -> None:
    docker = tmp_path / "docker"
    docker.write_text(f"#!{sys.executable}\nimport sys\n"
                      f"assert sys.argv[1:4] == ['inspect', '--format', '{{{{.Id}}}}']\nprint('{CID}')\n")
    docker.chmod(docker.stat().st_mode | stat.S_IEXEC)
    assert docker_container_ids(["bakeoff-a-8000"], docker=str(docker)) == [CID]
    assert docker_container_ids(["x"], docker=str(tmp_path / "missing")) == []


def test_the_protocol_meters_a_docker_arm_by_its_container(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(launcher, "docker_container_ids", lambda names: [CID] if names == ["bakeoff-a-1"] else [])

    def engine(container: str | None) -> launcher.Engine:
        spec = LaunchSpec(argv=["engine"], container=container)
        eng = launcher.Engine(SimAdapter(), spec, "http://127.0.0.1:9", tmp_path / "engine.log")
        eng.proc = cast(Any, SimpleNamespace(pid=os.getpid()))  # this test's process group stands in for it
        return eng

    meter = engine("bakeoff-a-1").noise_guard()
    assert meter.containers == (CID,) and meter.in_containers
    assert not engine(None).noise_guard().in_containers
