"""Matrix sweeps: one bakeoff file, many named arms, as few engine starts as the sweep allows.

The community's tables are sweeps (n-max 1–8 × split mode × KV type). Writing each combination as
its own arm is error-prone, so an arm (or the whole file) may carry ``sweep: {dotted.key: [values]}``;
every combination becomes a named arm that remembers its point in ``swept``. Expansion happens when the
file is parsed, so everything downstream (plan, run.json, reports) sees plain arms.

Which expanded arms can share one engine start is the plan's business (core/run/plan.py ``server_key``).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import PurePath
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from ..common.errors import ConfigError
from .bounds import MAX_ARMS
from .schema import Arm, ArmOrigin, BakeoffFile, format_validation_error, yaml_line

__all__ = ["expand_sweeps", "sweep_keys_of", "arm_name_for"]

# Arm keys a sweep may not touch: they are the sweep's own bookkeeping.
_NOT_SWEEPABLE = {"name", "sweep", "swept"}
# Arm sections whose inner keys are free-form (validated by the engine adapter or passed through).
_FREE_FORM = {"options", "env"}



def _check_key(key: str) -> list[str]:
    """The parts of a sweep key, or a ValueError saying what is wrong with it."""
    parts = key.split(".")
    if not all(parts):
        raise ValueError("use a dotted key such as speculative.n_max")
    head = parts[0]
    if head in _NOT_SWEEPABLE or head not in Arm.model_fields:
        known = sorted(set(Arm.model_fields) - _NOT_SWEEPABLE)
        raise ValueError(f"unknown key {head!r}; a sweep key starts with one of: {', '.join(known)}")
    annotation = Arm.model_fields[head].annotation
    if head in _FREE_FORM:
        if len(parts) != 2:
            raise ValueError(f"use {head}.<name>")
        return parts
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if len(parts) != 2 or parts[1] not in annotation.model_fields:
            raise ValueError(f"unknown key; {head}.<key> takes one of: {', '.join(annotation.model_fields)}")
        return parts
    if len(parts) != 1:
        raise ValueError(f"{head} has no sub-keys")
    return parts


def _name_part(key: str, value: Any) -> str:
    leaf = key.split(".")[-1]
    if isinstance(value, bool):
        text = f"{leaf}-{'on' if value else 'off'}"
    elif isinstance(value, (int, float)):
        text = f"{leaf}{value:g}"
    elif value is None:
        text = f"{leaf}-none"
    elif isinstance(value, str) and ("/" in value or value.endswith(".gguf")):
        text = f"{leaf}-{PurePath(value).stem}"
    else:
        text = f"{leaf}-{value}"
    return re.sub(r"[^A-Za-z0-9._+-]", "_", text)


def arm_name_for(base: str, point: dict[str, Any]) -> str:
    """``spec`` + ``{speculative.n_max: 2, settings.split: tensor}`` -> ``spec-n_max2-split-tensor``."""
    return "-".join([base, *(_name_part(k, v) for k, v in point.items())])


def sweep_keys_of(config: BakeoffFile) -> list[str]:
    """Every key swept anywhere in the file (arm-level first, in file order)."""
    keys: list[str] = []
    for arm in config.arms:
        keys += [k for k in arm.sweep if k not in keys]
    return keys + [k for k in config.sweep if k not in keys]


def _set(data: dict[str, Any], parts: list[str], value: Any) -> None:
    for part in parts[:-1]:
        data = data.setdefault(part, {})
    data[parts[-1]] = value


def _where(source: str, root: yaml.Node | None, loc: tuple[int | str, ...]) -> str:
    line = yaml_line(root, loc) if root is not None else None
    return f"{source}:{line}" if line else source


def _validated_sweep(sweep: dict[str, list[Any]], scope: tuple[int | str, ...], source: str,
                     root: yaml.Node | None) -> dict[str, tuple[list[str], list[Any]]]:
    out = {}
    for key, values in sweep.items():
        loc = (*scope, "sweep", key)
        label = ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in loc).replace(".[", "[")
        try:
            parts = _check_key(key)
        except ValueError as exc:
            raise ConfigError(f"{_where(source, root, loc)}: {label}: {exc}") from None
        if not values:
            raise ConfigError(f"{_where(source, root, loc)}: {label}: give at least one value")
        out[key] = (parts, values)
    return out


def _check_count(config: BakeoffFile, matrices: list[dict[str, tuple[list[str], list[Any]]]], source: str,
                 root: yaml.Node | None) -> None:
    """Refuse a sweep that makes more than MAX_ARMS arms before building one (a few short lists multiply fast)."""
    total = sum(math.prod(len(values) for _, values in m.values()) for m in matrices)
    if total > MAX_ARMS:
        index = max(range(len(matrices)), key=lambda i: math.prod(len(v) for _, v in matrices[i].values()))
        scope: tuple[int | str, ...] = ("arms", index) if config.arms[index].sweep else ()
        raise ConfigError(f"{_where(source, root, (*scope, 'sweep'))}: the sweeps make {total:,} arms, more than the "
                          f"{MAX_ARMS:,} a run may have (each is an engine start per pass); sweep fewer values")


def expand_sweeps(config: BakeoffFile, source: str = "<config>", root: yaml.Node | None = None) -> BakeoffFile:
    """Replace every arm that has a sweep (its own or the file's) with one arm per combination.

    Idempotent: a file without ``sweep:`` keys comes back unchanged. A baseline naming a swept arm
    moves to the first arm it expanded into.

    :raises ConfigError: an unknown sweep key, an empty value list, or a value the arm rejects, naming
        the sweep key and its line.
    """
    top = _validated_sweep(config.sweep, (), source, root)
    if not top and not any(a.sweep for a in config.arms):
        return config
    arms: list[dict[str, Any]] = []
    origins: list[ArmOrigin | None] = []  # where each expanded arm was written (for later errors' lines)
    renamed: dict[str, str] = {}
    matrices = []
    for index, arm in enumerate(config.arms):
        own = _validated_sweep(arm.sweep, ("arms", index), source, root)
        matrices.append((own, {**own, **{k: v for k, v in top.items() if k not in own}}))
    _check_count(config, [m for _, m in matrices], source, root)
    for index, (arm, (own, matrix)) in enumerate(zip(config.arms, matrices, strict=True)):
        if not matrix:
            arms.append(arm.model_dump(exclude_unset=True, exclude={"sweep"}))
            origins.append(arm.origin)
            continue
        keys = list(matrix)
        for combo in itertools.product(*(matrix[k][1] for k in keys)):
            point = dict(zip(keys, combo, strict=True))
            data = arm.model_dump(exclude_unset=True, exclude={"sweep"})
            for key, value in point.items():
                _set(data, matrix[key][0], value)
            data["name"] = arm_name_for(arm.name, point)
            data["swept"] = {**arm.swept, **point}
            try:
                Arm.model_validate(data)
            except ValidationError as exc:
                scope: tuple[int | str, ...] = ("arms", index) if any(k in own for k in point) else ()
                problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
                raise ConfigError(f"{_where(source, root, (*scope, 'sweep'))}: sweep point "
                                  f"{json.dumps(point, default=str)} makes an invalid arm: {problems}") from None
            renamed.setdefault(arm.name, data["name"])
            arms.append(data)
            origins.append(arm.origin)
    data = config.model_dump(exclude_unset=True, exclude={"sweep", "arms"})
    data["arms"] = arms
    if config.baseline in renamed:
        data["baseline"] = renamed[config.baseline]
    try:
        expanded = BakeoffFile.model_validate(data)
    except ValidationError as exc:
        # a top-level key (baseline) still has its line; an expanded arm's index is not the file's
        lines = root if not any(e["msg"].removeprefix("Value error, ").startswith("arms") for e in exc.errors()) \
            else None
        problems = format_validation_error(exc, source, lines, model=BakeoffFile).replace("\n", "; ")
        raise ConfigError(f"{problems} (after sweep expansion)") from None
    for new, origin in zip(expanded.arms, origins, strict=True):
        new.set_origin(origin)
    return expanded


