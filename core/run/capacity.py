"""The capacity search: every arm's highest load at which the ``capacity:`` section's SLOs hold, paired.

:func:`search` is the search itself, independent of engines: it asks a ``probe`` callable for one arm at one
load and keeps, per arm, the bracket [highest load that held, lowest that failed]. It brackets first (``start``,
then ``growth`` times the last load, until a load fails or ``max`` holds) and then narrows: ``bisect`` probes the
geometric midpoint, ``secant`` the load where the binding margin, interpolated in log load between the bracket's
ends, crosses zero (kept at least a tenth of the bracket from either end, so it always narrows). It stops when
the bracket is within ``resolution`` (streams: 1 apart) or after ``max_levels`` loads.

The search runs in rounds. In each round every arm still searching names its next load, and the replicates run
interleaved: replicate 0 of every arm, then replicate 1, with the arms' order rotated each time, so the arms of a
round see the same machine (drift cancels in their ratio, core/analysis/capacity.py pairs them by round and
replicate). While bracketing, the arms probe the same loads. A replicate that is hopeless (core/analysis's
:func:`~bakeoff.core.analysis.capacity.probe_hopeless`: a limit overshot ``hopeless`` times, or an open-loop
backlog cut) ends its load at once, recorded failing.

:class:`CapacityExecutor` runs it on engines (``bakeoff capacity``, through the run loop's executor
seam): one :class:`~bakeoff.core.run.arm.ArmRun` per arm, all up for the whole search (started one after
another, warmed up, then probed in turn; an idle engine beside the one probed costs little), every request
stored as a normal sample (``concurrency`` or ``rate`` set, ``rep`` the replicate, ``pass_index`` 0: one start),
and the result in the run's ``capacity.json``. A file with structured requests (``workload.structured``, or
suite prompts with ``response_format``/``tools``) is searched once per kind, plain then structured, each kind's
probes sending only its own prompts; a structured answer that is not valid counts as a failed request, as it
does in the structured section (a fast invalid answer is not a fast answer). A file with ``workload.sessions``
is searched as the sessions kind: the load is N sessions (agents) replayed at once, each its own salted
conversation with its turns in order, every turn a request the SLOs judge; the boundary is how many concurrent
agents hold the SLOs. ``load: rate`` is refused for sessions (a turn waits for the last one's answer: there is no
arrival schedule).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field

from ..analysis.capacity import (
    CapacityResult,
    Kind,
    Probe,
    analyze_capacity,
    level_margins,
    probe_hopeless,
    write_capacity,
)
from ..analysis.load import latency, meets
from ..common.errors import ConfigError
from ..config.capacity import CapacitySection
from ..config.schema import BakeoffFile, Prompt, Slo
from ..config.sessions import Session
from ..measure.concurrency import effective_slots
from ..measure.points import DoneKeys, Point, concurrent_replays
from ..results.sample import Sample
from ..results.store import RunDir
from .arm import ArmRun
from .events import RunEvents
from .plan import Plan

__all__ = ["ArmSearch", "ProbeFn", "search", "probe_from_samples", "CapacityExecutor",
           "check_capacity_config", "prompt_kind", "kinds_of"]

ProbeFn = Callable[[str, float, int, int], Probe]  # (arm, load, replicate, round) -> the probe


@dataclass
class ArmSearch:
    """One arm's search state: the loads probed and their verdicts."""

    section: CapacitySection
    probes: dict[float, list[Probe]] = field(default_factory=dict)
    done: bool = False

    def held(self, level: float) -> bool:
        margins, _ = level_margins(self.probes[level], self.section)
        return all(m >= 0 for m in margins.values())

    def bracket(self) -> tuple[float | None, float | None]:
        failed = min((lv for lv in self.probes if not self.held(lv)), default=None)
        below = [lv for lv in self.probes if self.held(lv) and (failed is None or lv < failed)]
        return (max(below) if below else None), failed

    def _round(self, value: float) -> float:
        return float(round(value)) if self.section.load == "streams" else value

    def next_level(self) -> float | None:
        """The next load to probe, or None when this arm's search is over."""
        s = self.section
        if self.done or len(self.probes) >= s.max_levels:
            return None
        if not self.probes:
            return float(s.start)
        lo, hi = self.bracket()
        if lo is None:  # failed at the first load: the boundary lies below start
            return None
        if hi is None:  # still bracketing
            if lo >= s.max:
                return None
            nxt = min(self._round(lo * s.growth), float(s.max))
            return nxt if nxt > lo else None
        if hi / lo <= 1 + s.resolution or (s.load == "streams" and hi - lo <= 1):
            return None
        nxt = self._secant(lo, hi) if s.strategy == "secant" else math.sqrt(lo * hi)
        nxt = self._round(nxt)
        if s.load == "streams":
            nxt = min(max(nxt, lo + 1), hi - 1)
        return nxt if lo < nxt < hi and nxt not in self.probes else None

    def _secant(self, lo: float, hi: float) -> float:
        m_lo, _ = level_margins(self.probes[lo], self.section)
        m_hi, _ = level_margins(self.probes[hi], self.section)
        key = min(m_hi, key=lambda k: m_hi[k])  # the constraint failing hardest at hi binds
        a, b = m_lo[key], max(m_hi[key], -1.0)
        t = a / (a - b) if a - b > 0 else 0.5
        t = min(max(t, 0.1), 0.9)
        return float(lo * (hi / lo) ** t)

    def add(self, probe: Probe) -> None:
        self.probes.setdefault(probe.level, []).append(probe)


