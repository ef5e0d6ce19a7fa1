"""bakeoff core: config, registry, launcher, client, protocol, statistics, storage, reports, CLI.

Core never imports an engine module and never names an engine. The public API for adapter authors
(built-in or plugin) is re-exported here.
"""

from __future__ import annotations

from importlib.metadata import version

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
from .config.schema import Arm, BakeoffFile, Prompt, Settings, Speculative, Workload
from .engine.adapter import (
    KNOBS,
    Capabilities,
    DraftRule,
    Effective,
    EngineAdapter,
    FailureRule,
    LaunchSpec,
    MethodKnobs,
    NoOptions,
    SelftestCase,
    SelftestRow,
    ServerStats,
    cli_flags,
    first_matching_line,
    method_key,
    openai_model_id,
    read_effective,
)
from .engine.client import bounded_get
from .engine.effective import compare_effective
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
from .results.sample import Sample
from .run.selftest import run_cases

__version__ = version("bakeoff")  # one source: pyproject.toml

__all__ = [
    "__version__",
    "NO_AMX_FLAGS",
    "Arm",
    "BakeoffFile",
    "BakeoffError",
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
    "LaunchSpec",
    "MeasurementError",
    "NoOptions",
    "PreflightError",
    "Sample",
    "SdistBuild",
    "ServerStats",
    "Settings",
    "Speculative",
    "Workload",
    "bounded_get",
    "build_from_sdist",
    "cache_root",
    "cached_binary",
    "cli_flags",
    "cpu_key",
    "first_matching_line",
    "openai_model_id",
    "read_effective",
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
    "run_cases",
    "scrape",
    "smollm2_gguf",
]
