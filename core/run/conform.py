"""``bakeoff conform``'s battery: the same few requests against every arm, through the normal protocol.

Each arm (from a bakeoff file, or one attached to a URL) is run twice, each time exactly like an arm of
``bakeoff run`` (plan, preflight, launch or attach, read-back, warm-up, timed requests, stop):

1. *prompts*: one plain greedy prompt at a fixed length, twice, then one JSON-schema answer and one tool call
   (where the engine takes them): the witnesses, the counter invariants, the acceptance cross-checks and the
   structured drafting tally all run on these samples;
2. *cache*: one two-turn session with the prefix cache on, so the second turn repeats the first one's prompt:
   its ``cached_tokens`` and the engine's own cache counter.

Where an adapter can ask the engine to name every token it streams (``options.witness_every``), every request
asks. core/measure/conform.py judges the stored samples; nothing here reads a number itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common.errors import BakeoffError
from ..config.schema import (
    Arm,
    BakeoffFile,
    Prompt,
    SessionsSpec,
    Structured,
    StructuredKind,
    SyntheticSessions,
    Workload,
)
from ..engine.registry import load_engine
from ..measure.conform import ArmConformance, ConformSummary, judge_arm
from ..results.record import ArmAttempt
from ..results.sample import Sample
from ..results.store import RunDir, new_run_dir, read_samples
from .plan import plan_run, run_record
from .protocol import run_plan

__all__ = ["CONFORM_PROMPT", "ArmBattery", "battery_workloads", "conform_arm", "conform_arms"]

# A copy task: every drafter has something to draft (n-gram lookup finds the prompt's own text), so a
# speculative arm that drafts nothing on it says something about the engine, not the prompt.
CONFORM_PROMPT = Prompt(name="conform", kind="code", messages=[
    {"role": "user", "content": "Copy this Python function exactly, then stop:\n\n"
                                "def squares(n):\n    out = []\n    for i in range(1, n + 1):\n"
                                "        out.append(i * i)\n    return out\n\n"
                                "def cubes(n):\n    out = []\n    for i in range(1, n + 1):\n"
                                "        out.append(i * i * i)\n    return out\n"}])


def battery_workloads(base: Workload, max_tokens: int = 32) -> tuple[Workload, Workload]:
    """The two workloads of the battery (prompts, then the repeated-prefix session); timeouts from ``base``."""
    common: dict[str, Any] = {"passes": 1, "warmup": 1, "warmup_settle": None, "text_witness": True, "gates": [],
                              "request_timeout_s": min(base.request_timeout_s, 120), "extra_launches": 0,
                              "boot_timeout_s": base.boot_timeout_s}
    prompts = Workload(suite=[CONFORM_PROMPT], max_tokens=max_tokens, reps=2,
                       structured=Structured(max_tokens=48), **common)
    cache = Workload(max_tokens=16, reps=1, fixed_length=False, sessions=SessionsSpec(
        synthetic=SyntheticSessions(sessions=1, turns=2, tool_result_tokens=60, reply_tokens=8)),
        **common)
    return prompts, cache


def _witnessed(arm: Arm) -> Arm:
    """The arm asking its engine to name every token it streams, where its adapter has the switch."""
    try:
        adapter = load_engine(arm.engine)
    except BakeoffError:
        return arm  # plan_run says why, in its words
    if "witness_every" in adapter.Options.model_fields and "witness_every" not in arm.options:
        return arm.model_copy(update={"options": {**arm.options, "witness_every": 1}})
    return arm


@dataclass
class ArmBattery:
    """One arm's battery as it ran: its samples, engine starts, run directories and notes."""

    samples: list[Sample] = field(default_factory=list)
    turns: list[Sample] = field(default_factory=list)
    attempts: list[ArmAttempt] = field(default_factory=list)
    run_dirs: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _run_one(arm: Arm, workload: Workload, out: Path, name: str, battery: ArmBattery) -> list[Sample]:
    config = BakeoffFile(name=name, arms=[arm], workload=workload)
    plan = plan_run(config)
    run = RunDir(new_run_dir(out, name))
    battery.run_dirs.append(run.path)
    run.write_record(run_record(plan))
    records = run_plan(plan, run)
    battery.attempts += records.get(arm.name, [])
    return read_samples(run.path)


def conform_arm(arm: Arm, base: Workload, out: Path, log: Callable[[str], None] = lambda msg: None,
                max_tokens: int = 32) -> tuple[ArmConformance, ArmBattery]:
    """Run the battery on one arm and judge it.

    :raises BakeoffError: the arm cannot be planned at all (unknown engine, missing model or program).
    """
    arm = _witnessed(arm)
    prompts, cache = battery_workloads(base, max_tokens)
    battery = ArmBattery()
    choices: tuple[list[StructuredKind] | None, ...] = (["json_schema", "tool_call"], ["json_schema"], None)
    if not arm.speculative.enabled:
        # the structured check is about drafting: without speculation the JSON answer alone still feeds the other
        # checks, and a tool call would fail on the witness (llama.cpp: "logprobs is not supported with tools")
        choices = choices[1:]
    for kinds in choices:  # what the arm takes as launched
        tried = prompts.model_copy(update={"structured": Structured(kinds=kinds, max_tokens=48) if kinds else None})
        try:
            plan_run(BakeoffFile(name="conform", arms=[arm], workload=tried))
        except BakeoffError as exc:  # e.g. vLLM refuses tools without a tool-call parser: JSON schema alone
            battery.notes.append(f"structured {'+'.join(kinds or [])} refused: {exc}")
            continue
        prompts = tried
        break
    log(f"{arm.name}: prompts (plain x2, structured)")
    battery.samples = _run_one(arm, prompts, out, f"conform-{arm.name}", battery)
    log(f"{arm.name}: repeated prefix (2-turn session, prefix cache on)")
    try:
        battery.turns = _run_one(arm, cache, out, f"conform-{arm.name}-cache", battery)
    except BakeoffError as exc:  # an arm that cannot replay sessions (its cache switched off at launch)
        battery.notes.append(f"repeated-prefix session refused: {exc}")
    verdict = judge_arm(arm.name, arm.engine, battery.samples, battery.turns, battery.attempts,
                        speculative_asked=arm.speculative.enabled)
    for note in battery.notes:
        for check in verdict.checks:
            if check.id == "drafting-structured" and "structured" in note:
                check.figures = f"{check.figures}; tool calls not sent (refused as launched)" \
                    if check.result != "n/a" else note
            if check.result == "n/a" and check.id.startswith("cache") and "session" in note:
                check.figures = note
    return verdict, battery


def conform_arms(config: BakeoffFile, source: str, out: Path, log: Callable[[str], None] = lambda msg: None,
                 max_tokens: int = 32) -> tuple[ConformSummary, dict[str, ArmBattery]]:
    """The battery on every arm of ``config``, in order; one failing arm never stops the others."""
    summary = ConformSummary(source=source)
    batteries: dict[str, ArmBattery] = {}
    for arm in config.arms:
        verdict, battery = conform_arm(arm, config.workload, out, log, max_tokens)
        summary.arms.append(verdict)
        summary.run_dirs += [str(p) for p in battery.run_dirs]
        batteries[arm.name] = battery
    return summary, batteries
