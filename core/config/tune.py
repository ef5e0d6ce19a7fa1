"""The ``tune:`` section on paper: the candidates of the race, and the bakeoff files the tuner runs and writes.

A candidate is the baseline arm with one point of ``tune.space`` applied, expanded exactly as ``sweep:`` expands
(core/config/sweep.py), so a space key is checked, named and validated the way a sweep key is. The file's other
arms are fixed candidates. Everything here is on paper: no engine, no measurement (core/run/tune.py races).
"""

from __future__ import annotations

from typing import Any

from ..common.errors import ConfigError
from .schema import Arm, BakeoffFile, TuneSection
from .sweep import arm_name_for, expand_sweeps

__all__ = ["TuneArms", "candidate_settings", "race_config", "simplicity", "tune_arms", "verify_config",
           "winner_file"]

CANDIDATE_BASE = "tune"  # generated candidates are named tune-<key><value>-..., as sweep names its arms
_PAPER = "<tune.space>"  # the source name of the candidates' paper file, replaced in its errors
_COMPARED = ("speculative", "settings", "options", "env", "extra_args", "engine", "model", "workload")


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: data}


def candidate_settings(arm: Arm, baseline: Arm) -> dict[str, Any]:
    """What the candidate changes from the baseline, as dotted keys (the keys a space or sweep uses)."""
    mine = _flat({k: v for k, v in arm.model_dump(mode="json", exclude_none=True).items() if k in _COMPARED})
    ref = _flat({k: v for k, v in baseline.model_dump(mode="json", exclude_none=True).items() if k in _COMPARED})
    return {k: v for k, v in mine.items() if ref.get(k) != v and v not in ({}, [])}


class TuneArms:
    """The race's arms: the baseline (spec-off), then the fixed candidates, then those drawn from the space."""

    def __init__(self, baseline: Arm, fixed: list[Arm], generated: list[Arm], space: dict[str, list[Any]],
                 no_ops: list[str] | None = None) -> None:
        self.baseline, self.fixed, self.generated, self.space = baseline, fixed, generated, space
        self.no_ops = no_ops or []  # candidates left out: they change nothing from the baseline

    @property
    def candidates(self) -> list[Arm]:
        return [*self.fixed, *self.generated]

    def settings(self, name: str) -> dict[str, Any]:
        arm = next(a for a in [self.baseline, *self.candidates] if a.name == name)
        return candidate_settings(arm, self.baseline)


def simplicity(settings: dict[str, Any], space: dict[str, list[Any]]) -> tuple[int, tuple[int, ...]]:
    """How simple a setting is; smaller is simpler. First the number of keys it changes from the baseline
    (spec-off changes none), then, key by key in the space's order, the position of its value in that key's
    list (the file lists each key's simplest value first; a value not in the space counts as the last)."""
    positions = []
    for key, values in space.items():
        if key in settings:
            value = settings[key]
            positions.append(values.index(value) if value in values else len(values))
    return len(settings), tuple(positions)


def tune_arms(config: BakeoffFile, source: str = "<config>") -> TuneArms:
    """The baseline, the fixed candidates and one candidate per point of ``tune.space``.

    :raises ConfigError: no tune: section, a space key a sweep would refuse, or a point that makes an invalid arm.
    """
    tune = _section(config)
    baseline = next(a for a in config.arms if a.name == config.baseline_arm)
    fixed = [a for a in config.arms if a.name != baseline.name]
    data = baseline.model_dump(exclude_unset=True, exclude={"sweep", "swept"})
    data.update(name=CANDIDATE_BASE, sweep=tune.space)
    try:
        paper = BakeoffFile.model_validate({"name": config.name, "arms": [data]})
        generated = expand_sweeps(paper, _PAPER).arms
    except ConfigError as exc:  # sweep's words, said about the tune: section
        said = str(exc).removeprefix(f"{_PAPER}: ").replace("arms[0].sweep.", "tune.space.")
        raise ConfigError(f"{source}: {said.replace('sweep point', 'tune.space point')}") from None
    varied = [k for k, values in tune.space.items() if len(values) > 1]
    for arm in generated:
        arm.set_origin(baseline.origin)
        if varied and len(varied) < len(tune.space):  # a key every candidate shares says nothing in their names
            arm.name = arm_name_for(CANDIDATE_BASE, {k: v for k, v in arm.swept.items() if k in varied})
    names = {a.name for a in config.arms}
    clash = [a.name for a in generated if a.name in names]
    if clash:
        raise ConfigError(f"{source}: tune.space makes candidates named like arms of the file ({', '.join(clash)}); "
                          f"rename those arms")
    # a candidate that changes nothing (a space value equal to the baseline's, null for an unset option) would race
    # the baseline against its own copy: it costs budget, and a chance separation of identical arms becomes advice
    # (the file's own arms are left as written: they may differ in what candidate_settings does not compare)
    no_ops = [a.name for a in generated if not candidate_settings(a, baseline)]
    generated = [a for a in generated if a.name not in no_ops]
    if not fixed and not generated:
        raise ConfigError(f"{source}: tune: no candidate differs from the baseline {baseline.name!r} "
                          f"({', '.join(no_ops)} change nothing); give tune.space values other than the baseline's")
    return TuneArms(baseline, fixed, generated, tune.space, no_ops)


