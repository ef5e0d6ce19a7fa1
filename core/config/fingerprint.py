"""A canonical fingerprint of what one arm measures, so two rows of two people can be told the same or not.

Users share tables and nobody can tell whether two rows ran the same configuration: one wrote ``ngram`` and
the other ``ngram`` with ``variant: mod`` (the engine's default), one set ``parallel: 1`` and the other left it
unset (bakeoff passes ``-np 1`` anyway), one split a model ``[1, 1]`` and the other ``[0.5, 0.5]``. The
canonical form resolves those before hashing:

- **aliases resolved**: a method's default variant is written out; a built-in model name becomes the file's
  identity (name, size and a hash of its head), as does a path, so the same GGUF under two paths is one model;
- **defaults dropped**: unset settings, engine options left at their default, settings an engine gets anyway
  (``Capabilities.setting_defaults``), and knobs of ``method: none``;
- **values normalized**: ``tensor_split`` as shares of 1, ``gpus`` as a count (which devices is placement,
  not configuration), KV and dtype names lower-cased, ``--flag=value`` split in two, numbers rounded to 6
  significant digits, keys sorted;
- **left out**: the arm's name, the engine *build* (``Capabilities.build_options``: a binary path, a venv, an
  image; bundles and reports record the build beside the fingerprint), bind address and port, and the design
  of the run (reps, passes, seed, timeouts), which changes how precisely a configuration is measured, not what.

What each request asks (output tokens, fixed length, thinking, sampling modes, the prompts by content, depths,
streams) is part of it. Values of ``env:`` entries are secrets as everywhere in bakeoff: only a hash of
``NAME=value`` enters. The fingerprint is the first 16 hex digits of the SHA-256 of the canonical JSON; the
canonical document is stored beside it in run.json, so a report can say exactly what differs.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from ..common.redact import redact_argv
from .schema import Arm, Prompt, Workload

__all__ = ["FINGERPRINT_SCHEME", "ArmFingerprint", "canonical_arm", "fingerprint_of", "fingerprint_differences",
           "flatten"]

# 1: the first canonical form (this module). A change of what enters the canonical form bumps it, so two
# fingerprints made by different bakeoffs never look equal by accident.
FINGERPRINT_SCHEME = 1

ModelIdentity = Callable[[str], Any]


class ArmFingerprint(BaseModel):
    """One arm's configuration fingerprint and the canonical document it hashes."""

    id: str = Field(description="First 16 hex digits of the SHA-256 of the canonical JSON.")
    scheme: int = Field(FINGERPRINT_SCHEME, description="Version of the canonical form.")
    canonical: dict[str, Any] = Field(description="Aliases resolved, defaults dropped, values normalized.")


def _number(value: float) -> float | int:
    if isinstance(value, bool) or not isinstance(value, float) or not math.isfinite(value):
        return value
    rounded = float(f"{value:.6g}")
    return int(rounded) if rounded.is_integer() else rounded


