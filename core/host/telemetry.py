"""GPU telemetry through NVML (``nvidia-ml-py``, the optional extra ``bakeoff[gpu]``).

Without the package, a driver or a GPU, :func:`open_monitor` returns None and every caller carries on
silently: CPU runs record nothing here. With a GPU, each timed request gets a :class:`GpuSample`:

- **energy** from the total-energy counter's delta (mJ, Volta and later) where the card has it, else
  power integrated over the sampler's readings. On the H200, power readings lag the load by about a
  second (a 667 W matmul read 93, 145, 211 W in its first second), so the counter is the one to trust
  for joules; power samples are for plots and maxima.
- mean/max power, mean SM and memory clocks, max temperature, peak VRAM in use, and every throttle
  ("clocks event") reason seen while the request ran.

A sampler thread reads the watched GPUs every ``interval_s`` (default 0.1 s) between :meth:`start` and
:meth:`stop`. Reads never change a setting. Several GPUs (``settings.gpus``) are summed (energy, power,
VRAM), averaged (clocks) or maxed (temperature).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

from pydantic import BaseModel, Field

__all__ = ["DEFAULT_INTERVAL_S", "SLOWDOWN_REASONS", "THROTTLE_BITS", "GpuMonitor", "GpuSample", "open_monitor"]

DEFAULT_INTERVAL_S = 0.1

# nvmlClocksEventReason* bits (the names of nvml.h); "gpu-idle" and the settings bits are no slowdown.
THROTTLE_BITS = {
    0x1: "gpu-idle",
    0x2: "applications-clocks-setting",
    0x4: "sw-power-cap",
    0x8: "hw-slowdown",
    0x10: "sync-boost",
    0x20: "sw-thermal",
    0x40: "hw-thermal",
    0x80: "hw-power-brake",
    0x100: "display-clock-setting",
}
SLOWDOWN_REASONS = ("sw-power-cap", "hw-slowdown", "sw-thermal", "hw-thermal", "hw-power-brake")


class GpuSample(BaseModel):
    """What the watched GPUs did during one timed request."""

    energy_j: float | None = Field(None, description="Joules used by the watched GPUs from send to stream end.")
    energy_source: str | None = Field(None, description="'counter' (NVML total-energy delta) or 'integrated power'.")
    tokens_per_joule: float | None = Field(None, description="Completion tokens / energy_j (prefill included).")
    power_mean_w: float | None = None
    power_max_w: float | None = None
    sm_clock_mhz: float | None = Field(None, description="Mean SM clock over the readings.")
    sm_clock_min_mhz: float | None = None
    mem_clock_mhz: float | None = Field(None, description="Mean memory clock over the readings.")
    temp_max_c: float | None = None
    vram_used_mib: float | None = Field(None, description="Peak memory in use on the watched GPUs (all processes).")
    throttle: list[str] = Field(default_factory=list, description="Clock-event reasons seen (NVML names).")
    readings: int = Field(0, description="Sampler readings behind the means.")
    seconds: float | None = None

    @property
    def slowdowns(self) -> list[str]:
        """Throttle reasons that mean the card ran slower than it could (power or thermal)."""
        return [r for r in self.throttle if r in SLOWDOWN_REASONS]


def _try(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:
        return None


def _absent(*args: Any) -> None:
    """An NVML call this nvidia-ml-py lacks: its figure is unknown."""


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


class GpuMonitor:
    """Reads the GPUs ``indices`` (NVML order, the order of nvidia-smi) through the ``nvml`` module."""

    def __init__(self, nvml: ModuleType, indices: Iterable[int], interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.nvml, self.interval_s, self.clock = nvml, interval_s, clock
        self.indices = list(indices)
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in self.indices]
        self._readings: list[tuple[float, dict[str, Any]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._energy0: float | None = None
        self._t0 = 0.0

    # -- facts ---------------------------------------------------------------------------------------
    def inventory(self) -> list[dict[str, Any]]:
        """Each watched GPU for run.json: name, UUID, driver, CUDA, limits, persistence, PCIe, topology."""
        n = self.nvml
        driver = _text(_try(n.nvmlSystemGetDriverVersion))
        cuda = _try(n.nvmlSystemGetCudaDriverVersion)
        out = []
        for index, h in zip(self.indices, self.handles, strict=True):
            mem = _try(n.nvmlDeviceGetMemoryInfo, h)
            limits = _try(n.nvmlDeviceGetPowerManagementLimitConstraints, h)
            cc = _try(n.nvmlDeviceGetCudaComputeCapability, h)
            gpu: dict[str, Any] = {
                "index": index, "name": _text(_try(n.nvmlDeviceGetName, h)),
                "uuid": _text(_try(n.nvmlDeviceGetUUID, h)),
                "driver": driver, "cuda": f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None,
                "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
                "memory_mib": mem.total >> 20 if mem else None,
                "memory_bus_width_bits": _try(n.nvmlDeviceGetMemoryBusWidth, h),
                "power_limit_w": _watts(_try(n.nvmlDeviceGetEnforcedPowerLimit, h)),
                "power_limit_default_w": _watts(_try(n.nvmlDeviceGetPowerManagementDefaultLimit, h)),
                "power_limit_range_w": [_watts(x) for x in limits] if limits else None,
                "sm_clock_max_mhz": _try(n.nvmlDeviceGetMaxClockInfo, h, n.NVML_CLOCK_SM),
                "mem_clock_max_mhz": _try(n.nvmlDeviceGetMaxClockInfo, h, n.NVML_CLOCK_MEM),
                "sm_clock_app_mhz": _try(n.nvmlDeviceGetApplicationsClock, h, n.NVML_CLOCK_SM),
                "persistence_mode": _try(n.nvmlDeviceGetPersistenceMode, h),
                "vbios": _text(_try(getattr(n, "nvmlDeviceGetVbiosVersion", None) or _absent, h)),
                "pcie_gen": _try(n.nvmlDeviceGetCurrPcieLinkGeneration, h),
                "pcie_gen_max": _try(n.nvmlDeviceGetMaxPcieLinkGeneration, h),
                "pcie_width": _try(n.nvmlDeviceGetCurrPcieLinkWidth, h),
                "pcie_width_max": _try(getattr(n, "nvmlDeviceGetMaxPcieLinkWidth", None) or _absent, h),
                "energy_counter": _try(n.nvmlDeviceGetTotalEnergyConsumption, h) is not None,
            }
            peers = {}
            for other_index, other in zip(self.indices, self.handles, strict=True):
                if other_index != index:
                    level = _try(n.nvmlDeviceGetTopologyCommonAncestor, h, other)
                    p2p = _try(n.nvmlDeviceGetP2PStatus, h, other, getattr(n, "NVML_P2P_CAPS_INDEX_READ", 0))
                    peers[str(other_index)] = {"topology_level": level, "p2p_read_ok": p2p == 0 if p2p is not None
                                               else None}
            if peers:
                gpu["peers"] = peers
            out.append(gpu)
        return out

    def settings_state(self) -> dict[str, Any]:
        """The limits that decide speed (power limit, clock limits, application clocks): compared across arms."""
        return {str(g["index"]): {k: g[k] for k in ("power_limit_w", "sm_clock_max_mhz", "mem_clock_max_mhz",
                                                  "sm_clock_app_mhz")} for g in self.inventory()}

    def bandwidth_gbs(self) -> float | None:
        """Theoretical memory bandwidth of the first watched GPU: bus width × max memory clock × 2 (DDR)."""
        if not self.handles:
            return None
        n, h = self.nvml, self.handles[0]
        width = _try(n.nvmlDeviceGetMemoryBusWidth, h)
        clock = _try(n.nvmlDeviceGetMaxClockInfo, h, n.NVML_CLOCK_MEM)
        if not width or not clock:
            return None
        return float(width) / 8 * float(clock) * 1e6 * 2 / 1e9

    def process_memory_mib(self, pids: set[int]) -> float | None:
        """GPU memory held by these processes on the watched GPUs (None when NVML cannot tell)."""
        total, seen = 0.0, False
        for h in self.handles:
            for proc in _try(self.nvml.nvmlDeviceGetComputeRunningProcesses, h) or []:
                seen = True
                if proc.pid in pids and proc.usedGpuMemory:
                    total += proc.usedGpuMemory / 2**20
        return total if seen else None

    # -- readings ------------------------------------------------------------------------------------
    def _energy_mj(self) -> float | None:
        values = [_try(self.nvml.nvmlDeviceGetTotalEnergyConsumption, h) for h in self.handles]
        return float(sum(values)) if values and all(v is not None for v in values) else None

    def read(self) -> dict[str, Any]:
        """One reading of every watched GPU."""
        n = self.nvml
        power = [_try(n.nvmlDeviceGetPowerUsage, h) for h in self.handles]
        sm = [_try(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM) for h in self.handles]
        mem = [_try(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_MEM) for h in self.handles]
        temp = [_try(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU) for h in self.handles]
        used = [_try(n.nvmlDeviceGetMemoryInfo, h) for h in self.handles]
        reasons = 0
        for h in self.handles:
            getter = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
                n, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
            reasons |= (_try(getter, h) or 0) if getter else 0
        return {
            "power_w": sum(p for p in power if p is not None) / 1000 if any(p is not None for p in power) else None,
            "sm_mhz": _mean(sm), "mem_mhz": _mean(mem),
            "temp_c": max((t for t in temp if t is not None), default=None),
            "used_mib": sum(u.used for u in used if u is not None) / 2**20 if any(used) else None,
            "reasons": reasons,
        }

    def idle_power_w(self, seconds: float = 0.5) -> float | None:
        """Mean power over a short quiet window (call before the engine loads)."""
        e0, t0 = self._energy_mj(), self.clock()
        readings = []
        while self.clock() - t0 < seconds:
            readings.append(self.read()["power_w"])
            time.sleep(self.interval_s)
        e1, dt = self._energy_mj(), self.clock() - t0
        if e0 is not None and e1 is not None and e1 > e0 and dt > 0:
            return (e1 - e0) / 1000 / dt
        return _mean(readings)

    def start(self) -> None:
        self._readings = []
        self._stop.clear()
        self._energy0, self._t0 = self._energy_mj(), self.clock()
        self._sample_once()
        self._thread = threading.Thread(target=self._loop, name="bakeoff-gpu-sampler", daemon=True)
        self._thread.start()

    def _sample_once(self) -> None:
        self._readings.append((self.clock(), self.read()))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample_once()

    def stop(self) -> GpuSample:
        """End the sampler and summarize its readings."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample_once()
        seconds = self.clock() - self._t0
        energy1 = self._energy_mj()
        rows = [r for _, r in self._readings]
        powers = [r["power_w"] for r in rows if r["power_w"] is not None]
        sample = GpuSample(readings=len(rows), seconds=seconds, power_mean_w=_mean(powers),
                           power_max_w=max(powers, default=None), sm_clock_mhz=_mean([r["sm_mhz"] for r in rows]),
                           sm_clock_min_mhz=min((r["sm_mhz"] for r in rows if r["sm_mhz"] is not None), default=None),
                           mem_clock_mhz=_mean([r["mem_mhz"] for r in rows]),
                           temp_max_c=max((r["temp_c"] for r in rows if r["temp_c"] is not None), default=None),
                           vram_used_mib=max((r["used_mib"] for r in rows if r["used_mib"] is not None), default=None))
        bits = 0
        for r in rows:
            bits |= r["reasons"]
        sample.throttle = [name for bit, name in THROTTLE_BITS.items() if bits & bit]
        if self._energy0 is not None and energy1 is not None and energy1 > self._energy0:
            sample.energy_j, sample.energy_source = (energy1 - self._energy0) / 1000, "counter"
        elif len(self._readings) >= 2 and powers:
            sample.energy_j, sample.energy_source = _integrate(self._readings), "integrated power"
        return sample


