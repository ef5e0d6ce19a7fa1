"""What an engine really runs with, in one schema, and the one place that compares it with the arm.

An adapter reads the engine back (``EngineAdapter.effective_settings``) and fills :class:`Effective`'s
common fields with what the engine reports, saying where each came from (:attr:`Effective.sources`).
:func:`compare_effective` then writes every asked-versus-running mismatch those fields show, the same
way for every engine: context per slot, slots, speculation on or off, the speculative method, ``n_max``
and the KV cache type. Adapters keep only the checks no other engine has (a missing prompt template, a
read-back endpoint that failed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..config.schema import Arm

__all__ = ["Effective", "compare_effective", "COMMON_FIELDS"]

# The typed fields compare_effective reads; Effective.record() writes them into run.json next to raw.
COMMON_FIELDS = ("context_tokens", "slots", "speculative", "spec_method", "n_max", "kv_type")


class Effective(BaseModel):
    """What the engine reports it really runs with, and where that differs from what was asked.

    Every field is None when the engine does not report it; core compares only what is reported.
    """

    model_config = ConfigDict(extra="forbid")

    model_id: str | None = Field(None, description="The model id the engine serves (/v1/models).")
    version: str | None = Field(None, description="The engine's own version or build string.")
    context_tokens: int | None = Field(None, description="Tokens one request may use (context per slot).")
    slots: int | None = Field(None, description="Sequences the engine runs at once, where it pins them to "
                                                "settings.parallel (default 1): compared with it.")
    speculative: bool | None = Field(None, description="Whether speculation really runs; None: the engine "
                                                       "does not say (or only says so when it is on).")
    spec_method: str | None = Field(None, description="The speculative method it runs, in the engine's own "
                                                      "words (comma-separated when it runs several).")
    n_max: int | None = Field(None, description="Draft tokens (or steps) per step it runs with.")
    kv_type: str | None = Field(None, description="The KV cache type it runs with, in the engine's own words.")
    prefix_block_tokens: int | None = Field(None, description="Tokens per prefix-cache block: the engine reuses a "
                                            "cached prefix in whole blocks (vLLM's block_size), so a session turn "
                                            "may re-prefill up to one block less than its prefix. None: token by "
                                            "token, or not reported.")
    raw: dict[str, Any] = Field(default_factory=dict, description="Everything read back, under the engine's "
                                                                  "own names (run.json's 'effective').")
    sources: dict[str, tuple[str, str]] = Field(
        default_factory=dict, description="Common field -> (where, what): ('/props', 'n_ctx') makes a mismatch "
                                          "read '/props says n_ctx 2048'.")
    notes: dict[str, str] = Field(default_factory=dict, description="Common field -> why it may differ, "
                                                                    "appended to its mismatch.")
    mismatches: list[str] = Field(default_factory=list)

    def record(self) -> dict[str, Any]:
        """run.json's ``effective``: the raw read-back plus every common field the engine reported."""
        common = {k: getattr(self, k) for k in COMMON_FIELDS if getattr(self, k) is not None}
        return {**self.raw, **common}

    def said(self, name: str, value: Any) -> str:
        """'/props says n_ctx 2048': where the engine said ``value`` for common field ``name``."""
        where, what = self.sources.get(name, ("the engine", name))
        if isinstance(value, bool):
            return f"{where} says {what}: {str(value).lower()}"
        return f"{where} says {what} {value}"

    def _note(self, name: str) -> str:
        return f" ({self.notes[name]})" if name in self.notes else ""


def compare_effective(arm: Arm, eff: Effective, engine: str = "the engine",
                      terms: Mapping[str, str | None] | None = None) -> list[str]:
    """Every mismatch between what ``arm`` asks for and what ``eff`` says the engine runs.

    Settings and speculation turned on by someone else are compared only for engines bakeoff launched (an
    attached server runs what it runs); speculation asked but off, and the wrong method, are mismatches
    either way.

    :param engine: how messages name the engine ("llama-server").
    :param terms: what the arm's ``spec_method`` and ``kv_type`` are called in the engine's read-back
        (``EngineAdapter.engine_term``); a term that is None or absent is not compared.
    """
    terms = terms or {}
    spec, s = arm.speculative, arm.settings
    launched = not arm.attached
    out: list[str] = []
    if launched and s.ctx is not None and eff.context_tokens is not None and eff.context_tokens != s.ctx:
        out.append(f"asked ctx {s.ctx} per slot, {eff.said('context_tokens', eff.context_tokens)}"
                   f"{eff._note('context_tokens')}")
    if launched and eff.slots is not None and eff.slots != (s.parallel or 1):
        out.append(f"asked {s.parallel or 1} slot(s), {eff.said('slots', eff.slots)}{eff._note('slots')}")
    if spec.enabled and eff.speculative is False:
        out.append(f"speculative.method {spec.method!r} asked, but {eff.said('speculative', False)} — {engine} "
                   f"runs WITHOUT speculation")
    elif not spec.enabled and eff.speculative and launched:
        running = f" ({eff.spec_method})" if eff.spec_method else ""
        out.append(f"speculation is off in the arm but {eff.said('speculative', True)}{running}")
    method = terms.get("spec_method")
    if spec.enabled and eff.speculative is not False and method and eff.spec_method is not None \
            and method.lower() not in [m.strip().lower() for m in eff.spec_method.split(",")]:
        out.append(f"asked {method}, {eff.said('spec_method', eff.spec_method)}")
    if launched and spec.enabled and spec.n_max is not None and eff.n_max is not None and eff.n_max != spec.n_max:
        out.append(f"asked speculative.n_max {spec.n_max}, {eff.said('n_max', eff.n_max)}{eff._note('n_max')}")
    kv = terms.get("kv_type")
    if launched and s.kv_type is not None and kv and eff.kv_type is not None and eff.kv_type != kv:
        what = eff.sources.get("kv_type", ("the engine", "kv_type"))[1]
        out.append(f"asked settings.kv_type {s.kv_type!r} ({what} {kv}), {eff.said('kv_type', eff.kv_type)}")
    return out