def search(arms: Sequence[str], section: CapacitySection, probe: ProbeFn,
           on_probe: Callable[[Probe], None] = lambda p: None) -> list[Probe]:
    """Every probe of the search, in the order they ran (arms interleaved per round and replicate)."""
    states = {arm: ArmSearch(section) for arm in arms}
    done: list[Probe] = []
    for rnd in range(section.max_levels * 2):
        wanted = {arm: lv for arm, st in states.items() if (lv := st.next_level()) is not None}
        if not wanted:
            break
        order = list(wanted)
        hopeless: set[str] = set()
        for rep in range(section.replicates):
            shift = (rnd + rep) % len(order)
            for arm in order[shift:] + order[:shift]:
                if arm in hopeless:
                    continue
                p = probe(arm, wanted[arm], rep, rnd)
                states[arm].add(p)
                done.append(p)
                on_probe(p)
                if probe_hopeless(p, section):
                    hopeless.add(arm)
    return done


def prompt_kind(prompt: Prompt) -> Kind:
    """The workload kind a prompt's requests are searched under."""
    return "structured" if prompt.structured else "plain"


def kinds_of(prompts: Sequence[Prompt]) -> list[Kind]:
    """The kinds the prompts hold, in the order they come (plain prompts lead the suite)."""
    return list(dict.fromkeys(prompt_kind(p) for p in prompts))


def _served(s: Sample) -> bool:
    """A request that counts: it finished, and a structured answer is valid (an invalid one fails its SLO)."""
    return s.status == "ok" and s.valid is not False


def _constraint_values(samples: Sequence[Sample], section: CapacitySection) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for c in section.constraints:
        values = []
        for s in samples:
            v = latency(s, c.metric) if _served(s) else None
            values.append(v if v is not None else math.inf)
        out[c.label] = values
    return out


def probe_from_samples(arm: str, level: float, replicate: int, rnd: int, samples: Sequence[Sample],
                       section: CapacitySection, tiers: dict[str, Slo], cut: str | None = None,
                       energy_j: float | None = None, kind: Kind = "plain") -> Probe:
    """A probe from the samples one measurement of an arm stored."""
    met: list[bool] = []
    if section.goodput is not None:
        tier = tiers[section.goodput.slo]
        met = [meets(s, tier) and _served(s) for s in samples]
    tokens = sum(s.completion_tokens or 0 for s in samples if _served(s))  # tok/J: an invalid answer serves no one
    wall = max((s.batch_wall_s or 0.0 for s in samples), default=0.0)
    return Probe(arm=arm, level=level, replicate=replicate, round=rnd, values=_constraint_values(samples, section),
                 met=met, cut=cut, tokens=tokens, energy_j=energy_j, wall_s=wall, kind=kind)


def check_capacity_config(config: BakeoffFile) -> CapacitySection:
    """:raises ConfigError: no capacity: section, or one the workload cannot serve."""
    section = config.capacity
    if section is None:
        raise ConfigError("bakeoff capacity needs a capacity: section (docs/capacity.md)")
    w = config.workload
    if section.goodput is not None and section.goodput.slo not in w.slo:
        raise ConfigError(f"capacity.goodput.slo {section.goodput.slo!r} is not a workload.slo tier "
                          f"(tiers: {', '.join(w.slo) or 'none'})")
    if w.sessions is not None and section.load == "rate":
        raise ConfigError("capacity.load: rate with workload.sessions is not searched: a session's next turn waits "
                          "for the last one's answer, so sessions have no arrival schedule; use load: streams (the "
                          "number of sessions replayed at once)")
    if section.load == "rate" and w.arrival is None:
        raise ConfigError("capacity.load: rate needs workload.arrival (its distribution, seed and requests or "
                          "duration_s; its rates are not used: the search picks them)")
    if w.concurrency or w.depths:
        raise ConfigError("capacity: leave workload.concurrency and depths out; the search picks the loads")
    return section


def _unsent_note(prompts: Sequence[Prompt], kind: Kind, section: CapacitySection) -> str | None:
    """Closed loop sends a kind's first prompt only: say so where the kind has others, so none is thought probed."""
    names = [p.name for p in prompts if prompt_kind(p) == kind]
    if section.load != "streams" or len(names) < 2:
        return None
    return (f"capacity ({kind}): closed-loop probes send {names[0]} N times at once (a batch is one prompt); "
            f"not sent: {', '.join(names[1:])}")