def _section(config: BakeoffFile) -> TuneSection:
    if config.tune is None:
        raise ConfigError("tune: the file has no 'tune:' section; add tune: {space: {speculative.n_max: [2, 4]}, "
                          "budget_s: 900} (docs/tune.md)")
    if config.phases is not None or config.calibrate or config.gate is not None or config.hosts is not None:
        raise ConfigError("tune: a tuning race runs arms on this machine; remove phases:, calibrate:, gate: and "
                          "hosts: from the file")
    if config.workload.sessions is not None:
        raise ConfigError("tune: races single requests at the use case's streams and depths; remove "
                          "workload.sessions")
    return config.tune


def _use_case(config: BakeoffFile, tune: TuneSection, passes: int, streams: list[int] | None) -> dict[str, Any]:
    changes: dict[str, Any] = {"passes": passes}
    if streams is not None:
        changes["concurrency"] = streams
    if tune.depths is not None:
        changes["depths"] = tune.depths
    if tune.prompts is not None:
        changes["prompts"] = tune.prompts
    return changes


def _file(config: BakeoffFile, name: str, arms: list[Arm], workload: dict[str, Any]) -> BakeoffFile:
    out = config.model_copy(update={
        "name": name, "arms": arms, "baseline": arms[0].name, "tune": None, "sweep": {},
        "workload": config.workload.model_copy(update=workload)})
    return BakeoffFile.model_validate(out.model_dump(exclude_unset=False))


def race_config(config: BakeoffFile, arms: TuneArms) -> BakeoffFile:
    """The race's bakeoff: every arm, the use case's streams, depths and prompts, one pass (the race adds more)."""
    tune = _section(config)
    out = _file(config, f"{config.name}-tune-race", [arms.baseline, *arms.candidates],
                _use_case(config, tune, 1, tune.streams))
    _keep_origins(out, [arms.baseline, *arms.candidates])
    return out


def verify_config(config: BakeoffFile, arms: list[Arm]) -> BakeoffFile:
    """The verification: baseline, winner (and runner-up), replayed at ``tune.verify_streams`` in that order."""
    tune = _section(config)
    out = _file(config, f"{config.name}-tune-verify", arms,
                _use_case(config, tune, tune.verify_passes, tune.verify_streams))
    _keep_origins(out, arms)
    return out


def _keep_origins(out: BakeoffFile, arms: list[Arm]) -> None:
    for new, old in zip(out.arms, arms, strict=True):
        new.set_origin(old.origin)


def winner_file(config: BakeoffFile, baseline: Arm, winner: Arm) -> dict[str, Any]:
    """A bakeoff file of the winner against spec-off at the use case, for anyone to re-check (plain YAML data)."""
    tune = _section(config)
    workload = config.workload.model_copy(update=_use_case(config, tune, max(3, config.workload.passes),
                                                           tune.streams))
    arms = [a.model_dump(mode="json", exclude_defaults=True, exclude={"swept", "sweep"}) for a in (baseline, winner)]
    return {"name": f"{config.name}-winner", "baseline": baseline.name, "arms": arms,
            "workload": workload.model_dump(mode="json", exclude_defaults=True)}
