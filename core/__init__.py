"""bakeoff core: config, registry, launcher, client, protocol, statistics, storage, reports, CLI.

Core never imports an engine module and never names an engine. The public API for adapter authors
(built-in or plugin) is re-exported here, lazily: each name is imported the first time it is used, so
``import bakeoff.core`` (which every ``bakeoff`` command does first) costs nothing, and ``bakeoff --help``
does not import pydantic, httpx or numpy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names, for type checkers
    from .common.errors import (
        BakeoffError,
        CapabilityNotSupported,
        ConfigError,
        EngineError,
        EngineStartupError,
        EngineUnavailable,
        MeasurementError,
        PreflightError,
    )
    from .common.gguf_header import GgufHeader, read_gguf_header
    from .config.schema import Arm, BakeoffFile, Prompt, Settings, Speculative, Workload
    from .engine.checks import method_key, read_effective
    from .engine.client import bounded_get
    from .engine.container import ComposeImage, Mounts, compose_service_spec, docker_run
    from .engine.contract import (
        KNOBS,
        Capabilities,
        DraftRule,
        EngineAdapter,
        FailureRule,
        LaunchInputs,
        LaunchSpec,
        MethodKnobs,
        Missing,
        NoOptions,
        cli_flags,
    )
    from .engine.effective import Effective, compare_effective
    from .engine.install import Installer, Program
    from .engine.launch import build_launch, compose_service, install_hint, resolve_launch
    from .engine.metrics import MetricKey, delta, scrape
    from .engine.models import BUILTIN_MODELS, cache_root, resolve_model, smollm2_gguf
    from .engine.pieces import (
        NMaxSchedule,
        PrefixCache,
        Reader,
        ReferenceBench,
        Selftest,
        SelftestCase,
        SelftestRow,
        ServerStats,
        StructuredOutputs,
        Witness,
        first_matching_line,
        openai_model_id,
    )
    from .engine.readback import (
        LATE_LOG_WAIT_S,
        EngineLog,
        counter_delta,
        engine_count,
        engine_object,
        engine_rate,
        engine_text,
        get_json,
        position_deltas,
    )
    from .engine.sdist_build import NO_AMX_FLAGS, SdistBuild, build_from_sdist, cached_binary, cpu_key
    from .results.flags import sample_flag
    from .results.sample import Sample

# name -> the module (relative to bakeoff.core) that defines it
_EXPORTS: dict[str, str] = {
    "BakeoffError": "common.errors",
    "CapabilityNotSupported": "common.errors",
    "ConfigError": "common.errors",
    "EngineError": "common.errors",
    "EngineStartupError": "common.errors",
    "EngineUnavailable": "common.errors",
    "MeasurementError": "common.errors",
    "PreflightError": "common.errors",
    "Arm": "config.schema",
    "BakeoffFile": "config.schema",
    "Prompt": "config.schema",
    "Settings": "config.schema",
    "Speculative": "config.schema",
    "Workload": "config.schema",
    "KNOBS": "engine.contract",
    "Capabilities": "engine.contract",
    "DraftRule": "engine.contract",
    "Effective": "engine.effective",
    "EngineAdapter": "engine.contract",
    "FailureRule": "engine.contract",
    "LaunchInputs": "engine.contract",
    "LaunchSpec": "engine.contract",
    "MethodKnobs": "engine.contract",
    "Missing": "engine.contract",
    "NoOptions": "engine.contract",
    "SelftestCase": "engine.pieces",
    "SelftestRow": "engine.pieces",
    "ServerStats": "engine.pieces",
    "NMaxSchedule": "engine.pieces",
    "PrefixCache": "engine.pieces",
    "Reader": "engine.pieces",
    "ReferenceBench": "engine.pieces",
    "Selftest": "engine.pieces",
    "StructuredOutputs": "engine.pieces",
    "Witness": "engine.pieces",
    "build_launch": "engine.launch",
    "compose_service": "engine.launch",
    "install_hint": "engine.launch",
    "cli_flags": "engine.contract",
    "first_matching_line": "engine.pieces",
    "method_key": "engine.checks",
    "openai_model_id": "engine.pieces",
    "read_effective": "engine.checks",
    "resolve_launch": "engine.launch",
    "bounded_get": "engine.client",
    "Installer": "engine.install",
    "Program": "engine.install",
    "ComposeImage": "engine.container",
    "Mounts": "engine.container",
    "compose_service_spec": "engine.container",
    "docker_run": "engine.container",
    "compare_effective": "engine.effective",
    "MetricKey": "engine.metrics",
    "delta": "engine.metrics",
    "scrape": "engine.metrics",
    "BUILTIN_MODELS": "engine.models",
    "cache_root": "engine.models",
    "resolve_model": "engine.models",
    "smollm2_gguf": "engine.models",
    "LATE_LOG_WAIT_S": "engine.readback",
    "EngineLog": "engine.readback",
    "counter_delta": "engine.readback",
    "engine_count": "engine.readback",
    "engine_object": "engine.readback",
    "engine_rate": "engine.readback",
    "engine_text": "engine.readback",
    "get_json": "engine.readback",
    "position_deltas": "engine.readback",
    "NO_AMX_FLAGS": "engine.sdist_build",
    "SdistBuild": "engine.sdist_build",
    "build_from_sdist": "engine.sdist_build",
    "cached_binary": "engine.sdist_build",
    "cpu_key": "engine.sdist_build",
    "sample_flag": "results.flags",
    "Sample": "results.sample",
    "GgufHeader": "common.gguf_header",
    "read_gguf_header": "common.gguf_header",
}



def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import version

        value: Any = version("bakeoff")  # one source: pyproject.toml
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # the next use is a plain lookup
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "__version__",
    "NO_AMX_FLAGS",
    "Arm",
    "BakeoffFile",
    "BakeoffError",
    "GgufHeader",
    "Capabilities",
    "CapabilityNotSupported",
    "DraftRule",
    "KNOBS",
    "MethodKnobs",
    "ConfigError",
    "Effective",
    "EngineAdapter",
    "EngineError",
    "EngineStartupError",
    "EngineUnavailable",
    "FailureRule",
    "ComposeImage",
    "Installer",
    "LaunchInputs",
    "LaunchSpec",
    "MeasurementError",
    "Program",
    "Missing",
    "NoOptions",
    "PreflightError",
    "Sample",
    "sample_flag",
    "SdistBuild",
    "ServerStats",
    "Settings",
    # the adapter's pieces, one concern each (core/engine/pieces.py)
    "NMaxSchedule",
    "PrefixCache",
    "Reader",
    "ReferenceBench",
    "Selftest",
    "StructuredOutputs",
    "Witness",
    "Speculative",
    "Workload",
    "bounded_get",
    "build_from_sdist",
    "cache_root",
    "cached_binary",
    "build_launch",
    "compose_service",
    "cli_flags",
    "cpu_key",
    "install_hint",
    "first_matching_line",
    "openai_model_id",
    "read_effective",
    "read_gguf_header",
    "resolve_launch",
    "compare_effective",
    "resolve_model",
    "method_key",
    "counter_delta",
    "engine_count",
    "engine_rate",
    "engine_text",
    "engine_object",
    "get_json",
    "EngineLog",
    # the rest of the kit the built-in engines use, so a third-party adapter can do everything they do
    "BUILTIN_MODELS",
    "LATE_LOG_WAIT_S",
    "MetricKey",
    "Prompt",
    "SelftestCase",
    "SelftestRow",
    "delta",
    "position_deltas",
    "scrape",
    "smollm2_gguf",
    # container plumbing for launch: docker and launch: compose (core/engine/container.py)
    "Mounts",
    "compose_service_spec",
    "docker_run",
]