class _Prober:
    """The engine side of a probe: one arm's session measuring one load of one kind's prompts, and its
    over-saturation cut. Closed loop sends the kind's first prompt N times (a batch is one prompt); open loop
    sends the kind's prompts in turn; the sessions kind replays N conversations at once
    (:meth:`~bakeoff.core.run.arm.ArmRun.measure_replays`). A replicate far over a limit still ends its load at
    once (the search's ``hopeless`` stop)."""

    def __init__(self, sessions: dict[str, ArmRun], config: BakeoffFile, section: CapacitySection,
                 kind: Kind = "plain", conversations: Sequence[Session] = ()) -> None:
        self.sessions, self.config, self.section, self.kind = sessions, config, section, kind
        self.conversations = list(conversations)

    def __call__(self, arm: str, level: float, replicate: int, rnd: int) -> Probe:
        session = self.sessions[arm]
        mode = next(iter(self.config.workload.modes))
        cut: list[str] = []
        if self.kind == "sessions":  # N conversations at once: at most N turns in flight, no backlog to cut
            def measure() -> list[Sample]:
                return session.measure_replays(concurrent_replays(self.conversations, mode, replicate, int(level)))
        else:
            measure = self._point(session, level, replicate, mode, cut)
        monitor = session.monitor
        if monitor is not None:
            monitor.start()
        try:  # one engine start: every sample is of pass 0; the probe keeps its round for the pairing
            samples = measure()
        finally:
            gpu = monitor.stop() if monitor is not None else None
        return probe_from_samples(arm, level, replicate, rnd, samples, self.section, dict(self.config.workload.slo),
                                  cut[0] if cut else None, gpu.energy_j if gpu is not None else None, self.kind)

    def _point(self, session: ArmRun, level: float, replicate: int, mode: str,
               cut: list[str]) -> Callable[[], list[Sample]]:
        """One point of this kind's prompts at the load (closed loop: its first prompt N times at once; open loop:
        its prompts in turn, cut into ``cut`` when the backlog outgrows the slots)."""
        every = session.prompts
        mine = [p for p in every if prompt_kind(p) == self.kind]
        stop: Callable[[int, float], bool] | None = None
        if self.section.load == "streams":
            point = Point(mine[0], mode, replicate, concurrency=int(level))
        else:
            point = Point(mine[0], mode, replicate, rate=level)
            slots = effective_slots(session.effective, session.arm) or 1
            limit = self.section.backlog * slots

            def stop(in_flight: int, elapsed_s: float) -> bool:
                if in_flight > limit:
                    cut.append(f"backlog: {in_flight} requests in flight > {self.section.backlog:g} × {slots} "
                               f"slots after {elapsed_s:.1f} s")
                    return True
                return False

        def measure() -> list[Sample]:
            # the open-loop schedule draws from the session's prompts: this kind's only, for this probe
            session.prompts, session.open_loop_stop = mine, stop
            try:
                return session.measure(point)
            finally:
                session.open_loop_stop, session.prompts = None, every
        return measure


class CapacityExecutor:
    """Runs a planned bakeoff as a capacity search instead of passes (``bakeoff capacity``): every arm started
    and warmed up once, then probed round by round; the result lands in the run's ``capacity.json``."""

    name = "local"  # on this machine, like the local executor (run_bakeoff's checks read this)

    def __init__(self, on_probe: Callable[[Probe], None] = lambda p: None) -> None:
        self.on_probe = on_probe
        self.result: CapacityResult | None = None

    def run(self, plan: Plan, run: RunDir, events: RunEvents, done: DoneKeys) -> None:
        config = plan.config
        section = check_capacity_config(config)
        with ExitStack() as stack:
            sessions: dict[str, ArmRun] = {}
            for planned in plan.arms:
                events.on_arm_start(planned.arm.name, 0)
                session = stack.enter_context(ArmRun(planned, run, 0, config.workload, prompts=plan.prompts,
                                                     modes=plan.modes, events=events))
                session.warm_up()
                sessions[planned.arm.name] = session
            probes: list[Probe] = []
            try:  # kind after kind, each its own search over every arm (kinds are never compared)
                kinds: list[Kind] = ["sessions"] if plan.sessions is not None else kinds_of(plan.prompts)
                for kind in kinds:
                    if note := _unsent_note(plan.prompts, kind, section):
                        events.on_note(note)
                    probes += search(list(sessions), section,
                                     _Prober(sessions, config, section, kind, plan.sessions or ()), self.on_probe)
            finally:
                for name, session in sessions.items():
                    run.append_attempt(name, session.attempt)
        self.result = analyze_capacity(probes, section, [a.arm.name for a in plan.arms], config.baseline_arm,
                                       seed=config.workload.seed)
        write_capacity(run.path, self.result)
