"""The rig report: the machine facts that move a speed number, taken when a run starts.

Two people's rows differ by more than their configuration: a power cap 100 W under the card's default, a GPU
on a x4 PCIe link, a CPU governor left on ``powersave``. The rig report records, as far as NVML, psutil, /proc
and /sys can tell: every GPU (name, driver, CUDA, VBIOS, power limit against its default, PCIe link generation
and width against their maximum, persistence mode, memory), the CPU (model, logical, physical and usable
cores, maximum frequency, governor, NUMA nodes), memory and swap, and the operating system. A field that
cannot be read is not guessed: it is left out of its section and ``absent`` says why, under its dotted name.

run.json holds it under ``host.rig`` (core/host/hostinfo.py), so a bundle describes the machine that ran the
run, not the one that packed it.
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil

from .telemetry import GpuMonitor

__all__ = ["RIG_SCHEMA", "rig_report", "hardware_key", "hardware_differences"]

RIG_SCHEMA = 1
GPU_FIELDS = ("name", "driver", "cuda", "vbios", "memory_mib", "power_limit_w", "power_limit_default_w",
              "pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max", "persistence_mode")


def _cpu_model(proc: Path) -> str | None:
    try:
        for line in (proc / "cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def _cpu(proc: Path, sys_cpu: Path, absent: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    model = _cpu_model(proc)
    if model:
        out["model"] = model
    else:
        absent["cpu.model"] = f"no 'model name' line in {proc / 'cpuinfo'} (not Linux on x86, or /proc not mounted)"
    out["logical_cores"] = os.cpu_count()
    physical = psutil.cpu_count(logical=False)
    if physical:
        out["physical_cores"] = physical
    else:
        absent["cpu.physical_cores"] = "psutil cannot count physical cores here"
    with contextlib.suppress(AttributeError, OSError):
        out["usable_cores"] = len(os.sched_getaffinity(0))
    freq = None
    with contextlib.suppress(Exception):  # psutil raises a variety of errors where cpufreq is absent
        freq = psutil.cpu_freq()
    if freq is not None and freq.max:
        out["freq_max_mhz"] = round(freq.max)
    else:
        absent["cpu.freq_max_mhz"] = "no CPU frequency interface (a VM or container without cpufreq)"
    governor = sys_cpu / "cpu0" / "cpufreq" / "scaling_governor"
    try:
        out["governor"] = governor.read_text().strip()
    except OSError:
        absent["cpu.governor"] = f"{governor} is not readable (no cpufreq driver: a VM, or not Linux)"
    nodes = sorted(sys_cpu.parent.glob("node/node[0-9]*"))
    if nodes:
        out["numa_nodes"] = len(nodes)
    else:
        absent["cpu.numa_nodes"] = f"no {sys_cpu.parent / 'node'} entries"
    return out


def _nvml(absent: dict[str, str]) -> ModuleType | None:
    """pynvml started, or None with the reason in ``absent['gpus']``."""
    try:
        import pynvml  # nvidia-ml-py, the optional extra bakeoff[gpu]
    except ImportError:
        absent["gpus"] = "nvidia-ml-py is not installed (pip install -e '.[gpu]'), so NVML was not asked"
        return None
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        absent["gpus"] = f"NVML did not start ({type(exc).__name__}: {exc}): no NVIDIA driver on this machine"
        return None
    return pynvml  # type: ignore[no-any-return]


def _gpus(nvml: ModuleType | None, absent: dict[str, str]) -> list[dict[str, Any]]:
    module = nvml if nvml is not None else _nvml(absent)
    if module is None:
        return []
    try:
        count = int(module.nvmlDeviceGetCount())
    except Exception as exc:
        absent["gpus"] = f"NVML could not count GPUs ({type(exc).__name__}: {exc})"
        return []
    if count == 0:
        absent["gpus"] = "NVML sees no GPU"
        return []
    out = []
    for gpu in GpuMonitor(module, range(count)).inventory():
        row = {"index": gpu["index"]}
        for key in GPU_FIELDS:
            if gpu.get(key) is not None:
                row[key] = gpu[key]
            else:
                absent[f"gpus[{gpu['index']}].{key}"] = "NVML did not report it (not supported by this GPU or driver)"
        limit, default = row.get("power_limit_w"), row.get("power_limit_default_w")
        if limit is not None and default is not None:
            row["power_limit_vs_default"] = round(limit / default, 3) if default else None
        out.append(row)
    return out


def rig_report(*, nvml: ModuleType | None = None, proc: Path = Path("/proc"),
               sys_cpu: Path = Path("/sys/devices/system/cpu")) -> dict[str, Any]:
    """The rig report of this machine (a fraction of a second; nothing is changed).

    :param nvml: an NVML module to use instead of ``pynvml`` (tests pass a fake).
    """
    absent: dict[str, str] = {}
    memory: dict[str, Any] = {}
    with contextlib.suppress(Exception):
        memory["total_gib"] = round(psutil.virtual_memory().total / 2**30, 1)
        memory["swap_gib"] = round(psutil.swap_memory().total / 2**30, 1)
    if "total_gib" not in memory:
        absent["memory.total_gib"] = "psutil cannot read memory here"
    return {
        "schema": RIG_SCHEMA,
        "taken_at": time.time(),
        "gpus": _gpus(nvml, absent),
        "cpu": _cpu(proc, sys_cpu, absent),
        "memory": memory,
        "os": {"system": platform.system(), "kernel": platform.release(), "platform": platform.platform()},
        "absent": absent,
    }


def hardware_key(host: dict[str, Any], gpus: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """What makes two machines the same hardware for a speed comparison: CPU model and cores, and the GPUs by
    name (the run's own, else the rig report's). Memory size, kernel and driver are shown, not compared."""
    recorded = host.get("rig")
    rig: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    cpu: dict[str, Any] = rig.get("cpu") or {}
    names = [str(g.get("name")) for g in (gpus or rig.get("gpus") or host.get("gpus") or [])
             if isinstance(g, dict) and g.get("name")]
    return {"cpu_model": host.get("cpu_model") or cpu.get("model"),
            "cpu_count": host.get("cpu_count") or cpu.get("logical_cores"), "gpus": sorted(names)}


def hardware_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """``cpu_model: X → Y`` for each field of two :func:`hardware_key` values that differs."""
    return [f"{k}: {a.get(k) or 'none'} → {b.get(k) or 'none'}" for k in ("cpu_model", "cpu_count", "gpus")
            if a.get(k) != b.get(k)]
