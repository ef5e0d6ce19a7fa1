"""The plan: everything decided before the first engine starts.

:func:`plan_run` loads each arm's adapter, validates its engine options, and refuses, before anything
launches, what the run could not measure honestly: a knob the engine lacks (core/engine/checks.py
:func:`~bakeoff.core.engine.checks.check_arm_capabilities`, beside the declarations it enforces), a missing API
key, an arm whose differences from another have no effect, a depth or concurrency level the arm's own
settings rule out; then each adapter's preflight inspects its files. It draws the per-pass arm orders from
the recorded seed and regroups them so arms that share a server run back to back. :func:`run_record` is
what run.json records before the first request; :func:`plan_warnings` the design caveats known now.

Arms that differ only in request-level values (``workload.max_tokens``, ``fixed_length``, ``thinking``)
describe the same server: :func:`server_key` says so, and core/engine/launcher.py's ``SharedEngine`` keeps that
one engine up across them. Everything else (n_max, split, KV type, model) changes the launch.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any

from ..common.errors import CapabilityNotSupported, ConfigError
from ..config.fingerprint import flatten
from ..config.prompts import resolve_prompts
from ..config.schema import Arm, BakeoffFile, Prompt, SamplingMode, Workload
from ..config.sessions import Session, load_sessions, pin_conversations
from ..engine.checks import check_arm_capabilities, check_structured, method_key
from ..engine.contract import EngineAdapter
from ..engine.fingerprint import arm_fingerprint
from ..engine.hardware import hardware_record
from ..engine.launch import check_program, launch_identity
from ..engine.launcher import port_is_free
from ..engine.pieces import Reader
from ..engine.registry import load_engine
from ..host.hostinfo import host_info
from ..measure.depth import refused_depths
from ..measure.points import samples_expected
from ..results.record import EngineRecord, RunRecord, ToolInfo

__all__ = ["PlannedArm", "Plan", "plan_run", "add_pass", "plan_warnings", "run_record", "effective_workload",
           "server_key", "order_for_sharing", "refuse_ineffective_arms", "check_depths_before_launch",
           "check_levels_before_launch", "stateful_warning", "fixed_port_taken"]


@dataclass
class PlannedArm:
    arm: Arm
    adapter: EngineAdapter
    index: int


@dataclass
class Plan:
    config: BakeoffFile
    arms: list[PlannedArm]
    prompts: list[Prompt]
    modes: dict[str, SamplingMode]
    orders: list[list[str]]  # arm names per pass
    # a sessions workload's conversations, read once here for the whole run (every arm, every pass)
    sessions: list[Session] | None = None
    # arms whose start failed for a reason a relaunch meets again (core/run/protocol.py NOT_RELAUNCHED) -> why,
    # until the later passes that skip them have said so (then ""); this process's starts only: a resume retries
    not_relaunched: dict[str, str] = field(default_factory=dict)

    @property
    def requests_total(self) -> int:
        return self.config.workload.passes * self.pass_requests(a.arm.name for a in self.arms)

    def pass_requests(self, arms: Iterable[str]) -> int:
        """The timed requests one pass of ``arms`` sends (a pass the loop adds may run only some arms)."""
        w, names = self.config.workload, set(arms)
        turns = sum(len(s.turns) for s in self.sessions) if self.sessions is not None else None
        return sum(samples_expected(effective_workload(w, a.arm), len(self.prompts), len(w.modes), turns=turns)
                   for a in self.arms if a.arm.name in names)


def plan_run(config: BakeoffFile) -> Plan:
    """Load adapters, validate engine options and capabilities, and preflight every arm.

    Nothing is launched: a config or preflight problem in any arm stops the run before it starts.
    """
    config = pin_conversations(config)  # a config not read from a file (the Python API) records its hash here
    arms = []
    structured = [p.structured for p in resolve_prompts(config.workload) if p.structured]
    for i, arm in enumerate(config.arms):
        adapter = load_engine(arm.engine)
        adapter.options(arm, i)
        check_arm_capabilities(adapter, arm)
        if config.workload.sessions is not None:
            if problem := adapter.prefix_cache.problem(arm):
                raise ConfigError(f"arm {arm.name!r}: {problem}")
            arm = adapter.prefix_cache.launch(arm)  # the prefix cache on, where the engine switches it at launch
        check_structured(adapter, arm, structured)
        arms.append(PlannedArm(arm, adapter, i))
    for planned in arms:  # every arm's program first: a missing build is said before any slower check
        if not planned.arm.attached:
            check_program(planned.adapter, planned.arm)
    for planned in arms:
        if planned.arm.api_key_env and not os.environ.get(planned.arm.api_key_env):
            raise ConfigError(f"arm {planned.arm.name!r}: api_key_env names ${planned.arm.api_key_env}, "
                              f"which is not set")
        if not planned.arm.attached:
            planned.adapter.preflight(planned.arm)
    refuse_ineffective_arms([(a.arm, a.adapter) for a in arms], config.workload)
    w = config.workload
    rng = random.Random(w.seed)
    names = [a.arm.name for a in arms]
    orders = []
    for p in range(w.passes):
        order = list(names)
        if p > 0 or w.passes > 1:
            rng.shuffle(order)
        orders.append(order)
    modes = {m: w.sampling_modes()[m] for m in w.modes}
    check_depths_before_launch(config, {a.arm.name: a.adapter for a in arms})
    check_levels_before_launch(config)
    sessions = load_sessions(w.sessions) if w.sessions is not None else None
    return Plan(config, arms, resolve_prompts(w), modes, order_for_sharing(orders, config.arms), sessions=sessions)


def add_pass(plan: Plan) -> int:
    """Adaptive passes: append one more pass to the plan and return its index.

    Its order is the one a plan made with that many passes would have drawn from the recorded seed, so an
    adaptive run is reproducible; the caller records ``plan.orders`` in run.json and runs it with
    ``run_plan(..., start_pass=index)``.
    """
    rng = random.Random(plan.config.workload.seed)
    names = [a.arm.name for a in plan.arms]
    for _ in range(len(plan.orders) + 1):
        order = list(names)
        rng.shuffle(order)
    plan.orders.append(order_for_sharing([order], plan.config.arms)[0])
    return len(plan.orders) - 1


def effective_workload(workload: Workload, arm: Arm) -> Workload:
    """The workload with this arm's request-level overrides applied (``arms[i].workload``)."""
    changes = {k: v for k, v in arm.workload.model_dump().items() if v is not None}
    return workload.model_copy(update=changes) if changes else workload


