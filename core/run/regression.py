"""Planning a regression gate (``bakeoff gate FILE``): the run of two builds that ``bakeoff run`` then measures.

A gate answers one question, "is the new build slower?", so it runs exactly two arms of the file, the
``gate:`` section's reference and candidate, and refuses before anything starts when they could differ in
anything but the engine build: their configuration fingerprints (core/config/fingerprint.py, which leaves
out the options each adapter declares in ``capabilities.build_options``) must be equal. Differences are named,
with the build options the engine allows. The reference is the baseline, so every comparison is
candidate/reference, paired request by request.

Both builds run on this machine in the same run: passes interleave them in orders drawn from the seed (each
pass starts both engines), so a drift of the machine during the run falls on both. Two arms of one build (an A/A
gate) launch the same command, so each pass starts it once and both run on that server, as any run's arms that
share a server key do (core/run/plan.py): the A/A gate tells request-to-request spread, not restart-to-restart.
A gate needs at least :data:`~bakeoff.core.analysis.stats.MIN_ADAPTIVE_PASSES` passes: the interval resamples
passes first, and two give it only three distinct draws, too few to trust its bound (an A/A gate of two vLLM venvs
with 2 passes on a busy machine read 0.595x (0.399-0.880)); a file that does not set ``workload.passes`` gets
:data:`GATE_PASSES`.
"""

from __future__ import annotations

from ..analysis.stats import MIN_ADAPTIVE_PASSES
from ..common.errors import ConfigError
from ..config.fingerprint import fingerprint_differences
from ..config.schema import BakeoffFile, GateSpec
from ..engine.fingerprint import arm_fingerprint
from ..engine.registry import load_engine
from .plan import effective_workload, server_key

__all__ = ["GATE_PASSES", "gate_config"]

GATE_PASSES = 3


def gate_config(config: BakeoffFile, max_slowdown: float | None = None) -> tuple[BakeoffFile, GateSpec, list[str]]:
    """The configuration a gate runs, its gate section (``max_slowdown`` overriding the file's), and notes for
    the user (arms left out, passes chosen).

    :raises ConfigError: no ``gate:`` section, a Ray executor, arms of two engines, or arms that differ in more
        than the build (each difference named).
    """
    if config.gate is None:
        raise ConfigError("gate: the file has no 'gate:' section; add gate: {reference: ARM, candidate: ARM, "
                          "max_slowdown: 3%}")
    gate = config.gate if max_slowdown is None else config.gate.model_copy(update={"max_slowdown": max_slowdown})
    if config.executor is not None and config.executor.kind != "local":
        raise ConfigError("gate: both builds run interleaved on this machine; remove 'executor:' from the file")
    if config.live is not None or config.phases is not None or config.calibrate:
        raise ConfigError("gate: a gate runs two arms of one machine; remove live:, phases: and calibrate:")
    arms = {a.name: a for a in config.arms}
    ref, cand = arms[gate.reference], arms[gate.candidate]
    if ref.engine != cand.engine:
        raise ConfigError(f"gate: {ref.name!r} runs {ref.engine} and {cand.name!r} runs {cand.engine}; a gate "
                          "compares two builds of one engine")
    adapter = load_engine(ref.engine)
    fp_ref = arm_fingerprint(adapter, ref, effective_workload(config.workload, ref))
    fp_cand = arm_fingerprint(adapter, cand, effective_workload(config.workload, cand))
    if fp_ref.id != fp_cand.id:
        builds = ", ".join(f"options.{o}" for o in adapter.capabilities.build_options) or "nothing (this engine "\
            "declares no build options)"
        raise ConfigError(f"gate: {ref.name!r} and {cand.name!r} must differ only in the engine build ({builds}), "
                          f"but differ in: {'; '.join(fingerprint_differences(fp_ref.canonical, fp_cand.canonical))}")
    notes = []
    left_out = [n for n in arms if n not in (ref.name, cand.name)]
    if left_out:
        notes.append(f"gate: runs {ref.name} and {cand.name} only; left out: {', '.join(left_out)}")
    workload = config.workload
    if "passes" not in workload.model_fields_set:
        workload = workload.model_copy(update={"passes": GATE_PASSES})
        notes.append(f"gate: {GATE_PASSES} interleaved passes (workload.passes sets another number)")
    elif workload.passes < MIN_ADAPTIVE_PASSES:
        raise ConfigError(f"gate: workload.passes is {workload.passes}; a gate interleaves the builds over at least "
                          f"{MIN_ADAPTIVE_PASSES} passes (each starts both in a drawn order; the interval resamples "
                          "passes, and fewer give it too few distinct draws to trust its bound)")
    if ref.options == cand.options and ref.env == cand.env:
        shared = ", on one engine start per pass" if server_key(ref) == server_key(cand) else ""
        notes.append(f"gate: {ref.name} and {cand.name} run the same build (an A/A check of the gate itself){shared}")
    gated = config.model_copy(update={"arms": [ref, cand], "baseline": ref.name, "workload": workload,
                                      "gate": gate})
    return BakeoffFile.model_validate(gated.model_dump()), gate, notes
