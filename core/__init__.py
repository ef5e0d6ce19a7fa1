"""bakeoff core: config, registry, launcher, client, protocol, statistics, storage, reports, CLI.

Core never imports an engine module and never names an engine. The public API for adapter authors
(built-in or plugin) is re-exported here.
"""

from __future__ import annotations

from .adapter import (
    Capabilities,
    Effective,
    EngineAdapter,
    FailureRule,
    LaunchSpec,
    NoOptions,
    ServerStats,
    first_matching_line,
)
from .config import Arm, BakeoffFile, Settings, Speculative, Workload
from .errors import (
    BakeoffError,
    CapabilityNotSupported,
    ConfigError,
    EngineError,
    EngineStartupError,
    EngineUnavailable,
    MeasurementError,
    PreflightError,
)
from .sample import Sample

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "Arm",
    "BakeoffFile",
    "BakeoffError",
    "Capabilities",
    "CapabilityNotSupported",
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
    "ServerStats",
    "Settings",
    "Speculative",
    "Workload",
    "first_matching_line",
]