def _watts(milliwatts: Any) -> float | None:
    return milliwatts / 1000 if isinstance(milliwatts, (int, float)) else None


def _mean(values: Iterable[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return sum(xs) / len(xs) if xs else None


def _integrate(readings: list[tuple[float, dict[str, Any]]]) -> float | None:
    """Trapezoidal integral of power over the readings' timestamps, in joules."""
    total = 0.0
    for (t0, a), (t1, b) in itertools.pairwise(readings):
        if a["power_w"] is not None and b["power_w"] is not None:
            total += (a["power_w"] + b["power_w"]) / 2 * (t1 - t0)
    return total


def _load_nvml() -> ModuleType | None:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    return pynvml  # type: ignore[no-any-return]


def open_monitor(indices: Iterable[int] | None = None, interval_s: float = DEFAULT_INTERVAL_S,
                 nvml: ModuleType | None = None) -> GpuMonitor | None:
    """A monitor of ``indices`` (default: every GPU), or None when there is no NVML, driver or GPU.

    :param nvml: an NVML module to use instead of ``pynvml`` (tests pass a fake).
    """
    module = nvml if nvml is not None else _load_nvml()
    if module is None:
        return None
    try:
        count = module.nvmlDeviceGetCount()
    except Exception:
        return None
    wanted = list(indices) if indices is not None else list(range(count))
    wanted = [i for i in wanted if 0 <= i < count]
    if not wanted:
        return None
    return GpuMonitor(module, wanted, interval_s)