def server_key(arm: Arm) -> str:
    """Equal for arms that run on the same server: they differ only in name and request-level values."""
    launch = arm.model_dump(mode="json", exclude={"name", "workload", "sweep", "swept"})
    return json.dumps(launch, sort_keys=True, default=str)


def order_for_sharing(orders: Sequence[Sequence[str]], arms: Sequence[Arm]) -> list[list[str]]:
    """Each pass's order, regrouped so arms sharing a server run back to back (groups keep the order
    in which the shuffle first reached them, arms keep their shuffled order within a group)."""
    keys = {a.name: server_key(a) for a in arms}
    out = []
    for order in orders:
        groups: dict[str, list[str]] = {}
        for name in order:
            groups.setdefault(keys.get(name, name), []).append(name)
        out.append([name for group in groups.values() for name in group])
    return out


def _differences(a: Arm, b: Arm) -> dict[str, tuple[Any, Any]]:
    """Dotted keys whose values differ between two arms (name and sweep bookkeeping aside)."""
    skip = {"name", "sweep", "swept"}
    fa, fb = flatten(a.model_dump(mode="json", exclude=skip)), flatten(b.model_dump(mode="json", exclude=skip))
    return {k: (fa.get(k), fb.get(k)) for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)}


def refuse_ineffective_arms(arms: Sequence[tuple[Arm, EngineAdapter]], workload: Workload) -> None:
    """Refuse launched arms that differ in the file but would launch the same command and send the same
    requests: whatever tells them apart has no effect, and the report would present noise as its effect.

    Identical arms (twins that measure run-to-run noise) are allowed. Building every arm's launch here
    also moves any error an adapter raises while building it to before the first engine starts.

    :raises ConfigError: naming the keys that differ, the engine and the method, and both arms.
    """
    seen: dict[str, Arm] = {}
    for arm, adapter in arms:
        if arm.attached:
            continue
        fingerprint = launch_identity(adapter, arm, effective_workload(workload, arm))
        first = seen.setdefault(fingerprint, arm)
        differ = _differences(first, arm) if first is not arm else {}
        if differ:
            keys = ", ".join(f"{k} ({v[0]!r} vs {v[1]!r})" for k, v in differ.items())
            where = method_key(adapter.capabilities, arm.speculative) or arm.speculative.method
            raise ConfigError(
                f"{', '.join(differ)} has no effect on {adapter.name} {where.replace('/', '-')}: arms "
                f"{first.name!r} and {arm.name!r} differ in {keys} but would launch the same command and send "
                f"the same requests")


