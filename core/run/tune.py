"""``bakeoff tune FILE``: race the candidates of ``tune.space`` against spec-off, verify the winner, compile it.

The race is an ordinary run (:func:`~bakeoff.core.run.bakeoff.run_bakeoff`: one run directory, every request
through ArmRun) whose pass policy (core/run/passes.py) is the race: after each pass a look
(core/analysis/racing.py) drops the candidates separably slower than the current best, and the next pass runs
only the baseline and the candidates left, in the order :func:`~bakeoff.core.run.plan.add_pass` draws from the
seed. It ends when one candidate is left and told apart
from spec-off, at ``tune.max_passes``, or when the next pass would overrun ``tune.budget_s``.

Then the named arm (the winner, or the simplest of the plateau) is compiled into the engine's own words (the
adapter's own translation: its launch command and config files, less the baseline's), written as a bakeoff file
against spec-off, and verified in a second run at ``tune.verify_streams`` with the runner-up and spec-off: a level
where it is separably slower than spec-off is a collapse, and its requests that drafted nothing give the cost of
speculation on with nothing drafted. Where the stream counts call for different n_max values, a per-batch-size
schedule is compiled when the engine takes one. ``promote`` hands a verified winner to core/run/promote.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from ..analysis.racing import (
    TUNE_FILE,
    RaceCandidate,
    ScheduleLevel,
    Status,
    TuneResult,
    TuneVerify,
    VerifyPoint,
    batch_schedule,
    look,
    n_max_by_streams,
    nothing_drafted,
    ratio_to_baseline,
    read_tune,
    separable,
    tune_decision,
)
from ..analysis.stats import MIN_ADAPTIVE_PASSES, verdict
from ..common.errors import CapabilityNotSupported, ConfigError
from ..config.schema import Arm, BakeoffFile, TuneSection
from ..config.tune import (
    TuneArms,
    candidate_settings,
    race_config,
    simplicity,
    tune_arms,
    verify_config,
    winner_file,
)
from ..engine.checks import with_n_max_schedule
from ..engine.contract import EngineAdapter
from ..engine.launch import build_launch
from ..engine.registry import load_engine
from ..results.sample import Sample
from ..results.store import RunDir
from .bakeoff import run_bakeoff
from .events import RunEvents
from .plan import Plan

__all__ = ["TUNE_FILE", "TuneOutcome", "compile_schedule", "engine_config", "n_max_arms", "promote_winner", "read_tune",
           "run_tune"]

WINNER_FILE = "tune-winner.yaml"


@dataclass
class TuneOutcome:
    race: RunDir
    verify: RunDir | None
    result: TuneResult


def _flag_items(argv: list[str]) -> list[tuple[str, str | None]]:
    """argv as (flag, value) items: a flag takes the next token as its value unless that is a flag too."""
    items: list[tuple[str, str | None]] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token.startswith("-") and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            items.append((token, argv[i + 1]))
            i += 2
        else:
            items.append((token, None))
            i += 1
    return items


def engine_config(adapter: EngineAdapter[Any], arm: Arm, baseline: Arm, workdir: Path,
                  out: Path | None = None) -> dict[str, Any]:
    """The arm's setting in the engine's own words, from the adapter's own translation (its launch spec): the
    flags of its launch command that the baseline's command lacks, any JSON-valued flag parsed (vLLM
    ``--speculative-config``), and the config files the engine reads (TabbyAPI's config.yml) where they differ
    from the baseline's: the sections that differ under ``config``, and with ``out`` each whole file written
    there as ``tune-winner-<name>`` (listed under ``config_files``)."""
    if arm.attached or arm.launch == "compose":
        return {"engine": arm.engine, "note": "attached or compose arm: no launch command to read the flags from"}
    port = arm.settings.port or 8080
    spec, ref_spec = build_launch(adapter, arm, port, workdir), build_launch(adapter, baseline, port, workdir)
    mine = _flag_items(spec.argv)
    ref = set(_flag_items(ref_spec.argv))
    flags = [x for item in mine if item not in ref for x in item if x is not None]
    result: dict[str, Any] = {"engine": arm.engine, "flags": flags}
    for flag, value in mine:
        if value is not None and value.startswith("{") and (flag, value) not in ref:
            with suppress(json.JSONDecodeError):
                result[flag.lstrip("-").replace("-", "_")] = json.loads(value)
    for name, text in spec.files.items():
        changed = _changed_sections(text, ref_spec.files.get(name))
        if not changed:
            continue
        result.setdefault("config", {})[name] = changed
        if out is not None:
            path = out / f"tune-winner-{Path(name).name}"
            path.write_text(text)
            result.setdefault("config_files", {})[name] = str(path)
    return result


def _changed_sections(text: str, ref: str | None) -> dict[str, Any] | str | None:
    """The top-level sections of a YAML/JSON config file that differ from the baseline's (the whole text when it
    is not a mapping); None when nothing differs (a comment naming the arm is no difference)."""
    try:
        mine, theirs = yaml.safe_load(text), yaml.safe_load(ref or "")
    except yaml.YAMLError:
        return None if text == ref else text
    if not isinstance(mine, dict):
        return None if mine == theirs else text
    theirs = theirs if isinstance(theirs, dict) else {}
    return {k: v for k, v in mine.items() if theirs.get(k) != v} or None


def _ok_count(samples: list[Any], arm: str) -> int:
    return sum(1 for s in samples if s.arm == arm and s.status == "ok" and s.decode_tps)


class _Race:
    """The race as the pass loop's policy (core/run/passes.py): after each pass a look drops the candidates
    separably slower than the current best; the next pass runs the baseline and the candidates left, until one is
    left and told apart from spec-off, every one is dropped, ``tune.max_passes``, or the budget. Who was dropped
    when and against whom, and why it stopped, stay here for the result."""

    def __init__(self, arms: TuneArms, seed: int, tune: TuneSection, events: RunEvents,
                 clock: Callable[[], float], margin: float) -> None:
        self.arms, self.seed, self.max_passes, self.budget_s = arms, seed, tune.max_passes, tune.budget_s
        self.margin = margin  # workload.equivalence_margin: within it of the best, a candidate stays
        self.events, self.clock, self.started = events, clock, clock()
        self.baseline = arms.baseline.name
        self.alive = [a.name for a in arms.candidates]
        self.dropped: dict[str, dict[str, Any]] = {}
        self.best = self.baseline
        self.passes, self.arm_runs, self.stopped = 0, 0, ""

    def next_pass(self, run: RunDir, plan: Plan) -> list[str] | None:
        self.passes = len(plan.orders)
        self.arm_runs += len(plan.orders[-1])
        self.stopped = self._stop(run)
        return None if self.stopped else [self.baseline, *self.alive]

    def drawn(self, run: RunDir, plan: Plan, index: int) -> None:
        pass

    def _stop(self, run: RunDir) -> str:
        """Why the race ends after this pass ("" while it goes on)."""
        passes = self.passes
        if _ok_count(run.samples(), self.baseline) == 0:  # exit 3 or 4 (the run's own outcome), never 2
            why = (f"the baseline {self.baseline!r} has no valid request after pass {passes}: every ratio is read "
                   "against it")
            self.events.on_warning(f"tune: {why} (see {run.path})")
            return why
        self.look(run, passes, self.events.on_note)
        if not self.alive:
            return "every candidate was dropped"
        if self.decided(run, passes):
            return "one candidate left, told apart from spec-off"
        if passes >= self.max_passes:
            return f"max passes ({self.max_passes})"
        spent = self.clock() - self.started
        next_cost = spent / self.arm_runs * (len(self.alive) + 1)
        if spent + next_cost > self.budget_s:
            return f"budget: another pass would take about {next_cost:.0f} s more of {self.budget_s:g} s"
        return ""

    def look(self, run: RunDir, passes: int, say: Callable[[str], None]) -> None:
        samples = run.samples()
        for name in [n for n in self.alive if _ok_count(samples, n) == 0]:  # failed: nothing to race with
            self.alive.remove(name)
            self.dropped[name] = {"after": 0, "pass": passes, "vs": "failed (no valid request)"}
            say(f"tune: {name} dropped: no valid request in pass {passes}")
        lk = look(samples, self.alive, self.baseline, passes, self.max_passes, margin=self.margin, seed=self.seed)
        self.best = lk.best
        for name, ci in lk.dropped.items():
            self.alive.remove(name)
            self.dropped[name] = {"after": _ok_count(samples, name), "pass": passes, "vs": lk.best}
            say(f"tune: {name} dropped after pass {passes}: {ci.estimate:.2f}x of {lk.best} "
                f"({ci.lo:.2f}-{ci.hi:.2f} at the {ci.level:.1%} level)")

    def decided(self, run: RunDir, passes: int) -> bool:
        """One candidate left and told apart from spec-off (faster: it won; slower it would have been dropped)."""
        return len(self.alive) == 1 and separable(run.samples(), self.alive[0], self.baseline, passes,
                                                  self.max_passes, seed=self.seed)


def _plateau(race: _Race, run: RunDir, passes: int) -> list[str]:
    """The best arm and every arm no look told apart from it (spec-off included when it is not separable from it)."""
    samples = run.samples()
    best = race.best
    out = [best] + [n for n in race.alive if n != best]
    if best != race.baseline and not separable(samples, best, race.baseline, passes, race.max_passes,
                                               seed=race.seed):
        out.append(race.baseline)
    return out


def _candidates(race: _Race, run: RunDir, plateau: list[str], named: str, margin: float) -> list[RaceCandidate]:
    samples = run.samples()
    out = []
    for arm in race.arms.candidates:
        ci = ratio_to_baseline(samples, arm.name, race.baseline, seed=race.seed)
        drop = race.dropped.get(arm.name)
        status: Status = "dropped" if drop else ("winner" if plateau == [named] == [arm.name] else "plateau")
        out.append(RaceCandidate(arm=arm.name, settings=race.arms.settings(arm.name), status=status,
                                 dropped_after_requests=drop["after"] if drop else None,
                                 dropped_at_pass=drop["pass"] if drop else None,
                                 dropped_vs=drop["vs"] if drop else None,
                                 ratio=ci.estimate if ci else None, ci_low=ci.lo if ci else None,
                                 ci_high=ci.hi if ci else None, pairs=ci.n if ci else 0,
                                 verdict=verdict(ci, margin) if ci else None))
    return out


def _verify(config: BakeoffFile, arms: list[Arm], out: Path, events: RunEvents) -> TuneVerify:
    """Winner (and runner-up) against spec-off at each level of ``tune.verify_streams``: the paired ratio of
    per-stream decode rates at that level, as the report's concurrency table reads it (same pairs, same draws)."""
    vconfig = verify_config(config, arms)
    run = run_bakeoff(vconfig, out, events=events)
    samples = [s for s in run.samples() if s.concurrency is not None]
    baseline, winner = arms[0].name, arms[1].name
    points = []
    for level in vconfig.workload.concurrency or []:
        here = [s for s in samples if s.concurrency == level]
        point = VerifyPoint(streams=level)
        for arm in arms[1:]:
            point.ratios[arm.name] = ratio_to_baseline(here, arm.name, baseline, seed=vconfig.workload.seed)
        ci = point.ratios[winner]
        point.collapse = ci is not None and ci.hi < 1
        points.append(point)
    collapse_at = [p.streams for p in points if p.collapse]
    return TuneVerify(run_dir=str(run.path), arms=[a.name for a in arms], points=points,
                      collapse=bool(collapse_at), collapse_at=collapse_at,
                      nothing_drafted=nothing_drafted(run.samples(), winner, baseline, seed=vconfig.workload.seed))


