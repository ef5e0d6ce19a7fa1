"""The versioned run summary every report is drawn from (and written as ``summary.json``).

One pass over a run directory computes every statistic once (core/analysis/stats.py); the terminal table, the
markdown, the plots and the HTML only format this object, so they can never disagree with each other.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from pydantic import BaseModel, Field

from ..analysis.acceptance import ArmAcceptance, mean_accepted_length, run_acceptance
from ..analysis.calibration import Calibration, analyze_calibration
from ..analysis.capacity import CapacityResult, read_capacity
from ..analysis.decision import Recommendation, recommend
from ..analysis.fairness import equal_work, finish_counts
from ..analysis.gates import different_task, score_gates, spec_identity
from ..analysis.launches import LaunchBands, band_ratios, disturbed_launches, launch_bands
from ..analysis.load import LoadSection, load_section
from ..analysis.phases import PhaseResult, compare_phases
from ..analysis.racing import TuneResult, read_tune
from ..analysis.reference import BenchReference, read_references
from ..analysis.sessions import SessionsSummary, summarize_sessions
from ..analysis.stats import (
    EQUIVALENCE_MARGIN,
    LEVEL,
    METHOD,
    N_BOOT,
    ArmStats,
    Comparison,
    compare_to_baseline,
    describe_arms,
    median_or_none,
    unpaired_ratio,
    verdict,
)
from ..analysis.structured import StructuredSummary, summarize_structured
from ..common.errors import ConfigError
from ..common.redact import redact_text, redact_url
from ..config.schema import DEFAULT_MODES, Speculative, Workload
from ..host.roofline import ModelBytes, roofline_for
from ..measure.points import factors_text, request_factors
from ..results.flags import FLAG_GLOSSARY, FOREIGN_LOAD, flag_name
from ..results.record import ArmAttempt, ExtraLaunches, PlacementRecord, RunRecord
from ..results.sample import Sample
from ..results.store import RunDir
from ..run.plan import stateful_warning
from .completeness import RunProgress, run_progress
from .points import PointTable, concurrency_table, depth_table, sweep_table

__all__ = [
    "REPORT_SCHEMA_VERSION",
    "ArmFailure",
    "EngineSummary",
    "Bootstrap",
    "RunData",
    "RunSummary",
    "load_run",
    "read_run_data",
    "require_run_dir",
    "summarize_run",
]

# 2: the sweep, depth and concurrency sections (medians with intervals, paired ratios against the baseline).
REPORT_SCHEMA_VERSION = 2


class Bootstrap(BaseModel):
    method: str = METHOD
    n_boot: int = N_BOOT
    level: float = LEVEL
    seed: int = 0


class ArmFailure(BaseModel):
    arm: str
    pass_index: int
    error: str


class EngineSummary(BaseModel):
    """What answered an arm: the engine, the build it reported, the model (URL credentials masked), the speculation."""

    engine: str
    version: str | None = None
    model: str | None = None
    binary: dict[str, Any] | None = Field(None, description="The build of the engine binary that ran (llama.cpp: "
                                          "backend, CUDA architectures, where it was found).")
    speculative: Speculative = Field(default_factory=Speculative)
    fingerprint: str | None = Field(None, description="The arm's configuration fingerprint (run.json fingerprints; "
                                    "None for a run made before them).")


class LaunchStates(BaseModel):
    bands: dict[str, LaunchBands] = Field(default_factory=dict, description="Per bimodal arm: its two bands.")
    busy: dict[str, dict[str, str]] = Field(default_factory=dict, description="Per arm: the launches (pass index) "
                                            "the machine disturbed, with their flags; left out of the band test.")
    extra: ExtraLaunches | None = Field(None, description="The extra launches drawn (run.json extra_launches).")


class RunSummary(BaseModel):
    """Summary of one run directory; ``schema_version`` changes when a field changes meaning."""

    schema_version: int = REPORT_SCHEMA_VERSION
    kind: str = "bakeoff-run-summary"
    path: Path | None = Field(None, exclude=True, description="The run directory read (not written to summary.json).")
    tool: dict[str, Any] = Field(default_factory=dict)
    run_id: str
    name: str
    baseline: str | None = None
    prompts: list[str] = Field(default_factory=list)
    modes: list[str] = Field(default_factory=list)
    max_tokens: int | None = None
    reps: int | None = None
    passes: int = Field(0, description="Passes recorded in run.json orders (including adaptive ones).")
    requests_per_pass: str | None = Field(None, description="An arm's timed requests per pass, factor by factor as "
                                          "bakeoff check names them ('2 depth(s) × 3 stream(s) (1+2) × 2 prompt(s) × "
                                          "1 mode(s) × 2 rep(s)'), for a run that sweeps depths or stream counts or "
                                          "sends open-loop requests; None when reps × prompts × modes is the count.")
    complete: bool = Field(True, description="Every planned pass of every arm measured, and the run not stopped "
                                             "short (False: see progress and the first warning).")
    progress: RunProgress | None = Field(None, description="Passes and samples planned against measured, per arm "
                                         "and in all; for an incomplete run, where and why it stopped.")
    orders: list[list[str]] = Field(default_factory=list)
    bootstrap: Bootstrap = Field(default_factory=Bootstrap)
    equivalence_margin: float = Field(EQUIVALENCE_MARGIN, description="workload.equivalence_margin: a ratio whose "
                                      "interval lies within 1 ± it reads 'equivalent'.")
    engines: dict[str, EngineSummary] = Field(default_factory=dict, description="Per arm: engine, version, model.")
    host: dict[str, Any] = Field(default_factory=dict)
    arms: list[ArmStats] = Field(default_factory=list)
    comparisons: list[Comparison] = Field(default_factory=list)
    energy_comparisons: list[Comparison] = Field(default_factory=list, description="Tokens per joule vs the "
                                                 "baseline, paired like the decode ratio (GPU runs only).")
    gpus: list[dict[str, Any]] = Field(default_factory=list, description="The GPUs of the run (run.json).")
    bandwidth: dict[str, Any] = Field(default_factory=dict, description="Measured and theoretical memory bandwidth.")
    mismatches: dict[str, list[str]] = Field(default_factory=dict, description="Per arm: what the engine runs with "
                                             "that differs from what was asked (GPU offload, ctx, slots, ...).")
    warnings: list[str] = Field(default_factory=list)
    failures: list[ArmFailure] = Field(default_factory=list)
    dropped_foreign_load: int | None = Field(None, description="Samples left out because they were taken under "
                                                               "foreign load (None: none were left out on purpose).")
    phases: list[PhaseResult] = Field(default_factory=list, description="Live-knob phase runs: each phase, and each "
                                      "knob against its neighbouring baselines (paired, bootstrap interval).")
    recommendations: list[Recommendation] = Field(default_factory=list, description="Per prompt category: the "
                                                  "setting to run (or off), its plateau and where speculation loses.")
    acceptance: list[ArmAcceptance] = Field(default_factory=list, description="Per speculative arm: drafted, "
                                            "accepted, draft steps, mean accepted length, per-position rates and "
                                            "the histogram of accepted drafts per step, pooled over its requests; "
                                            "what the engine does not expose is None with its reason.")
    calibration: Calibration | None = Field(None, description="Forced-acceptance calibration (a calibrate: "
                                            "section): speedup per acceptance x n_max, break-even acceptance.")
    hardware: list[Comparison] = Field(default_factory=list, description="Ray: an arm run on several hosts, each "
                                       "copy against its copy on the first host (unpaired: hosts compared as "
                                       "hardware, never as an arm effect).")
    # Sections of swept points (core/reports/points.py); None when the run has no such sweep.
    sweep: PointTable | None = Field(None, description="The n-max (or any config) sweep: one row per arm.")
    depth: PointTable | None = Field(None, description="The depth sweep: one row per arm and depth.")
    concurrency: PointTable | None = Field(None, description="The concurrency sweep: one row per arm and level.")
    sessions: SessionsSummary | None = Field(None, description="Sessions workload: per arm session time, cache-hit "
                                             "ratio and turns; per arm the paired session-time ratio (the "
                                             "headline) beside the decode ratio.")
    structured: StructuredSummary | None = Field(None, description="Structured requests (tool calls, JSON "
                                                 "schemas): validity, drafting under the grammar, stalls, speed "
                                                 "of the valid answers against the baseline.")
    tune: TuneResult | None = Field(None, description="bakeoff tune: the race's candidates (winner, plateau, "
                                    "dropped), the named setting compiled for the engine, the verification under "
                                    "changing load, time spent (docs/tune.md).")
    launches: LaunchStates | None = Field(None, description="Launch states: the arms bimodal across launches "
                                          "(their bands and passes) and the extra launches the run drew (run.json "
                                          "extra_launches); None when neither.")
    load: LoadSection | None = Field(None, description="Load points (concurrency levels and open-loop rates): "
                                     "latency percentiles, goodput per SLO tier, the frontier and the crossover.")
    capacity: CapacityResult | None = Field(None, description="bakeoff capacity: each arm's highest load at which "
                                            "the SLOs hold, its interval, binding constraint and shape, and the "
                                            "paired ratio to the baseline (capacity.json, docs/capacity.md).")
    references: dict[str, BenchReference] = Field(default_factory=dict, description="Per llama.cpp arm of a run "
                                                  "with --llama-bench: the same build's llama-bench tg beside the "
                                                  "arm's decode rate and the server's share (references.json).")

    def arm(self, name: str) -> ArmStats | None:
        return next((a for a in self.arms if a.arm == name), None)

    def comparison(self, name: str) -> Comparison | None:
        return next((c for c in self.comparisons if c.arm == name), None)


class Boot(TypedDict):
    """The bootstrap settings every statistic of one summary is computed with."""

    n_boot: int
    level: float
    seed: int


@dataclass
class RunData:
    """Everything a report reads from a run directory, and what reading it found (damage, repairs)."""

    run_id: str
    record: RunRecord
    samples: list[Sample]
    records: dict[str, list[ArmAttempt]]
    warnings: list[str] = field(default_factory=list)

    def attempts(self, arm: str) -> list[ArmAttempt]:
        """The arm's starts (one that did not read was left out and said in the warnings)."""
        return self.records.get(arm, [])


