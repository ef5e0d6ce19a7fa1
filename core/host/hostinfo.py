"""Host facts for run.json, and the noise guard: CPU used by processes that are not ours.

On a 2-core machine another process's load cut llama.cpp decode from ~110 to under 15 tok/s, so every
sample records the average number of cores used by *foreign* processes while it ran.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import subprocess
import time
from pathlib import Path

from .rig import rig_report

__all__ = ["host_info", "host_id", "CpuMeter", "usable_cores", "FOREIGN_LOAD_FLOOR", "FOREIGN_LOAD_SHARE",
           "docker_container_ids"]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def host_id() -> str:
    """This machine, by a hash of its host name (the name itself is not recorded)."""
    return hashlib.sha256(platform.node().encode()).hexdigest()[:12]


def host_info() -> dict[str, object]:
    cpu_model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, object] = {
        "host_id": host_id(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model,
        "cpu_count": os.cpu_count(),
        "gpus": _gpus(),
    }
    with contextlib.suppress(ValueError, OSError):
        info["mem_total_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    info["rig"] = rig_report()  # power limit vs default, PCIe link, governor: what a bundle shows (core/host/rig.py)
    return info


def _gpus() -> list[dict[str, object]]:
    try:
        import pynvml  # nvidia-ml-py, optional
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver: a CPU machine
        return []
    gpus = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        gpus.append({"name": pynvml.nvmlDeviceGetName(h), "memory_mib": pynvml.nvmlDeviceGetMemoryInfo(h).total >> 20})
    pynvml.nvmlShutdown()
    return gpus


def _busy_ticks(proc: Path) -> int:
    fields = (proc / "stat").read_text().splitlines()[0].split()[1:]
    values = [int(v) for v in fields]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return sum(values[:8]) - idle


def _own_ticks(proc: Path, pgids: set[int], containers: tuple[str, ...]) -> tuple[int, int]:
    """CPU ticks of our processes (bakeoff, the engine's process groups, the processes in the engine's
    containers, found by the container id in their cgroup path) and how many container processes there were."""
    total = in_containers = 0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            rest = stat[stat.rfind(")") + 2:].split()
            pid, pgid = int(entry.name), int(rest[2])
            ours = pgid in pgids or pid == os.getpid()
            if not ours and containers:
                cgroup = (entry / "cgroup").read_text()
                ours = any(cid in cgroup for cid in containers)
                in_containers += ours
            if ours:
                # utime + stime, and cutime + cstime: a child that ended and was waited for (a short tool such
                # as llama-bench, run to its end inside the window) is gone from /proc but its time is its
                # parent's, so it never reads as foreign load
                total += sum(int(x) for x in rest[11:15])
        except (OSError, ValueError, IndexError):
            continue  # the process ended while we read it
    return total, in_containers


def docker_container_ids(names: list[str], docker: str = "docker") -> list[str]:
    """Full ids of running containers by name (``docker inspect``); [] when docker cannot say."""
    if not names:
        return []
    try:
        done = subprocess.run([docker, "inspect", "--format", "{{.Id}}", *names], capture_output=True,
                              text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in done.stdout.splitlines() if len(line.strip()) >= 12]


FOREIGN_LOAD_FLOOR = 0.25  # cores: below this, foreign load is never a flag (background daemons)
FOREIGN_LOAD_SHARE = 0.25  # of the cores the engine and bakeoff leave free


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, e.g. a container's cpuset), else the host's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class CpuMeter:
    """Measures foreign CPU use between :meth:`start` and :meth:`stop` (Linux /proc; None elsewhere).

    Ours is bakeoff's own process group, the engine's process groups and, for an engine in containers
    (``launch: docker`` or ``compose``), every process whose cgroup path names one of ``containers``.
    Limits: the container's processes must be visible in this machine's ``/proc`` with the container id in
    their cgroup (Docker and Podman on Linux, cgroup v1 or v2). Docker Desktop runs containers in a VM:
    their CPU is then invisible here, counted neither as ours nor as foreign. When containers are named
    but none of their processes can be found, the engine's CPU cannot be told apart from foreign load,
    so :meth:`stop` returns None (no figure) instead of calling the engine foreign.
    """

    def __init__(self, own_pgids: set[int], containers: list[str] | None = None,
                 proc: Path = Path("/proc")) -> None:
        """:param containers: ids of the containers the engine runs in; None when it runs in none, [] when it
            does but their ids could not be found."""
        self.own_pgids = own_pgids | {os.getpgid(0)}
        self.in_containers = containers is not None
        self.containers = tuple(c for c in containers or () if len(c) >= 12)  # full or short ids: in cgroup paths
        self.proc = proc
        self.enabled = (proc / "stat").exists()
        self.container_processes: int | None = None  # found at the last start(); None before
        self.own_cores = 0.0  # average cores bakeoff and the engine used during the last start()..stop()

    def start(self) -> None:
        if self.enabled:
            self._t0, self._busy0 = time.monotonic(), _busy_ticks(self.proc)
            self._own0, self.container_processes = _own_ticks(self.proc, self.own_pgids, self.containers)

    def stop(self) -> float | None:
        """Average cores used by other processes since start()."""
        if not self.enabled:
            return None
        if self.in_containers and not self.container_processes:
            return None  # the engine's CPU is somewhere we cannot see: no foreign-load figure
        wall = time.monotonic() - self._t0
        if wall <= 0:
            return None
        own, _ = _own_ticks(self.proc, self.own_pgids, self.containers)
        self.own_cores = (own - self._own0) / _TICK / wall
        foreign = (_busy_ticks(self.proc) - self._busy0) - (own - self._own0)
        return max(0.0, foreign / _TICK / wall)

    def foreign_limit(self) -> float:
        """Foreign cores above which the last sample counts as disturbed: a share of the cores the engine and
        bakeoff left free (at least FOREIGN_LOAD_FLOOR). One busy core next to an engine that uses 2 of 16
        disturbs nothing; next to one that uses every core, a quarter of one does."""
        free = max(0.0, usable_cores() - self.own_cores)
        return max(FOREIGN_LOAD_FLOOR, FOREIGN_LOAD_SHARE * free)