def _normal(value: Any) -> Any:
    """Numbers rounded, containers normalized all the way down."""
    if isinstance(value, dict):
        return {str(k): _normal(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_normal(v) for v in value]
    if isinstance(value, float):
        return _number(value)
    return value


def _settings(arm: Arm, implied: Mapping[str, Any]) -> dict[str, Any]:
    raw = arm.settings.model_dump(mode="json", exclude={"host", "port"})
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None or implied.get(key, object()) == value:
            continue
        if key == "tensor_split":
            total = sum(value) or 1.0
            value = [round(x / total, 4) for x in value]
        elif key == "gpus":
            value = len(value)
        elif key in ("kv_type", "dtype") and isinstance(value, str):
            value = value.lower()
        out[key] = value
    return out


def _speculative(arm: Arm, default_variants: Mapping[str, str], identity: ModelIdentity) -> dict[str, Any]:
    spec = arm.speculative
    if not spec.enabled:
        return {"method": "none"}
    out: dict[str, Any] = {k: v for k, v in spec.model_dump(mode="json").items() if v is not None}
    if spec.variant is None and spec.method in default_variants:
        out["variant"] = default_variants[spec.method]
    if spec.draft_model:
        out["draft_model"] = identity(spec.draft_model)
    return out


def _args(args: Sequence[str]) -> list[str]:
    """``--flag=value`` as two words, values of key-like flags masked (a key is no configuration)."""
    out: list[str] = []
    for arg in redact_argv(args):
        flag, eq, value = arg.partition("=")
        out += [flag, value] if eq and flag.startswith("-") else [arg]
    return out


def _env(env: Mapping[str, str]) -> dict[str, str]:
    return {name: "sha256:" + hashlib.sha256(f"{name}={value}".encode()).hexdigest()[:16]
            for name, value in env.items()}


def _prompts(prompts: Sequence[Prompt]) -> dict[str, Any]:
    text = json.dumps([{"name": p.name, "messages": p.messages} for p in prompts], sort_keys=True)
    return {"names": [p.name for p in prompts], "sha256": hashlib.sha256(text.encode()).hexdigest()[:16]}


def _request(workload: Workload, prompts: Sequence[Prompt]) -> dict[str, Any]:
    modes = workload.sampling_modes()
    out: dict[str, Any] = {
        "max_tokens": workload.max_tokens, "fixed_length": workload.fixed_length, "thinking": workload.thinking,
        "modes": {m: modes[m].model_dump(mode="json", exclude_none=True) for m in workload.modes},
        "prompts": _prompts(prompts)}
    if workload.depths:
        out["depths"] = sorted(workload.depths)
        out["needle"] = workload.needle
    if workload.concurrency:
        out["concurrency"] = sorted(workload.concurrency)
    if workload.arrival is not None:
        out["arrival"] = workload.arrival.model_dump(mode="json")
    return out


def canonical_arm(arm: Arm, workload: Workload, prompts: Sequence[Prompt], *, engine_options: Mapping[str, Any],
                  build_options: Sequence[str] = (), default_variants: Mapping[str, str] | None = None,
                  setting_defaults: Mapping[str, Any] | None = None,
                  model_identity: ModelIdentity = str) -> dict[str, Any]:
    """The canonical document of one arm (see the module docstring).

    :param workload: the arm's effective workload (its request-level overrides applied).
    :param engine_options: the arm's options as the engine's Options model validated them, defaults left out.
    :param model_identity: a model reference (built-in name or path) to what identifies its content.
    """
    doc: dict[str, Any] = {"scheme": FINGERPRINT_SCHEME, "engine": arm.engine}
    if arm.launch != "native":
        doc["launch"] = arm.launch
    if arm.attached:
        doc["attached"] = True  # the server was started by someone else: its flags are not known here
    if arm.model is not None:
        doc["model"] = model_identity(arm.model)
    doc["speculative"] = _speculative(arm, default_variants or {}, model_identity)
    if settings := _settings(arm, setting_defaults or {}):
        doc["settings"] = settings
    options = {k: v for k, v in engine_options.items() if k not in {"kind", *build_options} and v is not None}
    if options:
        doc["options"] = options
    if arm.extra_args:
        doc["extra_args"] = _args(arm.extra_args)
    if arm.env:
        doc["env"] = _env(arm.env)
    doc["request"] = _request(workload, prompts)
    normal: dict[str, Any] = _normal(doc)
    return normal


def fingerprint_of(canonical: dict[str, Any]) -> ArmFingerprint:
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), default=str)
    return ArmFingerprint(id=hashlib.sha256(text.encode()).hexdigest()[:16],
                          scheme=int(canonical.get("scheme", FINGERPRINT_SCHEME)), canonical=canonical)


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level of dotted keys (``speculative.n_max``), the way sweeps name them."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out.update(flatten(inner, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): value}


def _shown(value: Any) -> str:
    return "unset" if value is None else json.dumps(value, sort_keys=True, default=str)


def fingerprint_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """What differs between two canonical documents, one ``key: A → B`` per dotted key (``unset`` where a
    document has no such key)."""
    fa, fb = flatten(dict(a)), flatten(dict(b))
    return [f"{key}: {_shown(fa.get(key))} → {_shown(fb.get(key))}"
            for key in sorted(set(fa) | set(fb)) if fa.get(key) != fb.get(key)]