def require_run_dir(path: Path) -> None:
    """Refuse a path that holds no run before reading it: read as a run, a mistyped path would be an empty
    summary, and a script looping over it would report success.

    A run directory holds its run record or its samples (the names :class:`RunDir` gives them): run.json is
    written when a run starts, so an interrupted run passes, and so does one whose run.json a crash lost.

    :raises ConfigError: neither is there; the message names the path and what a run directory holds.
    """
    run = RunDir.open(path)
    if run.run_json.is_file() or run.samples_path.is_file():
        return
    found = ("this one holds neither" if path.is_dir() else "this is a file, not a directory" if path.exists()
             else "there is no such directory")
    raise ConfigError(f"{path} is not a bakeoff run directory: one made by `bakeoff run` holds {run.run_json.name} "
                      f"(the run record) and {run.samples_path.name} (one line per request), and {found}")


def read_run_data(path: Path) -> RunData:
    """run.json (or the index's copy when it is damaged, or nothing), the samples of this run reconciled
    with the index, and the arm records; nothing in the directory is changed.

    :raises NewerSchemaError: the run was written by a newer bakeoff.
    """
    run = RunDir.open(path)
    record = run.read_record(strict=False)
    stored = run.stored_samples()
    records = run.arm_records()
    return RunData(run.run_id, record, stored.samples, records, [*run.warnings, *stored.warnings])


