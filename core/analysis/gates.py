"""Quality gates scored, and spec correctness: does an arm still answer, and does it write what spec-off writes?

core/measure/gates.py sends the probes and keeps the raw answers in the arm's record. Here, when a run is
summarized, a failed probe is compared with the arm's reference (the spec-off arm of the same engine and
model, else the run's baseline); when the reference fails too — tiny models do not know arithmetic — the
arm is "same-as-baseline" if it answered what the reference answered (or runs another engine or model),
and "regressed" otherwise. A probe the baseline itself fails is "not-informative" on the baseline: it
cannot tell the arms apart on this model, which is expected and harmless, so no report shows it as a
failure. Only "fail" and "regressed" (:data:`FAILING`) mark an arm worse than its reference.

Spec correctness compares greedy outputs (``arms/<arm>/outputs.jsonl``) of an
arm with its reference: the fraction identical, and for a mismatch the first diverging position and both
continuations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ..config.schema import Arm, SamplingMode
from ..results.record import ArmAttempt, GateAnswer
from .fairness import read_outputs

__all__ = ["CONTEXT_CHARS", "EARLY_DIVERGENCE_CHARS", "FAILING", "NOT_INFORMATIVE", "Divergence", "GateStatus",
           "SpecCheck", "different_task", "first_difference", "gate_label", "reference_arm", "score_gates",
           "spec_identity", "what_differs"]

FAILING = ("fail", "regressed")
NOT_INFORMATIVE = "not-informative"
CONTEXT_CHARS = 40  # of each continuation shown after a divergence
# greedy answers of the same weights that part within this many characters were not answering the same prompt
# (an engine that rendered another template), whatever numerics later split them
EARLY_DIVERGENCE_CHARS = 16


class GateStatus(BaseModel):
    status: str = Field(description="pass | fail | same-as-baseline | regressed | not-informative (the baseline "
                                    "itself fails it: it cannot tell arms apart on this model) | skipped")
    detail: str = ""
    answer: str | None = Field(None, description="The raw answer (first 500 characters).")


class Divergence(BaseModel):
    point: str
    position: int = Field(description="First differing character of the output text.")
    reference: str
    arm: str


class SpecCheck(BaseModel):
    reference: str
    compared: int
    identical: int
    fraction: float | None
    same_engine: bool = Field(description="False: another engine or model; agreement is reported, not judged.")
    other: str | None = Field(None, description="When not the same: what differs from the reference, 'engine', "
                                                "'model' or 'server' (the first that does, in that order).")
    divergences: list[Divergence] = Field(default_factory=list)


def first_difference(a: str, b: str) -> int:
    """The first character position where ``a`` and ``b`` differ (the shorter length if one is a prefix)."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _gate_results(records: Sequence[ArmAttempt]) -> dict[str, GateAnswer]:
    return next((r.gates for r in records if r.gates), {})


def _server(arm: Arm | None) -> tuple[str | None, str | None, str | None]:
    """What answers an arm's requests: its engine, model and URL (all None for an arm not in the config)."""
    return (arm.engine, arm.model, arm.url) if arm is not None else (None, None, None)


def what_differs(arm: Arm | None, reference: Arm | None) -> str | None:
    """'engine', 'model' or 'server' (its URL): the first that two arms do not share; None when they share all.
    A label says this word, so a one-engine run whose arms load different models never reads "other engine"."""
    for word, a, b in zip(("engine", "model", "server"), _server(arm), _server(reference), strict=True):
        if a != b:
            return word
    return None


def reference_arm(arm: str, arms: Mapping[str, Arm], baseline: str | None) -> tuple[str | None, bool]:
    """(the arm's reference, same engine and model): the spec-off arm of the same engine and model, else the
    run's baseline; None for the reference itself."""
    cfg = arms.get(arm)
    key = _server(cfg)
    spec_off = [n for n, c in arms.items() if n != arm and _server(c) == key and not c.speculative.enabled]
    if cfg is not None and cfg.speculative.enabled and spec_off:
        ref = baseline if baseline in spec_off else spec_off[0]
        return ref, True
    if baseline is None or baseline == arm:
        return None, True
    return baseline, _server(arms.get(baseline)) == key


