"""``bakeoff gpu``: the GPUs NVML sees and the memory bandwidth the roofline would use (read-only)."""

from __future__ import annotations

import json

import typer

from ..host.roofline import gpu_copy_bandwidth_gbs, host_copy_bandwidth_gbs
from ..host.telemetry import open_monitor
from .console import make_console

__all__ = ["gpu_command"]

console = make_console()


def gpu_command(
    bandwidth: bool = typer.Option(True, "--bandwidth/--no-bandwidth", help="Measure copy bandwidth (a few seconds)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of lines."),
) -> None:
    """Show the GPUs and the memory bandwidth the roofline would use; changes nothing.

    Each GPU (name, driver, power and clock limits, PCIe, peers) and the memory bandwidth: a measured copy (torch
    or CuPy on the GPU, numpy on the host) and NVML's bus width × max memory clock."""
    monitor = open_monitor()
    out: dict[str, object] = {"gpus": monitor.inventory() if monitor else []}
    if bandwidth:
        out["host_copy_gbs"] = host_copy_bandwidth_gbs()
        if monitor is not None:
            measured = gpu_copy_bandwidth_gbs(monitor.indices[0])
            out["gpu0_copy_gbs"], out["gpu0_copy_library"] = measured if measured else (None, None)
            out["gpu0_theoretical_gbs"] = monitor.bandwidth_gbs()
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    if monitor is None:
        console.print("no GPU: nvidia-ml-py (pip install -e '.[gpu]'), an NVIDIA driver or a GPU is missing",
                      markup=False)
    for g in out["gpus"]:  # type: ignore[attr-defined]
        console.print(f"GPU {g['index']}: {g['name']} ({g['uuid']}), driver {g['driver']}, CUDA {g['cuda']}, "
                      f"power limit {g['power_limit_w']} W, max SM/memory clock {g['sm_clock_max_mhz']}/"
                      f"{g['mem_clock_max_mhz']} MHz, PCIe gen {g['pcie_gen']} x{g['pcie_width']}", highlight=False)
    for key, label in (("host_copy_gbs", "host memory, measured copy (numpy)"),
                       ("gpu0_copy_gbs", f"GPU 0, measured copy ({out.get('gpu0_copy_library')})"),
                       ("gpu0_theoretical_gbs", "GPU 0, NVML theoretical (bus width × max memory clock × 2)")):
        if out.get(key):
            console.print(f"{label}: {out[key]:.0f} GB/s", highlight=False)
