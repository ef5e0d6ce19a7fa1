"""Host facts for run.json, and the noise guard: CPU used by processes that are not ours.

On a 2-core machine another process's load cut llama.cpp decode from ~110 to under 15 tok/s, so every
sample records the average number of cores used by *foreign* processes while it ran.
"""

from __future__ import annotations

import hashlib
import os
import platform
import time
from pathlib import Path

__all__ = ["host_info", "CpuMeter"]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


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
        "host_id": hashlib.sha256(platform.node().encode()).hexdigest()[:12],
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model,
        "cpu_count": os.cpu_count(),
        "gpus": _gpus(),
    }
    try:
        info["mem_total_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        pass
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


def _busy_ticks() -> int:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(v) for v in fields]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return sum(values[:8]) - idle


def _group_ticks(pgids: set[int]) -> int:
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2:].split()
        pid, pgid = int(entry.name), int(rest[2])
        if pgid in pgids or pid == os.getpid():
            total += int(rest[11]) + int(rest[12])  # utime + stime
    return total


class CpuMeter:
    """Measures foreign CPU use between :meth:`start` and :meth:`stop` (Linux /proc; None elsewhere)."""

    def __init__(self, own_pgids: set[int]) -> None:
        self.own_pgids = own_pgids | {os.getpgid(0)}
        self.enabled = Path("/proc/stat").exists()

    def start(self) -> None:
        if self.enabled:
            self._t0, self._busy0, self._own0 = time.monotonic(), _busy_ticks(), _group_ticks(self.own_pgids)

    def stop(self) -> float | None:
        """Average cores used by other processes since start()."""
        if not self.enabled:
            return None
        wall = time.monotonic() - self._t0
        if wall <= 0:
            return None
        foreign = (_busy_ticks() - self._busy0) - (_group_ticks(self.own_pgids) - self._own0)
        return max(0.0, foreign / _TICK / wall)