def check_depths_before_launch(config: BakeoffFile, adapters: dict[str, EngineAdapter]) -> None:
    """Refuse, before anything starts, depths no arm could run.

    :raises CapabilityNotSupported: an arm's engine cannot count tokens with its own tokenizer.
    :raises ConfigError: a depth does not fit the context the arm asks for (``settings.ctx``).
    """
    w = config.workload
    if not w.depths:
        return
    for arm in config.arms:
        adapter = adapters[arm.name]
        if type(adapter.reader).count_prompt_tokens is Reader.count_prompt_tokens:
            raise CapabilityNotSupported(f"arm {arm.name!r}: workload.depths needs the engine's own tokenizer; "
                                         f"{adapter.name} cannot count prompt tokens")
        max_tokens = arm.workload.max_tokens or w.max_tokens
        bad = refused_depths(w.depths, max_tokens, arm.settings.ctx)
        if bad:
            raise ConfigError(f"workload.depths: arm {arm.name!r}: " + "; ".join(bad.values()) +
                              " (settings.ctx); raise settings.ctx or drop the depth")


def check_levels_before_launch(config: BakeoffFile) -> None:
    """Refuse, before anything starts, levels an arm's own ``settings.parallel`` rules out.

    :raises ConfigError: naming ``workload.concurrency`` and the arm.
    """
    levels = config.workload.concurrency
    if not levels:
        return
    for arm in config.arms:
        if arm.settings.parallel is not None and max(levels) > arm.settings.parallel:
            raise ConfigError(f"workload.concurrency: arm {arm.name!r} asks for {max(levels)} streams but "
                              f"settings.parallel is {arm.settings.parallel}")


def fixed_port_taken(adapter: EngineAdapter, arm: Arm) -> str | None:
    """Why a launched arm's fixed ``settings.port`` cannot be had (another process holds it), or None.

    The run asks the same question at each launch (core/run/arm.py) and lets the engine fail on it, so the
    engine's own line is recorded; ``bakeoff check`` refuses the file with this line instead.
    """
    port = arm.settings.port
    if arm.attached or port is None or port_is_free(arm.settings.host, port):
        return None
    return (f"arm {arm.name!r}: {adapter.name} would fail to start (port-in-use): the port is taken by another "
            f"process (settings.port {port} on {arm.settings.host}); stop that process, or leave settings.port out "
            "for a free one")


def stateful_warning(arm: str, method: str, variant: str | None, stateful: Sequence[str], reps: int) -> str | None:
    """A warning when an arm's speculator keeps state across requests and one engine start serves reps > 1.

    ``stateful`` is the adapter's ``capabilities.stateful_speculators``: method names (``suffix``) or
    ``method-variant`` (``ngram-mod``). An unset variant matches when any variant of the method is
    stateful, since the engine's default may be one of them.
    """
    if method == "none" or reps <= 1:
        return None
    if method in stateful or (variant and f"{method}-{variant}" in stateful) or (
            not variant and any(s.startswith(f"{method}-") for s in stateful)):
        kind = f"{method}-{variant}" if variant else method
        return (f"{arm}: the {kind} speculator keeps state across requests, so its {reps} reps per engine start are "
                f"not independent (later reps can reuse earlier outputs); compare passes, or use reps: 1 with "
                f"more passes")
    return None


def plan_warnings(plan: Plan) -> list[str]:
    """Design caveats known before the first request (a stateful speculator serving several reps)."""
    out = []
    for a in plan.arms:
        spec = a.arm.speculative
        msg = stateful_warning(a.arm.name, spec.method, spec.variant, a.adapter.capabilities.stateful_speculators,
                               effective_workload(plan.config.workload, a.arm).reps)
        if msg:
            out.append(msg)
    return out


def run_record(plan: Plan) -> RunRecord:
    """What run.json records before the first request: resolved config (env values, URL credentials and
    key-flag values masked when written), order, seed, host, capabilities."""
    hardware = hardware_record([a.arm for a in plan.arms])
    return RunRecord(
        tool=ToolInfo(name="bakeoff", version=version("bakeoff")),
        config=plan.config,
        baseline=plan.config.baseline_arm,
        orders=plan.orders,
        seed=plan.config.workload.seed,
        prompts=[p.model_dump() for p in plan.prompts],
        engines={a.arm.name: EngineRecord(engine=a.adapter.name,
                                          capabilities=a.adapter.capabilities.model_dump(mode="json"))
                 for a in plan.arms},
        host=host_info(),
        gpus=hardware["gpus"],
        bandwidth=hardware["bandwidth"],
        roofline_models=hardware["roofline_models"],
        fingerprints={a.arm.name: arm_fingerprint(a.adapter, a.arm, effective_workload(plan.config.workload, a.arm))
                      for a in plan.arms},
        started_at=time.time(),
    )
