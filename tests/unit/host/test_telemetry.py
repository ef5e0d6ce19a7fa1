"""GPU telemetry against a fake NVML module: energy, power, clocks, throttling, inventory, absence."""

from __future__ import annotations

import sys
import time
import types
from typing import Any

import pytest
from fake_nvml import NVMLError, fake_nvml

from bakeoff.core.host import telemetry
from bakeoff.core.host.telemetry import GpuMonitor, open_monitor
from bakeoff.core.run.plan import run_record


def test_energy_from_the_counter_and_power_clock_temperature_summary() -> None:
    nvml = fake_nvml()
    mon = open_monitor(nvml=nvml, interval_s=0.005)
    assert mon is not None
    mon.start()
    nvml.state["reasons"] = 0x4  # the card hit its power cap while the request ran
    while nvml.state["i"] < 4:  # let the sampler thread take a few readings
        time.sleep(0.005)
    sample = mon.stop()
    assert sample.energy_source == "counter"
    assert sample.energy_j == pytest.approx(50.0)  # one counter read at start, one at stop: +50 J
    assert sample.readings >= 4
    assert sample.power_max_w == 700.0 and 300.0 <= (sample.power_mean_w or 0) <= 700.0
    assert sample.sm_clock_mhz == 1980 and sample.mem_clock_mhz == 3201
    assert sample.temp_max_c == 40 + nvml.state["i"]
    assert sample.vram_used_mib == 1000 + nvml.state["i"]
    assert sample.throttle == ["sw-power-cap"] and sample.slowdowns == ["sw-power-cap"]


def test_integrated_power_when_the_card_has_no_energy_counter() -> None:
    nvml = fake_nvml(energy_counter=False)
    ticks = iter(range(1000))
    mon = GpuMonitor(nvml, [0], interval_s=10.0, clock=lambda: float(next(ticks)))  # one reading per tick second
    mon.start()
    sample = mon.stop()
    assert sample.energy_source == "integrated power"
    # readings at t=1 (300 W) and t=2 (500 W): trapezoid = 400 J
    assert sample.energy_j == pytest.approx(400.0)


def test_idle_and_gpu_idle_reason_is_not_a_slowdown() -> None:
    nvml = fake_nvml()
    nvml.state["reasons"] = 0x1
    mon = open_monitor(nvml=nvml, interval_s=0.001)
    assert mon is not None
    mon.start()
    sample = mon.stop()
    assert sample.throttle == ["gpu-idle"] and sample.slowdowns == []


def test_inventory_settings_and_theoretical_bandwidth() -> None:
    mon = open_monitor(nvml=fake_nvml(gpus=2))
    assert mon is not None and mon.indices == [0, 1]
    inv = mon.inventory()
    g = inv[0]
    assert (g["name"], g["uuid"], g["driver"], g["cuda"], g["compute_capability"]) == (
        "NVIDIA H200", "GPU-h0", "580.159.04", "13.0", "9.0")
    assert g["power_limit_w"] == 700.0 and g["power_limit_range_w"] == [200.0, 700.0]
    assert g["sm_clock_app_mhz"] is None  # not supported: recorded as unknown, never an error
    assert (g["pcie_gen"], g["pcie_width"], g["persistence_mode"]) == (5, 16, 1)
    assert g["peers"] == {"1": {"topology_level": 10, "p2p_read_ok": True}}
    assert mon.settings_state()["0"]["power_limit_w"] == 700.0
    assert mon.bandwidth_gbs() == pytest.approx(4814.3, abs=0.1)  # 6016 bits / 8 × 3201 MHz × 2
    assert mon.process_memory_mib({4242}) == pytest.approx(2 * 6 * 1024)  # two GPUs, 6 GiB each
    assert mon.process_memory_mib({1}) == 0.0


def test_settings_gpus_select_what_is_watched() -> None:
    assert open_monitor([1], nvml=fake_nvml(gpus=2)).indices == [1]  # type: ignore[union-attr]
    assert open_monitor([5], nvml=fake_nvml(gpus=2)) is None


def test_absent_nvml_or_driver_is_silently_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    assert open_monitor() is None
    broken = types.ModuleType("pynvml")

    def no_driver() -> None:
        raise NVMLError("Driver Not Loaded")

    broken.nvmlInit = no_driver  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    assert open_monitor() is None
    assert telemetry._load_nvml() is None


def test_a_run_records_gpus_and_telemetry_on_every_sample(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Through the protocol with a real (sim) engine process and a fake NVML: run.json gets the GPUs and each
    arm's idle power and limits; every timed request gets energy and tokens per joule."""
    from bakeoff.core.config.loader import parse_bakeoff
    from bakeoff.core.reports import summarize_run
    from bakeoff.core.results.store import RunDir
    from bakeoff.core.run import protocol
    from bakeoff.core.run.plan import plan_run

    nvml = fake_nvml()
    monkeypatch.setattr(telemetry, "_load_nvml", lambda: nvml)
    monkeypatch.setattr("bakeoff.core.engine.hardware.gpu_copy_bandwidth_gbs", lambda *a, **k: (4200.0, "torch"))
    plan = plan_run(parse_bakeoff(
        "name: t\narms:\n  - {name: a, engine: sim, model: sim}\n"
        "workload: {prompts: [prose], reps: 2, max_tokens: 16, gpu_sample_interval_s: 0.01}\n"))
    run = RunDir(tmp_path / "r")
    run.write_record(run_record(plan))
    protocol.run_plan(plan, run)
    meta = run.read_record().to_json()
    assert meta["gpus"][0]["name"] == "NVIDIA H200"
    samples = run.samples()
    assert len(samples) == 2
    for s in samples:
        assert s.gpu is not None and s.gpu.energy_source == "counter" and s.gpu.energy_j == pytest.approx(50.0)
        assert s.gpu.tokens_per_joule == pytest.approx((s.completion_tokens or 0) / 50.0)
    summary = summarize_run(run.path)
    a = summary.arm("a")
    assert a is not None and a.gpu is not None and a.gpu.idle_power_w is not None and a.gpu.vram_peak_mib


def test_bakeoff_gpu_lists_gpus_and_bandwidth_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    import json as _json

    from typer.testing import CliRunner

    from bakeoff.core.cli import app

    monkeypatch.setattr(telemetry, "_load_nvml", lambda: fake_nvml())
    monkeypatch.setattr("bakeoff.core.cli.gpu.gpu_copy_bandwidth_gbs", lambda *a, **k: (4236.0, "torch"))
    result = CliRunner().invoke(app, ["gpu"])
    assert result.exit_code == 0, result.output
    assert "GPU 0: NVIDIA H200" in result.output and "power limit 700.0 W" in result.output
    assert "GPU 0, measured copy (torch): 4236 GB/s" in result.output
    assert "NVML theoretical (bus width × max memory clock × 2): 4814 GB/s" in result.output
    data = _json.loads(CliRunner().invoke(app, ["gpu", "--json", "--no-bandwidth"]).output)
    assert data["gpus"][0]["uuid"] == "GPU-h0" and "gpu0_copy_gbs" not in data
    monkeypatch.setattr(telemetry, "_load_nvml", lambda: None)
    assert "no GPU" in CliRunner().invoke(app, ["gpu", "--no-bandwidth"]).output
