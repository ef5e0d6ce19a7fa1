"""The adapter contract and core's use of it, under the name earlier code imports.

The contract (what a plugin implements) is :mod:`.contract`, with its pieces in :mod:`.pieces`; what core does
with it is :mod:`.launch` (resolve a launch, compose a service, the launch identity) and :mod:`.checks`
(capability checks and the compared read-back). This module re-exports all of them, so
``from bakeoff.core.engine.adapter import EngineAdapter`` keeps working.
"""

from __future__ import annotations

from .checks import (
    CORE_SETTINGS,
    check_arm_capabilities,
    check_structured,
    method_key,
    read_effective,
    selftest_cases,
    with_n_max_schedule,
)
from .contract import (
    KNOBS,
    RETIRED_HOOKS,
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
from .effective import Effective
from .launch import (
    PLAN_PORT,
    PLAN_WORKDIR,
    build_launch,
    check_program,
    compose_service,
    install_hint,
    launch_fingerprint,
    resolve_launch,
)
from .pieces import (
    GPU_LOG_TRAPS,
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

__all__ = [
    "CORE_SETTINGS",
    "GPU_LOG_TRAPS",
    "KNOBS",
    "PLAN_PORT",
    "PLAN_WORKDIR",
    "RETIRED_HOOKS",
    "Capabilities",
    "DraftRule",
    "Effective",
    "EngineAdapter",
    "FailureRule",
    "LaunchInputs",
    "LaunchSpec",
    "MethodKnobs",
    "Missing",
    "NMaxSchedule",
    "NoOptions",
    "PrefixCache",
    "Reader",
    "ReferenceBench",
    "Selftest",
    "SelftestCase",
    "SelftestRow",
    "ServerStats",
    "StructuredOutputs",
    "Witness",
    "build_launch",
    "check_arm_capabilities",
    "check_program",
    "check_structured",
    "cli_flags",
    "compose_service",
    "first_matching_line",
    "install_hint",
    "launch_fingerprint",
    "method_key",
    "openai_model_id",
    "read_effective",
    "resolve_launch",
    "selftest_cases",
    "with_n_max_schedule",
]