def _compile(result: TuneResult, config: BakeoffFile, arms: TuneArms, winner: Arm, run: RunDir) -> None:
    """The named arm in the engine's own words (result.winner engine_config) and its re-check file."""
    adapter = load_engine(winner.engine)
    result.winner["engine_config"] = engine_config(adapter, winner, arms.baseline, run.arm_dir(winner.name),
                                                   run.path)
    path = run.path / WINNER_FILE
    path.write_text(yaml.safe_dump(winner_file(config, arms.baseline, winner), sort_keys=False))
    result.winner["winner_file"] = str(path)


def n_max_arms(winner: Arm, arms: list[Arm]) -> dict[str, int]:
    """The winner's n_max and that of every arm that differs from it in n_max alone: the arms a per-batch-size
    schedule may choose between (another method or draft is another setting, not another n_max)."""
    if winner.speculative.n_max is None:
        return {}
    out = {winner.name: winner.speculative.n_max}
    for arm in arms:
        if arm.name != winner.name and arm.speculative.n_max is not None \
                and set(candidate_settings(arm, winner)) == {"speculative.n_max"}:
            out[arm.name] = arm.speculative.n_max
    return out


def compile_schedule(result: TuneResult, config: BakeoffFile, arms: TuneArms, winner: Arm, samples: list[Sample],
                     run: RunDir, seed: int, say: Callable[[str], None]) -> None:
    """Where the samples (verification, or a race at several stream counts) call for another n_max at some
    stream count, compile a per-batch-size schedule through the adapter, or say why the engine takes none."""
    n_max = n_max_arms(winner, [arms.baseline, *arms.candidates])
    levels = n_max_by_streams(samples, n_max, winner.name, arms.baseline.name, seed=seed) if n_max else []
    if len(levels) < 2:
        return
    entries = batch_schedule(levels)
    record: dict[str, Any] = {"levels": [lv.model_dump() for lv in levels], "schedule": entries,
                              "compiled": False}
    result.winner["n_max_schedule"] = record
    if entries is None:
        record["reason"] = f"one n_max ({winner.speculative.n_max}) at every stream count measured"
        return
    adapter = load_engine(winner.engine)
    try:
        scheduled = with_n_max_schedule(adapter, winner, entries)
    except CapabilityNotSupported as exc:
        record["reason"] = f"{exc}; compiled a single n_max ({winner.speculative.n_max})"
        say(f"tune: the results call for n_max by stream count ({_levels_text(levels)}), but {record['reason']}")
        return
    record["compiled"] = True
    _compile(result, config, arms, scheduled, run)
    say(f"tune: compiled a per-batch-size n_max schedule {entries} ({_levels_text(levels)})")


