"""What core checks with the adapter contract before anything starts, and the read-back it compares: every arm
knob the engine lacks is refused, structured request kinds and the n_max schedule are asked of their pieces,
and the engine's read-back gets core's asked-versus-running comparison.

The contract itself (what a plugin implements) is core/engine/contract.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import httpx

from ..common.errors import CapabilityNotSupported
from ..config.schema import Arm, Speculative
from .contract import Capabilities, EngineAdapter
from .effective import Effective, compare_effective
from .pieces import SelftestCase
from .readback import EngineLog

__all__ = [
    "CORE_SETTINGS",
    "check_arm_capabilities",
    "check_structured",
    "method_key",
    "read_effective",
    "selftest_cases",
    "with_n_max_schedule",
]

CORE_SETTINGS = frozenset({"gpus"})  # settings core applies itself (CUDA_VISIBLE_DEVICES), for every engine


def read_effective(adapter: EngineAdapter, http: httpx.Client, arm: Arm, log: EngineLog | None = None) -> Effective:
    """The engine's read-back with core's asked-versus-running mismatches added after the adapter's own.

    :param log: the engine's log so far (None: attached, no log).
    """
    eff = adapter.reader.effective_settings(http, arm, log or EngineLog())
    terms = {name: adapter.reader.engine_term(name, arm) for name in ("spec_method", "kv_type")}
    eff.mismatches += compare_effective(arm, eff, adapter.display_name or adapter.name, terms)
    return eff


def check_arm_capabilities(adapter: EngineAdapter, arm: Arm) -> None:
    """Refuse, before launch, any knob the engine lacks: a silent no-op would mislabel the arm.

    Speculative knobs are checked against what the arm's method (and n-gram variant) takes, so a knob the
    engine has for one method is still refused for another that would ignore it.

    :raises CapabilityNotSupported: naming the field, the method and what the engine offers instead.
    """
    caps = adapter.capabilities
    _check_speculative(adapter, arm)
    if not arm.attached:
        for knob in sorted(arm.settings.set_fields() - set(caps.settings) - CORE_SETTINGS):
            raise CapabilityNotSupported(
                f"arm {arm.name!r}: settings.{knob} has no {adapter.name} flag; it is refused rather than "
                f"ignored (supported: {', '.join(caps.settings)})")
        if arm.launch not in caps.launch_modes:
            raise CapabilityNotSupported(
                f"arm {arm.name!r}: launch {arm.launch!r} is not available for {adapter.name} "
                f"(available: {', '.join(caps.launch_modes)})")
    if arm.settings.split and caps.split_modes and arm.settings.split not in caps.split_modes:
        raise CapabilityNotSupported(f"arm {arm.name!r}: settings.split {arm.settings.split!r} not in "
                                     f"{', '.join(caps.split_modes)}")
    if arm.settings.kv_type and caps.kv_types and arm.settings.kv_type not in caps.kv_types:
        raise CapabilityNotSupported(f"arm {arm.name!r}: settings.kv_type {arm.settings.kv_type!r} is not a "
                                     f"{adapter.name} KV cache type ({', '.join(caps.kv_types)})")


def check_structured(adapter: EngineAdapter, arm: Arm, kinds: Iterable[str]) -> None:
    """Refuse, before launch, structured requests the engine does not take (a server that ignored
    ``response_format`` would answer free text, and every answer would read as invalid).

    :raises CapabilityNotSupported: naming the kind and what the engine takes.
    """
    offered, wanted = adapter.structured.kinds, list(dict.fromkeys(kinds))
    for kind in wanted:
        if kind not in offered:
            raise CapabilityNotSupported(
                f"arm {arm.name!r}: {adapter.name} does not declare {kind} requests (it takes: "
                f"{', '.join(offered) or 'none'}); leave the structured prompts out for this arm's run")
    if wanted and (problem := adapter.structured.problem(arm, wanted)):
        raise CapabilityNotSupported(f"arm {arm.name!r}: {problem}")


def method_key(caps: Capabilities, spec: Speculative) -> str | None:
    """The ``speculative`` entry an arm's method and variant select ('ngram/mod'), or None if undeclared."""
    if not caps.variants(spec.method):
        return spec.method if spec.method in caps.speculative and spec.variant is None else None
    variant = spec.variant or caps.default_variants.get(spec.method)
    key = f"{spec.method}/{variant}"
    return key if key in caps.speculative else None