def _without_foreign_load(samples: list[Sample]) -> list[Sample]:
    return [s for s in samples if not s.has_flag(FOREIGN_LOAD)]


def load_run(path: Path, *, drop_foreign_load: bool = False) -> tuple[RunRecord, list[Sample]]:
    """run.json (possibly empty for a crashed run) and the samples of a run directory.

    :param drop_foreign_load: leave out samples flagged as taken while other processes used the CPU.
    """
    data = read_run_data(path)
    return data.record, _without_foreign_load(data.samples) if drop_foreign_load else data.samples


def _warnings(record: RunRecord, data: RunData, summary: RunSummary) -> list[str]:
    out = []
    config = record.config
    for arm in config.arms if config else []:
        engine = record.engines.get(arm.name)
        msg = stateful_warning(arm.name, arm.speculative.method, arm.speculative.variant,
                               engine.stateful_speculators if engine else [], config.workload.reps if config else 1)
        if msg:
            out.append(msg)
    if summary.passes == 1 and summary.comparisons:
        out.append("1 pass: intervals reflect request-to-request noise only; launch-to-launch variation is not "
                   "measured (run more passes, or --until-ci)")
    if summary.dropped_foreign_load:
        out.append(f"{summary.dropped_foreign_load} sample(s) taken under foreign CPU load were left out "
                   f"(--drop-foreign-load)")
    for name, problems in summary.mismatches.items():
        out += [f"{name}: MISMATCH: {p}" for p in problems]
    out += _gpu_warnings(data, summary)
    for a in summary.arms:
        if a.no_rate:
            reasons = ", ".join(f"{why} ×{n}" for why, n in sorted(a.no_rate.items()))
            out.append(f"{a.arm}: {sum(a.no_rate.values())} successful sample(s) without a decode rate, left out of "
                       f"the statistics ({reasons})")
    for c in summary.comparisons:
        out += [f"{c.arm} vs {c.reference}: {note}" for note in c.notes]
    for c in summary.comparisons:
        if c.comparable and not c.comparable["ok"]:
            out.append(f"{c.arm} vs {c.reference}: not comparable: {'; '.join(c.comparable['reasons'])}")
    for a in summary.arms:
        for name in a.failed_gates:
            out.append(f"{a.arm}: gate {name} {a.gates[name]['status']}: {a.gates[name]['detail']}")
        if a.spec_check and a.spec_check["divergences"]:
            d = a.spec_check["divergences"][0]
            kind = "greedy output differs from" if a.spec_check["same_engine"] else "agreement with"
            out.append(f"{a.arm}: {kind} {a.spec_check['reference']}: {a.spec_check['identical']}/"
                       f"{a.spec_check['compared']} identical; first divergence {d['point']} at character "
                       f"{d['position']}: {d['reference']!r} vs {d['arm']!r}")
        if a.finish and (a.finish["unexpected"] or a.finish["truncated"] or a.finish["empty"]):
            out.append(f"{a.arm}: endings other than {a.finish['expected']}: {a.finish['unexpected']}, "
                       f"truncated {a.finish['truncated']}, empty {a.finish['empty']}")
    for a in summary.arms:
        if a.flagged:
            kinds = Counter(flag_name(f) for s in data.samples if s.arm == a.arm for f in set(s.flags))
            # most frequent first, ties by name: a set's order changes with each process's string hashing
            named = ", ".join(f"{kind} ×{n}" for kind, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))
            out.append(f"{a.arm}: {a.flagged} sample(s) flagged ({named}; {FLAG_GLOSSARY})")
    return out