def _levels_text(levels: list[ScheduleLevel]) -> str:
    return ", ".join(f"{lv.streams} stream(s): {lv.n_max}" for lv in levels)


def run_tune(config: BakeoffFile, out: Path, *, source: str = "<config>", events: RunEvents | None = None,
             verify: bool = True, promote: bool = False, clock: Callable[[], float] = time.monotonic
             ) -> TuneOutcome:
    """Race, compile, verify (and with ``promote`` put the verified winner live); returns both run directories
    and the result, also written as ``tune.json`` in the race's run directory.

    :raises ConfigError: no tune: section, a space that makes invalid arms, ``promote`` without a live: section.
    """
    events = events or RunEvents()
    say = events.on_note
    if promote and config.live is None:
        raise ConfigError("tune --promote: the file has no live: section naming the service to switch "
                          "(docs/live.md)")
    arms = tune_arms(config, source)  # raises the clear error when the file has no tune: section
    tune = config.tune
    assert tune is not None
    race_file = race_config(config, arms)
    race = _Race(arms, race_file.workload.seed, tune, events, clock, race_file.workload.equivalence_margin)

    def started(run: RunDir, requests: int, done: int) -> None:  # every candidate checked on paper by then
        events.on_run_start(run, requests, done)
        say(f"tune: {len(arms.candidates)} candidates against {race.baseline}; budget {tune.budget_s:g} s, "
            f"at most {tune.max_passes} passes")
        if arms.no_ops:
            say(f"tune: left out {', '.join(arms.no_ops)}: the same as {race.baseline} (nothing to race)")
        race.started = clock()

    run = run_bakeoff(race_file, out, events=replace(events, on_run_start=started), policy=race)
    passes, stopped = race.passes, race.stopped
    spent = clock() - race.started
    margin = race_file.workload.equivalence_margin
    if stopped.startswith("the baseline"):
        result = TuneResult(baseline=race.baseline, budget_s=tune.budget_s, spent_s=round(spent, 1), passes=passes,
                            max_passes=tune.max_passes, stopped=stopped, decision="no verdict", decision_why=stopped,
                            candidates=_candidates(race, run, [], "", margin))
        _write(run, result)
        return TuneOutcome(race=run, verify=None, result=result)
    plateau = _plateau(race, run, passes)
    named = min(plateau, key=lambda n: (simplicity(arms.settings(n), arms.space), n))
    by_name = {a.name: a for a in [arms.baseline, *arms.candidates]}
    looked = passes >= MIN_ADAPTIVE_PASSES  # before that no look is made: nothing was compared at all
    result = TuneResult(baseline=race.baseline, budget_s=tune.budget_s, spent_s=round(spent, 1), passes=passes,
                        max_passes=tune.max_passes, stopped=stopped,
                        undecided=[n for n in plateau if n != race.baseline] if stopped.startswith("budget")
                        and len(plateau) > 1 else [],
                        candidates=_candidates(race, run, plateau, named, margin))
    result.decision, result.decision_why = tune_decision(named, race.baseline, result.candidates, passes, margin)
    winner_arm = by_name[named]
    chosen = "alone" if len(plateau) == 1 else \
        f"simplest of a plateau of {len(plateau)} (fewest keys changed, then earliest listed values)"
    if not looked:
        chosen = (f"undecided: the budget allowed {passes} pass(es) and the first look needs "
                  f"{MIN_ADAPTIVE_PASSES}; nothing was compared, so spec-off is kept")
        events.on_warning(f"tune: {chosen}; raise tune.budget_s (one pass took about {spent / passes:.0f} s) "
                          "or measure less per pass")
    result.winner = {"arm": named, "settings": arms.settings(named), "spec_off": named == race.baseline,
                     "plateau": plateau, "chosen_by": chosen}
    say(f"tune: {stopped}; named {named} ({result.winner['chosen_by']})")
    if named != race.baseline:
        _compile(result, config, arms, winner_arm, run)
    _write(run, result)
    verify_run: RunDir | None = None
    if verify and named != race.baseline:
        ranked = sorted((c for c in result.candidates if c.arm != named and c.ratio is not None),
                        key=lambda c: -(c.ratio or 0))
        verify_arms = [arms.baseline, winner_arm] + ([by_name[ranked[0].arm]] if ranked else [])
        say(f"tune: verifying {', '.join(a.name for a in verify_arms[1:])} against {race.baseline} at "
            f"{tune.verify_streams} streams, in that order")
        result.verify = _verify(config, verify_arms, out, events)
        verify_run = RunDir(Path(result.verify.run_dir))
        if result.verify.collapse:
            say(f"tune: COLLAPSE: {named} is separably slower than {race.baseline} at "
                f"{result.verify.collapse_at} streams")
    if named != race.baseline:  # the verification's stream counts, else the race's own
        compile_schedule(result, config, arms, winner_arm, verify_run.samples() if verify_run else run.samples(),
                         run, race_file.workload.seed, say)
    _write(run, result)
    outcome = TuneOutcome(race=run, verify=verify_run, result=result)
    if promote:
        promote_winner(outcome, say)
    return outcome