def _check_speculative(adapter: EngineAdapter, arm: Arm) -> None:
    caps, spec, engine = adapter.capabilities, arm.speculative, adapter.name
    who = f"arm {arm.name!r}"
    if spec.method not in caps.speculative_methods:
        raise CapabilityNotSupported(f"{who}: {engine} has no speculative method {spec.method!r}; "
                                     f"it supports: {', '.join(caps.speculative_methods)}")
    variants = caps.variants(spec.method)
    if spec.variant is not None and not variants:
        raise CapabilityNotSupported(f"{who}: speculative.variant has no effect on {engine} method {spec.method!r}, "
                                     f"which has no variants; {_variant_owners(caps)}")
    if variants and spec.variant is None and spec.method not in caps.default_variants:
        raise CapabilityNotSupported(f"{who}: {engine} method {spec.method!r} needs speculative.variant "
                                     f"(one of: {', '.join(variants)})")
    if variants and spec.variant is not None and spec.variant not in variants:
        raise CapabilityNotSupported(f"{who}: speculative.variant {spec.variant!r} is not a {engine} "
                                     f"{spec.method} variant; it offers: {', '.join(variants)}")
    key = method_key(caps, spec)
    assert key is not None
    declared = caps.speculative[key]
    where = f"{engine} {_label(key)}"
    takes = f"it takes: {', '.join(declared.knobs) or 'no knobs'}"
    for knob in sorted(spec.set_fields() - {"variant", "draft_model"} - set(declared.knobs)):
        others = [k.replace("/", "-") for k, m in caps.speculative.items() if knob in m.knobs]
        elsewhere = f" ({knob} is taken by: {', '.join(others)})" if others else ""
        raise CapabilityNotSupported(f"{who}: speculative.{knob} has no effect on {where}; {takes}{elsewhere}")
    if spec.draft_model is not None and declared.draft_model == "forbidden":
        raise CapabilityNotSupported(f"{who}: speculative.draft_model has no effect on {where}: it uses no draft "
                                     f"model; {takes}")
    if arm.attached:
        return  # the server is already running: what it needs is not ours to set
    if spec.draft_model is None and declared.draft_model == "required":
        raise CapabilityNotSupported(f"{who}: {where} needs speculative.draft_model (the draft model); without one "
                                     f"the engine would not speculate as labelled")
    for knob in declared.required:
        if getattr(spec, knob) is None:
            raise CapabilityNotSupported(f"{who}: {where} needs speculative.{knob} (the engine has no default "
                                         f"for it)")


def _label(key: str) -> str:
    """'ngram/simple' -> 'ngram-simple' (the name engines and messages use); plain methods as they are."""
    method, _, variant = key.partition("/")
    return f"method {method!r}" if not variant else f"{method}-{variant} (method {method!r}, variant {variant!r})"


def _variant_owners(caps: Capabilities) -> str:
    owners = [m for m in caps.speculative_methods if caps.variants(m)]
    return f"variants exist for: {', '.join(owners)}" if owners else "it has no method with variants"


def with_n_max_schedule(adapter: EngineAdapter, arm: Arm, schedule: list[list[int]]) -> Arm:
    """The arm with a per-batch-size n_max schedule (``bakeoff tune``'s compile), through the adapter's piece.

    :raises CapabilityNotSupported: the engine takes none, or not as installed for this arm (its piece says why).
    """
    if adapter.n_max_schedule is None:
        raise CapabilityNotSupported(f"{adapter.display_name or adapter.name} takes no per-batch-size n_max schedule")
    return adapter.n_max_schedule.apply(arm, schedule)


def selftest_cases(adapter: EngineAdapter, log: Callable[[str], None]) -> tuple[list[SelftestCase], list[str]]:
    """The adapter's self-test cases and the mapped methods without one (``bakeoff selftest``).

    :raises CapabilityNotSupported: the adapter has no self-test.
    """
    if adapter.selftest is None:
        raise CapabilityNotSupported(f"{adapter.name} has no self-test")
    return adapter.selftest.cases(log)
