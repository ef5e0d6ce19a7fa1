"""GPU telemetry and roofline in every report format; cleanly absent from a CPU run's reports."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from bakeoff.core.host.telemetry import GpuSample
from bakeoff.core.reports import (
    print_summary,
    render_html,
    render_markdown,
    summarize_run,
    write_reports,
)
from bakeoff.core.results.record import RunRecord
from bakeoff.core.results.store import RunDir

Maker = Callable[..., Path]

H200 = {"index": 0, "name": "NVIDIA H200", "driver": "580.159.04", "cuda": "13.0", "power_limit_w": 700.0,
        "sm_clock_max_mhz": 1980, "mem_clock_max_mhz": 3201, "pcie_gen": 5, "pcie_width": 16}


def _add_gpu(path: Path, joules: dict[str, float], *, throttle: str | None = None,
             power_limits: dict[str, float] | None = None) -> Path:
    """Rewrite a synthetic run as a GPU run: telemetry on each sample, GPUs, bandwidth and model bytes."""
    run = RunDir(path)
    samples = run.samples()
    run.samples_path.unlink()
    (path / "bakeoff.sqlite").unlink(missing_ok=True)
    for i, s in enumerate(samples):
        energy = joules[s.arm] * (1 + 0.01 * (i % 3))
        gpu = GpuSample(energy_j=energy, energy_source="counter", tokens_per_joule=128 / energy, power_mean_w=450.0,
                        power_max_w=600.0, sm_clock_mhz=1980.0, mem_clock_mhz=3201.0, temp_max_c=50.0,
                        vram_used_mib=9000.0, readings=8, throttle=[throttle] if throttle and s.arm == "fast" else [])
        s.gpu = gpu
        s.prompt_tokens = 40
        run.append(s)
    meta = run.read_record().to_json()
    meta["gpus"] = [H200]
    meta["bandwidth"] = {"gpu": {"gbs": 4200.0, "source": "measured device copy (torch, read + write)",
                                 "theoretical_gbs": 4814.3}}
    meta["roofline_models"] = {a: {"path": "m.gguf", "device": "gpu", "weights": 6_240_000_000,
                                   "kv_per_position": 0.0, "file_bytes": 6_300_000_000, "notes": []}
                               for a in joules}
    for arm, recs in meta["arm_records"].items():
        for r in recs:
            r["gpu_idle_power_w"] = 80.0
            r["gpu_state"] = {"0": {"power_limit_w": (power_limits or {}).get(arm, 700.0)}}
    run.write_record(RunRecord.model_validate(meta))
    return path


def test_gpu_run_reports_tokens_per_joule_roofline_and_plot(make_run: Maker) -> None:
    path = _add_gpu(make_run({"base": 334.0, "fast": 600.0}, acceptance={"fast": 1.0}, seed=2),
                    {"base": 2.0, "fast": 1.0})
    s = summarize_run(path)
    base, fast = s.arm("base"), s.arm("fast")
    assert base is not None and fast is not None and base.gpu is not None and fast.gpu is not None
    assert base.gpu.tokens_per_joule is not None and 60 < base.gpu.tokens_per_joule.estimate < 65
    assert base.gpu.idle_power_w == 80.0 and base.gpu.energy_source == "counter"
    energy = s.energy_comparisons[0]
    assert energy.arm == "fast" and energy.verdict == "faster" and 1.9 < energy.ratio.estimate < 2.1
    assert base.roofline is not None and fast.roofline is not None
    assert 0.49 < (base.roofline.efficiency or 0) < 0.51  # 334 of 673 tok/s
    assert 0.42 < (base.roofline.theoretical_efficiency or 0) < 0.44
    assert base.roofline.tokens_per_weight_pass is None
    summary_json = json.loads(s.model_dump_json())
    roof = summary_json["arms"][0]["roofline"]
    assert {"bytes_per_token", "bandwidth_gbs", "bandwidth_source", "floor_tps", "efficiency"} <= set(roof)

    md = render_markdown(s)
    assert "**Roofline**" in md and "**GPU telemetry**" in md and "NVIDIA H200" in md
    assert re.search(r"\| base \| 6\.240 \| 4200 \| 673\.1 \| 33\d\.\d \| 49\.\d% \| 4\d\.\d% \|", md)
    assert "measured device copy" in md and "NVML theoretical" in md
    out = io.StringIO()
    print_summary(s, Console(file=out, width=250))
    text = out.getvalue()
    assert "tok/J" in text and "floor tok/s" in text
    files = write_reports(path, s)
    assert (files.directory / "gpu_power_clock_temp.png").stat().st_size > 1000
    html = render_html(s, {})
    assert 'id="gpu"' in html and 'id="roofline"' in html


def test_throttling_and_different_power_limits_are_warnings(make_run: Maker) -> None:
    path = _add_gpu(make_run({"base": 334.0, "fast": 600.0}, seed=3), {"base": 2.0, "fast": 1.0},
                    throttle="hw-thermal", power_limits={"fast": 450.0})
    s = summarize_run(path)
    assert any(w.startswith("fast: 18 request(s) ran while the GPU slowed down (hw-thermal)") for w in s.warnings)
    assert any("GPU power limit or clock limits differ between arms" in w for w in s.warnings)


def test_cpu_run_has_no_gpu_sections(make_run: Maker) -> None:
    path = make_run({"base": 100.0, "fast": 130.0}, seed=1)
    s = summarize_run(path)
    assert all(a.gpu is None and a.roofline is None for a in s.arms) and not s.energy_comparisons
    md = render_markdown(s)
    assert "GPU" not in md and "Roofline" not in md and "tok/J" not in md
    files = write_reports(path, s)
    assert not (files.directory / "gpu_power_clock_temp.png").exists()
    out = io.StringIO()
    print_summary(s, Console(file=out, width=250))
    assert "tok/J" not in out.getvalue()


def test_mismatches_of_each_arm_are_report_warnings(make_run: Maker) -> None:
    path = make_run({"base": 100.0}, seed=1)
    run = RunDir(path)
    meta = run.read_record().to_json()
    meta["arm_records"]["base"][0]["mismatches"] = ["settings.gpu_layers 99 asked, but llama-server runs on the CPU"]
    run.write_record(RunRecord.model_validate(meta))
    s = summarize_run(path)
    assert "base: MISMATCH: settings.gpu_layers 99 asked, but llama-server runs on the CPU" in s.warnings
    assert "MISMATCH" in render_markdown(s)