def _gpu_warnings(data: RunData, summary: RunSummary) -> list[str]:
    """Throttling during requests, and GPU limits (power, clocks) that differ between compared arms."""
    out = []
    for a in summary.arms:
        if a.gpu and a.gpu.throttled:
            out.append(f"{a.arm}: {a.gpu.throttled} request(s) ran while the GPU slowed down "
                       f"({', '.join(a.gpu.throttle_reasons)}): power or thermal limits, not the engine")
    states = {arm: a.gpu_state for arm in data.records for a in data.attempts(arm) if a.gpu_state}
    if len({repr(v) for v in states.values()}) > 1:
        detail = "; ".join(f"{arm}: {state}" for arm, state in states.items())
        out.append(f"GPU power limit or clock limits differ between arms, so speed differences may be the card's "
                   f"settings: {detail}")
    return out


def _rooflines(record: RunRecord, samples: list[Sample], summary: RunSummary) -> None:
    """Each arm's roofline from run.json's model bytes and bandwidth, at the arm's median prompt depth."""
    models = record.roofline_models
    bandwidth = record.bandwidth
    for a in summary.arms:
        model = models.get(a.arm)
        device = model.get("device") if model else None
        if not model or not isinstance(device, str) or not bandwidth.get(device):
            continue
        ok = [s for s in samples if s.arm == a.arm and s.status == "ok"]
        prompt = median_or_none([float(s.prompt_tokens) for s in ok if s.prompt_tokens is not None])
        output = median_or_none([float(s.completion_tokens) for s in ok if s.completion_tokens is not None])
        depth = (prompt or 0.0) + (output or 0.0) / 2
        per_pass = mean_accepted_length(sum(s.accepted or 0 for s in ok), sum(s.drafts or 0 for s in ok))
        facts = ModelBytes.model_validate({k: model[k] for k in ("weights", "kv_per_position", "file_bytes", "notes")})
        a.roofline = roofline_for(facts, bandwidth[device], a.median.estimate if a.median else None, depth,
                                  per_pass)