def score_gates(records: Mapping[str, Sequence[ArmAttempt]], arms: Mapping[str, Arm],
                baseline: str | None) -> dict[str, dict[str, GateStatus]]:
    """Per arm and gate: pass | fail | same-as-baseline | regressed | skipped."""
    raw = {arm: _gate_results(records.get(arm, [])) for arm in arms}
    out: dict[str, dict[str, GateStatus]] = {}
    for arm, gates in raw.items():
        ref, same = reference_arm(arm, arms, baseline)
        scored = {}
        for name, g in gates.items():
            if g.passed is None:
                scored[name] = GateStatus(status="skipped", detail=g.detail, answer=g.answer)
                continue
            if g.passed:
                scored[name] = GateStatus(status="pass", detail=g.detail, answer=g.answer)
                continue
            r = raw.get(ref or "", {}).get(name)
            if ref is None and arm == baseline:
                status, detail = NOT_INFORMATIVE, f"{g.detail}; the baseline fails this probe, so it cannot tell " \
                                                  "the arms apart on this model"
            elif ref is None or r is None or r.passed is None or r.passed:
                status, detail = "fail", g.detail + (f"; {ref} passes" if r and r.passed else "")
            elif not same or r.answer == g.answer:
                status, detail = "same-as-baseline", f"{g.detail}; {ref} fails too"
            else:
                status, detail = "regressed", f"{g.detail}; {ref} fails too but answered differently"
            scored[name] = GateStatus(status=status, detail=detail, answer=g.answer)
        out[arm] = scored
    return out


def gate_label(status: str) -> str:
    """How a table says a gate status (``not-informative`` in words)."""
    return "not informative for this model" if status == NOT_INFORMATIVE else status


def _is_greedy(mode: str, sampling: Mapping[str, SamplingMode]) -> bool:
    m = sampling.get(mode)
    return (m.temperature if m is not None else 0.0 if mode == "greedy" else 1.0) == 0.0


def spec_identity(run_path: Path, arms: Mapping[str, Arm], baseline: str | None,
                  sampling: Mapping[str, SamplingMode]) -> dict[str, SpecCheck]:
    """Per arm with a reference: how many greedy outputs equal the reference's at the same point.

    :param sampling: the run's sampling modes by name; a mode is greedy when its temperature is 0.
    """
    out: dict[str, SpecCheck] = {}
    outputs = {arm: read_outputs(run_path, arm) for arm in arms}
    for arm in arms:
        ref, same = reference_arm(arm, arms, baseline)
        if ref is None:
            continue
        pairs = _greedy_pairs(outputs[arm], outputs.get(ref, {}), sampling)
        if not pairs:
            continue
        check = SpecCheck(reference=ref, compared=len(pairs), identical=0, fraction=None, same_engine=same,
                          other=None if same else what_differs(arms.get(arm), arms.get(ref)))
        for k, text, other in pairs:
            if text == other:
                check.identical += 1
                continue
            pos = first_difference(text, other)
            if len(check.divergences) < 5:
                check.divergences.append(Divergence(point=f"{k[0]}/{k[1]} rep {k[2]} pass {k[3]}", position=pos,
                                                    reference=other[pos:pos + CONTEXT_CHARS],
                                                    arm=text[pos:pos + CONTEXT_CHARS]))
        check.fraction = check.identical / check.compared
        out[arm] = check
    return out


def _greedy_pairs(mine: dict[tuple[Any, ...], str], theirs: dict[tuple[Any, ...], str],
                  sampling: Mapping[str, SamplingMode]) -> list[tuple[tuple[Any, ...], str, str]]:
    """(point, this arm's greedy output, the reference's at the same point or, failing that, at the same prompt
    in another rep or pass), in a stable order; points the reference has no output for are left out."""
    pairs = []
    for k in sorted((k for k in mine if _is_greedy(k[1], sampling)), key=str):
        other = theirs[k] if k in theirs else _any_pass(k, theirs)
        if other is not None:
            pairs.append((k, mine[k], other))
    return pairs


def _any_pass(key: tuple[Any, ...], outputs: dict[tuple[Any, ...], str]) -> str | None:
    """Greedy output of the reference at the same prompt, mode, depth and length (another rep or pass)."""
    prompt, mode, _rep, _pass, depth, max_tokens = key
    return next((t for k, t in outputs.items() if (k[0], k[1], k[4], k[5]) == (prompt, mode, depth, max_tokens)),
                None)


def different_task(run_path: Path, arm: str, reference: str, sampling: Mapping[str, SamplingMode]) -> str | None:
    """Why two arms on the same weights (different engines) did not do the same work: their greedy answers part
    within the first :data:`EARLY_DIVERGENCE_CHARS` characters on most prompts compared; None when they agree
    that far (numerics may split them later) or nothing greedy can be compared."""
    pairs = _greedy_pairs(read_outputs(run_path, arm), read_outputs(run_path, reference), sampling)
    early = [(k, text, other) for k, text, other in pairs
             if text != other and first_difference(text, other) < EARLY_DIVERGENCE_CHARS]
    if not pairs or len(early) * 2 <= len(pairs):
        return None
    k, text, other = early[0]
    return (f"same weights, but the greedy answers part within {EARLY_DIVERGENCE_CHARS} characters on {len(early)} "
            f"of {len(pairs)} prompts, as if the engines got different prompts (e.g. {k[0]}: {reference} "
            f"{other[:CONTEXT_CHARS]!r}, {arm} {text[:CONTEXT_CHARS]!r})")
