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
    from .engine.adapter import (
        KNOBS,
        Capabilities,
        DraftRule,
        Effective,
        EngineAdapter,
        FailureRule,
        LaunchInputs,
        LaunchSpec,
        MethodKnobs,
        Missing,
        NMaxSchedule,
        NoOptions,
        PrefixCache,
        Reader,
        ReferenceBench,
        Selftest,
        SelftestCase,
        SelftestRow,
        ServerStats,
        StructuredOutputs,
        Witness,
        build_launch,
        cli_flags,
        compose_service,
        first_matching_line,
        install_hint,
        method_key,
        openai_model_id,
        read_effective,
        resolve_launch,
    )
    from .engine.client import bounded_get
    from .engine.container import ComposeImage, Mounts, compose_service_spec, docker_run
    from .engine.effective import compare_effective
    from .engine.install import Installer, Program
    from .engine.metrics import MetricKey, delta, scrape
    from .engine.models import BUILTIN_MODELS, cache_root, resolve_model, smollm2_gguf
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
    "KNOBS": "engine.adapter",
    "Capabilities": "engine.adapter",
    "DraftRule": "engine.adapter",
    "Effective": "engine.adapter",
    "EngineAdapter": "engine.adapter",
    "FailureRule": "engine.adapter",
    "LaunchInputs": "engine.adapter",
    "LaunchSpec": "engine.adapter",
    "MethodKnobs": "engine.adapter",
    "Missing": "engine.adapter",
    "NoOptions": "engine.adapter",
    "SelftestCase": "engine.adapter",
    "SelftestRow": "engine.adapter",
    "ServerStats": "engine.adapter",
    "NMaxSchedule": "engine.adapter",
    "PrefixCache": "engine.adapter",
    "Reader": "engine.adapter",
    "ReferenceBench": "engine.adapter",
    "Selftest": "engine.adapter",
    "StructuredOutputs": "engine.adapter",
    "Witness": "engine.adapter",
    "build_launch": "engine.adapter",
    "compose_service": "engine.adapter",
    "install_hint": "engine.adapter",
    "cli_flags": "engine.adapter",
    "first_matching_line": "engine.adapter",
    "method_key": "engine.adapter",
    "openai_model_id": "engine.adapter",
    "read_effective": "engine.adapter",
    "resolve_launch": "engine.adapter",
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
