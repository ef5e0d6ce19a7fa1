"""The hardware facts a run records once, before its first arm: GPUs, memory bandwidth, model bytes.

run.json gets ``gpus`` (every GPU the arms use, from NVML; empty without one), ``bandwidth`` (``gpu``:
a measured device copy and NVML's theoretical figure; ``host``: a numpy copy) and ``roofline_models``
(per arm: the bytes one decoded token reads from its GGUF file or safetensors directory, and whether the arm
decodes on the GPU or the host).
Reports turn these into each arm's floor tok/s and efficiency (core/host/roofline.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psutil

from ..config.schema import Arm
from ..host.roofline import gpu_copy_bandwidth_gbs, host_copy_bandwidth_gbs, model_bytes
from ..host.telemetry import GpuMonitor, GpuSample, open_monitor
from ..results.flags import GPU_THROTTLE
from ..results.sample import Sample

__all__ = [
    "arm_device",
    "arm_gpus",
    "attach_gpu_sample",
    "engine_pids",
    "hardware_record",
    "offload_mismatch",
    "visible_devices_env",
]


def arm_gpus(arm: Arm) -> list[int] | None:
    return list(arm.settings.gpus) if arm.settings.gpus else None


def arm_device(arm: Arm, have_gpu: bool) -> str:
    """'gpu' when the arm decodes on a GPU (one is present and gpu_layers is not 0), else 'host'."""
    return "gpu" if have_gpu and arm.settings.gpu_layers != 0 else "host"


def _model_path(arm: Arm) -> Path | None:
    from .models import resolve_model

    if arm.attached or not arm.model:
        return None
    try:
        path = resolve_model(arm.model)
    except Exception:
        return None
    if path.is_file() and path.suffix == ".gguf":
        return path
    return path if path.is_dir() and any(path.glob("*.safetensors")) else None


def hardware_record(arms: list[Arm]) -> dict[str, Any]:
    """GPUs, bandwidth and per-arm model bytes for run.json (a few seconds at most; nothing changed)."""
    indices = sorted({i for a in arms for i in (arm_gpus(a) or [])}) or None
    monitor = open_monitor(indices)
    out: dict[str, Any] = {"gpus": monitor.inventory() if monitor else []}
    models: dict[str, Any] = {}
    for arm in arms:
        path = _model_path(arm)
        if path is None:
            continue
        try:
            facts = model_bytes(path, arm.settings.kv_type)
        except ValueError:
            continue
        models[arm.name] = {"path": str(path), "device": arm_device(arm, monitor is not None),
                            **facts.model_dump()}
    out["roofline_models"] = models
    bandwidth: dict[str, Any] = {}
    devices = {m["device"] for m in models.values()}
    if "host" in devices:
        bandwidth["host"] = {"gbs": host_copy_bandwidth_gbs(), "source": "measured copy (numpy, host memory)"}
    if "gpu" in devices and monitor is not None:
        gpu: dict[str, Any] = {"theoretical_gbs": monitor.bandwidth_gbs()}
        measured = gpu_copy_bandwidth_gbs(monitor.indices[0])
        if measured:
            gpu.update(gbs=measured[0], source=f"measured device copy ({measured[1]}, read + write)")
        bandwidth["gpu"] = gpu
    out["bandwidth"] = bandwidth
    return out


def engine_pids(pgid: int) -> set[int]:
    """Processes of the engine's process group."""
    pids = set()
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid:
                pids.add(pid)
        except OSError:  # gone since the listing
            continue
    return pids


def offload_mismatch(monitor: GpuMonitor, arm: Arm, pgid: int, weights: int | None,
                     layers: int = 0) -> tuple[float | None, str | None]:
    """GPU memory the engine's processes hold, and a mismatch when it holds less than half of the weights the
    asked ``gpu_layers`` put on the GPU (their share of ``layers``; None when NVML cannot see the engine)."""
    held = monitor.process_memory_mib(engine_pids(pgid))
    asked = arm.settings.gpu_layers
    if held is None or asked in (None, 0) or not weights:
        return held, None
    share = 1.0 if asked in ("all", "auto") or not layers else min(1.0, int(asked) / layers)
    expected_mib = share * weights / 2**20
    if held < 0.5 * expected_mib:
        return held, (f"settings.gpu_layers {asked} asked, but the engine holds only {held:.0f} MiB on the GPU for "
                      f"{expected_mib:.0f} MiB of weights on those layers")
    return held, None


def attach_gpu_sample(sample: Sample, gpu: GpuSample) -> None:
    """Put one request's telemetry on its sample: tokens per joule, and a flag for power/thermal slowdown."""
    if gpu.energy_j and sample.completion_tokens:
        gpu.tokens_per_joule = sample.completion_tokens / gpu.energy_j
    sample.gpu = gpu
    if gpu.slowdowns:
        sample.flags.append(GPU_THROTTLE.line(", ".join(gpu.slowdowns)))


def visible_devices_env(arm: Arm) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES for ``settings.gpus``, in NVML's (PCI bus) numbering."""
    gpus = arm_gpus(arm)
    if not gpus:
        return {}
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in gpus), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