def promote_winner(outcome: TuneOutcome, say: Callable[[str], None]) -> dict[str, Any]:
    """Hand the verified winner to the live-box promote (core/run/promote.py: private gate, live gate, rollback,
    ``bakeoff promote --revert``); recorded in tune.json.

    :raises ConfigError: spec-off won, the winner was not verified, or it collapses; nothing is touched.
    :raises PromoteError: the promotion's gate failed (the previous service was restored, or it says why not).
    """
    from .promote import promote

    result, verify_run, named = outcome.result, outcome.verify, str(outcome.result.winner.get("arm"))
    if result.winner.get("spec_off"):
        raise ConfigError("tune --promote: spec-off won (no candidate beat it separably); nothing to promote")
    if result.decision != "decided":
        raise ConfigError(f"tune --promote: {result.decision}: {result.decision_why}; nothing promoted")
    if result.verify is None or verify_run is None:
        raise ConfigError("tune --promote: the winner was not verified; nothing promoted")
    if result.verify.collapse:
        raise ConfigError(f"tune --promote: {named} collapses at {result.verify.collapse_at} streams; not promoted")
    result.promoted = promote(verify_run.path, named, say=say)
    _write(outcome.race, result)
    return result.promoted


def _write(run: RunDir, result: TuneResult) -> None:
    (run.path / TUNE_FILE).write_text(result.model_dump_json(indent=2) + "\n")