def _correctness(path: Path, data: RunData, samples: list[Sample], summary: RunSummary) -> None:
    """Finish reasons, quality gates and spec correctness per arm; the equal-work guard per compared pair."""
    config, records = data.record.config, data.records
    by_name = {a.name: a for a in config.arms} if config else {}
    gates = score_gates(records, by_name, summary.baseline)
    workload = config.workload if config else None
    sampling = workload.sampling_modes() if workload else DEFAULT_MODES
    spec = spec_identity(path, by_name, summary.baseline, sampling)
    for a in summary.arms:
        arm = by_name.get(a.arm)
        fixed = arm.workload.fixed_length if arm is not None else None
        if fixed is None:
            fixed = workload.fixed_length if workload is not None else True
        a.finish = finish_counts([s for s in samples if s.arm == a.arm], bool(fixed)).model_dump()
        a.gates = {name: g.model_dump() for name, g in gates.get(a.arm, {}).items()}
        if (check := spec.get(a.arm)) is not None:
            a.spec_check = check.model_dump()
            a.identical_to_baseline = check.fraction if check.same_engine else None
    guard = equal_work(samples, config, records, path, [(c.arm, c.reference) for c in summary.comparisons])
    prints = data.record.fingerprints
    for c in summary.comparisons:
        c.comparable = guard[(c.arm, c.reference)].model_dump()
        c.notes += [f"near-equal work: {note}" for note in guard[(c.arm, c.reference)].notes]
        mine, theirs = prints.get(c.arm), prints.get(c.reference)
        if (mine and theirs and mine.canonical.get("engine") != theirs.canonical.get("engine")
                and mine.canonical.get("model") == theirs.canonical.get("model")
                and (why := different_task(path, c.arm, c.reference, sampling))):
            c.comparable = {**c.comparable, "ok": False, "reasons": [*c.comparable["reasons"], why]}


def _launch_states(samples: list[Sample], summary: RunSummary, extra: ExtraLaunches | None, boot: Boot) -> None:
    """An arm whose launches fall in two speed bands gets no overall verdict against anything
    (analysis/launches.py): its comparisons read "not comparable: <arm> bimodal across launches: ...", carry the
    paired ratio within each band (or why a band has none), and the run warns."""
    bands = {a.arm: b for a in summary.arms if (b := launch_bands(samples, a.arm)) is not None}
    busy = {a.arm: d for a in summary.arms if (d := disturbed_launches(samples, a.arm))}
    if bands or busy or extra is not None:
        summary.launches = LaunchStates(bands=bands, busy={a: {str(p): w for p, w in d.items()} for a, d in
                                                           busy.items()}, extra=extra)
    for arm, launches in busy.items():  # what load alone would have made of the arm: said, never a verdict
        if arm not in bands and (seen := launch_bands(samples, arm, with_busy=True)) is not None:
            summary.warnings.append(
                f"{arm}: {seen.slow_launches} of {seen.launches} launches slow, but {len(launches)} ran on a busy "
                f"machine ({'; '.join(f'pass {p}: {w}' for p, w in launches.items())}): load on the machine, not "
                "a launch state of the engine, so not read as bimodal")
    drew = f" after {len(extra.passes)} extra launch pass(es)" if extra and extra.passes else ""
    for b in bands.values():
        summary.warnings.append(f"{b.arm}: {b.line()}{drew}; no overall verdict involving it (each band is "
                                "compared on its own)")
    for c in summary.comparisons:
        reasons = [f"{name} {bands[name].line()}" for name in (c.arm, c.reference) if name in bands]
        if reasons:
            guard = c.comparable or {"ok": True, "reasons": [], "checks": {}}
            c.comparable = {**guard, "ok": False, "reasons": [*guard.get("reasons", []), *reasons]}
            c.bands = [r.model_dump(mode="json") for r in band_ratios(samples, c.arm, c.reference, bands, **boot,
                                                                      margin=summary.equivalence_margin)]


def _blocks(placement: PlacementRecord | None, baseline: str | None,
            arm_order: list[str]) -> list[tuple[str, list[str]]]:
    """(baseline, arms) of each group compared within itself: each host's block on Ray, else the whole run."""
    if placement is None or not (placement.blocks or placement.baselines):
        return [(baseline, arm_order)] if baseline else []
    return [(b, [a for a in arm_order if a in placement.blocks.get(host, [])])
            for host, b in placement.baselines.items() if b]


