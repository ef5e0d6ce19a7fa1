"""Forced-acceptance calibration: how much speed each engine turns a given acceptance into, per n_max.

Two things decide whether speculation pays: how many drafts are accepted (the drafter, the prompt) and
what a verify step costs (the engine, the hardware). A ``calibrate:`` section separates them by forcing
the acceptance: llama.cpp serves models bakeoff synthesizes with the acceptance built in
(engines/llamacpp/synth.py: an MTP head that misses a chosen fraction of tokens, or an agreeing/random
DFlash pair), vLLM uses its synthetic rejection sampler. Every (acceptance, n_max) becomes an arm, plus
one spec-off arm per section; the analysis pairs each point with spec-off request by request.

This module plans the points and turns them into arms, on paper; core/analysis/calibration.py measures them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from ..common.errors import ConfigError
from .schema import Arm, BakeoffFile, CalibrateSection

__all__ = [
    "CalPoint",
    "calibration_arms",
    "expand_calibration",
    "mtp_file_acceptance",
    "plan_points",
    "vllm_acceptance_rates",
]

GRID = 200  # MTP file acceptances tried when looking for the one that gives a target at some n_max


@dataclass(frozen=True)
class CalPoint:
    """One arm of a calibration section (``method == "off"`` for its spec-off reference)."""

    arm: str
    engine: str
    method: str
    n_max: int | None = None
    target_acceptance: float | None = None
    expected_acceptance: float | None = None  # what the forcing mechanism should produce (llama.cpp MTP: simulated)
    file_acceptance: float | None = None  # llama.cpp MTP: the synthesized head's acceptance at n_max 1


# -- planning ---------------------------------------------------------------------------------


def _fmt(a: float) -> str:
    return f"{a:.2f}"


def _prefix(section: CalibrateSection) -> str:
    return f"cal-{section.engine}-{section.method}"


@functools.lru_cache(maxsize=64)
def _mtp_grid(n_max: int) -> tuple[tuple[float, float], ...]:
    from bakeoff.engines.llamacpp.synth import expected_mtp_acceptance

    return tuple((p / GRID, expected_mtp_acceptance(p / GRID, n_max, drafts=600)) for p in range(GRID + 1))


def mtp_file_acceptance(target: float, n_max: int) -> tuple[float, float]:
    """The MTP file acceptance (its acceptance at n_max 1) whose simulated acceptance at ``n_max`` is closest
    to ``target``, and that simulated acceptance. At n_max > 1 the head's misses cut draft chains, so the
    relation is not the identity (nor monotone): it is searched on a grid."""
    if n_max == 1 or target in (0.0, 1.0):
        return target, target
    from bakeoff.engines.llamacpp.synth import expected_mtp_acceptance

    p, _ = min(_mtp_grid(n_max), key=lambda pe: (abs(pe[1] - target), pe[0]))
    return p, expected_mtp_acceptance(p, n_max)


def vllm_acceptance_rates(target: float, n_max: int) -> list[float]:
    """vLLM's ``synthetic_acceptance_rates`` (unconditional: position i is accepted with its predecessors)
    for a mean acceptance ``target`` = accepted / drafted: each position is accepted with a constant
    conditional probability c, solved so that sum(c^i, i=1..n) / n = target."""
    if target in (0.0, 1.0):
        return [target] * n_max

    def mean(c: float) -> float:
        return sum(c ** i for i in range(1, n_max + 1)) / n_max

    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean(mid) < target else (lo, mid)
    c = (lo + hi) / 2
    return [round(c ** (i + 1), 6) for i in range(n_max)]


def plan_points(section: CalibrateSection) -> list[CalPoint]:
    """Every arm a section runs: spec-off first, then n_max x acceptance in file order."""
    prefix = _prefix(section)
    points = [CalPoint(f"cal-{section.engine}-{section.method}-off", section.engine, "off")]
    for n in section.n_max:
        for a in section.acceptance:
            expected, file_a = a, None
            if section.engine == "llamacpp" and section.method == "mtp":
                file_a, expected = mtp_file_acceptance(a, n)
            points.append(CalPoint(f"{prefix}-n{n}-a{_fmt(a)}", section.engine, section.method, n, a, expected,
                                   file_a))
    return points


def _dims(section: CalibrateSection) -> Any:
    from bakeoff.engines.llamacpp.synth import Dims

    dims = Dims()
    if isinstance(section.shape, dict):
        try:
            dims = replace(dims, **cast(dict[str, Any], section.shape))
        except TypeError as exc:
            raise ConfigError(f"calibrate.shape: {exc}; keys: {', '.join(Dims.__dataclass_fields__)}") from None
    if section.method == "dflash":  # DFlash drafts at most block_size - 1 tokens
        dims = replace(dims, block_size=max(dims.block_size, max(section.n_max) + 1))
    return dims


Synthesizer = Callable[[Any], Path]


def _llamacpp_arm(section: CalibrateSection, point: CalPoint, synth: Synthesizer) -> dict[str, Any]:
    from bakeoff.engines.llamacpp.synth import SynthSpec

    dims = _dims(section)
    base: dict[str, Any] = {"name": point.arm, "engine": "llamacpp",
                            "settings": section.settings.model_dump(exclude_unset=True),
                            "options": dict(section.options),
                            # random weights: their token sequences do not re-tokenize to themselves, so the text
                            # witness (core/run/arm.py) would read every answer as short; the stream's own
                            # counts and the engine's timings are the witnesses here
                            "workload": {"text_witness": False}}
    if section.method == "mtp":
        acc = 1.0 if point.file_acceptance is None else point.file_acceptance
        base["model"] = str(synth(SynthSpec("mtp", agree=True, acceptance=acc, dims=dims)))
        if point.method != "off":  # p_min 0: every step drafts n_max tokens, so steps = drafts
            base["speculative"] = {"method": "mtp", "n_max": point.n_max, "p_min": 0.0}
        return base
    agree = point.method == "off" or point.target_acceptance == 1.0
    target = SynthSpec("target", agree=agree, dims=dims)
    base["model"] = str(synth(target))
    if point.method != "off":
        draft = synth(replace(target, kind="dflash", seed=1))
        base["speculative"] = {"method": "dflash", "n_max": point.n_max, "p_min": 0.0, "draft_model": str(draft)}
    return base


def _vllm_arm(section: CalibrateSection, point: CalPoint) -> dict[str, Any]:
    options = dict(section.options)
    base: dict[str, Any] = {"name": point.arm, "engine": "vllm", "model": section.model or "smollm2",
                            "settings": section.settings.model_dump(exclude_unset=True)}
    if point.method != "off":
        assert point.n_max is not None and point.target_acceptance is not None
        spec: dict[str, Any] = {"method": point.method, "n_max": point.n_max}
        if point.method == "draft":
            spec["draft_model"] = section.model or "smollm2"
        base["speculative"] = spec
        options["speculative_extra"] = {
            **options.get("speculative_extra", {}), "rejection_sample_method": "synthetic",
            "synthetic_acceptance_rates": vllm_acceptance_rates(point.target_acceptance, point.n_max)}
    base["options"] = options
    return base


def calibration_arms(section: CalibrateSection, synth: Synthesizer | None = None) -> list[Arm]:
    """The arms of one section; llama.cpp models are synthesized (cached) on the way."""
    if synth is None:
        from bakeoff.engines.llamacpp.synth import synthesize

        synth = synthesize
    arms = []
    for point in plan_points(section):
        data = _llamacpp_arm(section, point, synth) if section.engine == "llamacpp" else _vllm_arm(section, point)
        arms.append(Arm.model_validate(data))
    return arms


def expand_calibration(config: BakeoffFile, source: str = "<config>",
                       synth: Synthesizer | None = None) -> BakeoffFile:
    """Append every calibration arm the file does not hold yet (idempotent: a resolved config that already
    lists them, as run.json does, comes back unchanged and nothing is synthesized)."""
    if not config.calibrate:
        return config
    have = {a.name for a in config.arms}
    added: list[Arm] = []
    for index, section in enumerate(config.calibrate):
        names = [p.arm for p in plan_points(section)]
        if all(n in have for n in names):
            continue
        if any(n in have for n in names):
            clash = next(n for n in names if n in have)
            raise ConfigError(f"{source}: calibrate[{index}]: an arm is already named {clash!r}")
        try:
            added += calibration_arms(section, synth)
        except (ValueError, OSError) as exc:
            raise ConfigError(f"{source}: calibrate[{index}]: {exc}") from None
        have.update(names)
    if not added:
        return config
    arms = [*config.arms, *added]
    return config.model_copy(update={"arms": arms})


