"""The rig report (core/host/rig.py): GPU power limit against its default and PCIe link from NVML, CPU and
memory from /proc, /sys and psutil; what cannot be read says why; hardware keys compare machines."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fake_nvml import fake_nvml

from bakeoff.core.host.hostinfo import host_info
from bakeoff.core.host.rig import hardware_differences, hardware_key, rig_report


def _fake_sys(tmp_path: Path, governor: str | None = "performance") -> tuple[Path, Path]:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cpuinfo").write_text("processor\t: 0\nmodel name\t: Test CPU 9000\n")
    cpu = tmp_path / "sys" / "cpu"
    (cpu / "cpu0" / "cpufreq").mkdir(parents=True)
    (tmp_path / "sys" / "node" / "node0").mkdir(parents=True)
    if governor:
        (cpu / "cpu0" / "cpufreq" / "scaling_governor").write_text(governor + "\n")
    return proc, cpu


def test_gpu_power_limit_against_default_and_pcie_link(tmp_path: Path) -> None:
    nvml = fake_nvml(gpus=2)
    nvml.nvmlDeviceGetEnforcedPowerLimit = lambda h: 500_000  # capped at 500 W of a 700 W default
    proc, cpu = _fake_sys(tmp_path)
    rig = rig_report(nvml=nvml, proc=proc, sys_cpu=cpu)
    g = rig["gpus"][0]
    assert (g["name"], g["driver"], g["vbios"]) == ("NVIDIA H200", "580.159.04", "96.00.99.00.01")
    assert (g["power_limit_w"], g["power_limit_default_w"], g["power_limit_vs_default"]) == (500.0, 700.0, 0.714)
    assert (g["pcie_gen"], g["pcie_gen_max"], g["pcie_width"], g["pcie_width_max"]) == (5, 5, 16, 16)
    assert len(rig["gpus"]) == 2
    assert rig["cpu"]["model"] == "Test CPU 9000" and rig["cpu"]["governor"] == "performance"
    assert rig["cpu"]["numa_nodes"] == 1 and rig["memory"]["total_gib"] > 0
    assert not [k for k in rig["absent"] if k.startswith("gpus") and "power" in k]


def test_what_cannot_be_read_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    proc, cpu = _fake_sys(tmp_path, governor=None)
    (proc / "cpuinfo").write_text("processor\t: 0\n")
    rig = rig_report(proc=proc, sys_cpu=cpu)
    assert rig["gpus"] == []
    assert "nvidia-ml-py is not installed" in rig["absent"]["gpus"]
    assert "scaling_governor" in rig["absent"]["cpu.governor"] and "governor" not in rig["cpu"]
    assert "model name" in rig["absent"]["cpu.model"]
    nvml = fake_nvml()
    nvml.nvmlDeviceGetPowerManagementDefaultLimit = lambda h: (_ for _ in ()).throw(RuntimeError("Not Supported"))
    rig = rig_report(nvml=nvml, proc=proc, sys_cpu=cpu)
    assert "power_limit_default_w" not in rig["gpus"][0] and "power_limit_vs_default" not in rig["gpus"][0]
    assert "NVML did not report it" in rig["absent"]["gpus[0].power_limit_default_w"]


def test_host_info_carries_the_rig_report() -> None:
    info = host_info()
    rig = info["rig"]
    assert isinstance(rig, dict) and rig["cpu"]["logical_cores"] and "absent" in rig


def test_hardware_keys() -> None:
    cpu = hardware_key({"cpu_model": "Test CPU", "cpu_count": 2})
    h200 = hardware_key({"cpu_model": "Xeon", "cpu_count": 16}, [{"name": "NVIDIA H200"}])
    assert cpu == {"cpu_model": "Test CPU", "cpu_count": 2, "gpus": []}
    assert hardware_differences(cpu, cpu) == []
    assert hardware_differences(cpu, h200) == ["cpu_model: Test CPU → Xeon", "cpu_count: 2 → 16",
                                               "gpus: none → ['NVIDIA H200']"]
    from_rig = hardware_key({"rig": {"cpu": {"model": "Xeon", "logical_cores": 16}, "gpus": [{"name": "NVIDIA H200"}]}})
    assert from_rig == h200