def _engines(record: RunRecord, data: RunData) -> dict[str, EngineSummary]:
    """Per arm: engine, version and binary the engine reported, model (URL credentials masked), speculative knobs."""
    out: dict[str, EngineSummary] = {}
    by_name = {a.name: a for a in record.config.arms} if record.config else {}
    placed = record.placement.arm_order if record.placement else []  # Ray: one entry per stored arm (arm@host)
    stored = [(n, by_name[n.split("@")[0]]) for n in placed if n.split("@")[0] in by_name]
    for name, arm in stored or list(by_name.items()):
        attempts = list(reversed(data.attempts(name)))
        version = next((a.version for a in attempts if a.version), None)
        binary = next((a.effective["binary"] for a in attempts if a.effective.get("binary")), None)
        out[name] = EngineSummary(engine=arm.engine, version=version,
                                  model=arm.model or (redact_url(arm.url) if arm.url else None),
                                  binary=binary, speculative=arm.speculative,
                                  fingerprint=fp.id if (fp := record.fingerprints.get(arm.name)) else None)
    return out


def _hardware(placement: PlacementRecord | None, samples: list[Sample], margin: float, *, n_boot: int,
              level: float, seed: int) -> list[Comparison]:
    """Each copy of an arm run on several hosts against its copy on the first host: the same work on other
    hardware, unpaired (different machines cannot be paired request by request)."""
    out = []
    for arm, copies in (placement.copies if placement else {}).items():
        names = list(copies.values())
        for other in names[1:]:
            ratio = unpaired_ratio([s for s in samples if s.arm == other], [s for s in samples if s.arm == names[0]],
                                   n_boot=n_boot, level=level, seed=seed, key=f"hardware/{arm}/{other}")
            if ratio is not None:
                out.append(Comparison(arm=other, reference=names[0], ratio=ratio, verdict=verdict(ratio, margin),
                                      margin=margin, paired=False, notes=[f"hardware: {arm} on two hosts"]))
    return out


def _requests_per_pass(workload: Workload | None, prompts: int) -> str | None:
    """Each arm's timed requests per pass in check's words, where reps × prompts × modes is not the count (USER-3
    #4: a design line of "2 rep(s) × 2 prompt(s)" above "56 sample(s) flagged" for one arm)."""
    if workload is None or workload.sessions is not None:
        return None
    if not (workload.depths or workload.concurrency or workload.arrival):
        return None
    return factors_text(*request_factors(workload, prompts, len(workload.modes)))


def summarize_run(path: Path, *, n_boot: int = N_BOOT, level: float = LEVEL, seed: int | None = None,
                  drop_foreign_load: bool = False, baseline: str | None = None) -> RunSummary:
    """Compute every statistic of a run directory once; nothing in the directory is written.

    :param seed: bootstrap seed; defaults to the run's recorded seed, so a report is reproducible.
    :param drop_foreign_load: leave out samples taken under foreign load (their number is recorded).
    :param baseline: compare every arm with this one instead of the run's recorded baseline (e.g. each
        engine's own spec-off arm in a cross-engine run).
    :raises ConfigError: ``baseline`` names no arm of the run.
    """
    data = read_run_data(path)
    record = data.record
    samples = _without_foreign_load(data.samples) if drop_foreign_load else data.samples
    config = record.config
    seed = int(record.seed or 0) if seed is None else seed
    arm_order = record.arm_names
    prompts = [str(p.get("name")) for p in record.prompts]
    if config is not None and config.workload.sessions is not None:  # the suite only warmed up: turns are prompts
        turns = {s.prompt: (s.session or "", s.turn or 0) for s in samples}
        prompts = sorted(turns, key=lambda p: turns[p])
    prompts += sorted({s.prompt for s in samples} - set(prompts))
    boot_s = {arm: [a.boot_s for a in data.attempts(arm) if a.boot_s] for arm in data.records}
    if baseline is not None and baseline not in arm_order + [s.arm for s in samples]:
        raise ConfigError(f"--baseline {baseline!r}: no such arm in {path} (arms: {', '.join(arm_order)})")
    baseline = baseline or record.baseline or (arm_order[0] if arm_order else None)
    boot = Boot(n_boot=n_boot, level=level, seed=seed)
    workload = config.workload if config else None
    margin = workload.equivalence_margin if workload else EQUIVALENCE_MARGIN
    arms = describe_arms(samples, arm_order, prompts, boot_s=boot_s, **boot)
    if baseline is None and arms:
        baseline = arms[0].arm
    placement = record.placement
    # Ray: arms are stored per host; each is compared with the baseline of its own host
    if placement is not None and placement.arm_order:
        arm_order = list(placement.arm_order or arm_order)
        arms = describe_arms(samples, arm_order, prompts, boot_s=boot_s, **boot)
    comparisons = [c for host_baseline, block in _blocks(placement, baseline, arm_order)
                   for c in compare_to_baseline([s for s in samples if s.arm in block], host_baseline, block,
                                                prompts, **boot, margin=margin)]
    failures = [ArmFailure(arm=arm, pass_index=a.pass_index, error=redact_text(str(a.error)))
                for arm in data.records for a in data.attempts(arm) if a.failed]
    for a in arms:
        if a.gpu is not None:
            a.gpu.idle_power_w = median_or_none([x.gpu_idle_power_w for x in data.attempts(a.arm)
                                                 if x.gpu_idle_power_w is not None])
    mismatches = {arm: list(dict.fromkeys(redact_text(m) for a in data.attempts(arm) for m in a.mismatches))
                  for arm in data.records}
    engines = _engines(record, data)
    summary = RunSummary(
        gpus=record.gpus, bandwidth=record.bandwidth,
        mismatches={arm: m for arm, m in mismatches.items() if m},
        energy_comparisons=[c for host_baseline, block in _blocks(placement, baseline, arm_order)
                            for c in compare_to_baseline([s for s in samples if s.arm in block], host_baseline, block,
                                                         energy=True, **boot, margin=margin)],
        tool=record.tool.model_dump(exclude_none=True) if "tool" in record.model_fields_set else {},
        path=path, run_id=data.run_id, name=record.name or path.name, baseline=baseline,
        prompts=prompts,
        modes=list(workload.modes) if workload and workload.modes else sorted({s.mode for s in samples}),
        max_tokens=workload.max_tokens if workload else None, reps=workload.reps if workload else None,
        passes=len(record.orders) or len({s.pass_index for s in samples}), orders=record.orders,
        requests_per_pass=_requests_per_pass(workload, len(record.prompts)),
        bootstrap=Bootstrap(n_boot=n_boot, level=level, seed=seed), equivalence_margin=margin, engines=engines,
        host=record.host,
        arms=arms, comparisons=comparisons, failures=failures,
        phases=compare_phases(samples, record.phases, seed=seed, margin=margin) if record.phases else [],
        sweep=sweep_table(samples, config.arms, baseline, **boot, margin=margin) if config else None,
        depth=depth_table(samples, arm_order, baseline, **boot, margin=margin),
        concurrency=concurrency_table(samples, arm_order, baseline, **boot, margin=margin),
        load=load_section(samples, arm_order, baseline, workload.slo if workload else None, **boot, margin=margin),
        acceptance=run_acceptance(samples, arm_order),
        sessions=summarize_sessions(samples, arm_order, baseline, **boot, margin=margin),
        structured=summarize_structured(samples, arm_order, baseline, **boot, margin=margin,
                                        methods={arm: e.speculative.method for arm, e in engines.items()}),
        calibration=analyze_calibration(config.model_dump(mode="json") if config else {}, samples, data.records,
                                        **boot, run_path=path))
    summary.hardware = _hardware(placement, samples, margin, **boot)
    summary.tune = read_tune(path)
    summary.capacity = read_capacity(path)
    summary.references = read_references(path)
    if drop_foreign_load:
        summary.dropped_foreign_load = len(data.samples) - len(samples)
    _rooflines(record, samples, summary)
    _correctness(path, data, samples, summary)
    summary.progress = run_progress(record, [(s.arm, s.pass_index) for s in data.samples], data.records, path)
    summary.complete = summary.progress.complete
    lead = [summary.progress.warning] if summary.progress.warning else []  # it leads every report
    summary.warnings = lead + data.warnings + _warnings(record, data, summary)
    _launch_states(samples, summary, record.extra_launches, boot)
    if baseline and not (config and config.calibrate):
        kinds = {str(p["name"]): str(p.get("kind") or p["name"]) for p in record.prompts}
        specs = {arm: e.speculative for arm, e in summary.engines.items()}
        less_valid = {name: f"fewer valid structured answers than {baseline}: {a.valid}/{a.requests}"
                      for name, a in (summary.structured.arms if summary.structured else {}).items()
                      if a.less_valid_than_baseline}
        summary.recommendations = recommend(samples, baseline, summary.arms, summary.comparisons, kinds, specs,
                                            **boot, also_excluded=less_valid, margin=margin)
    return summary
