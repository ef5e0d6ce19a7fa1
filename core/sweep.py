"""Matrix sweeps: one bakeoff file, many named arms, as few engine starts as the sweep allows.

The community's tables are sweeps (n-max 1–8 × split mode × KV type). Writing each combination as
its own arm is error-prone, so an arm (or the whole file) may carry ``sweep: {dotted.key: [values]}``;
every combination becomes a named arm that remembers its point in ``swept``. Expansion happens when the
file is parsed, so everything downstream (plan, run.json, reports) sees plain arms.

Arms that differ only in request-level values (``workload.max_tokens``, ``fixed_length``, ``thinking``)
describe the same server: :func:`server_key` says so, :func:`order_for_sharing` puts them next to each
other in every pass, and :class:`SharedEngine` keeps that one engine up across them. Everything else
(n_max, split, KV type, model) changes the launch and relaunches.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import PurePath
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from .adapter import EngineAdapter, launch_fingerprint, method_key
from .config import Arm, BakeoffFile, RequestOverrides, Workload, _yaml_line
from .errors import ConfigError

__all__ = ["expand_sweeps", "sweep_keys_of", "arm_name_for", "effective_workload", "server_key",
           "order_for_sharing", "SharedEngine", "REQUEST_LEVEL",
           "refuse_ineffective_arms"]

# Arm keys a sweep may not touch: they are the sweep's own bookkeeping.
_NOT_SWEEPABLE = {"name", "sweep", "swept"}
# Arm sections whose inner keys are free-form (validated by the engine adapter or passed through).
_FREE_FORM = {"options", "env"}
REQUEST_LEVEL = tuple(f"workload.{k}" for k in RequestOverrides.model_fields)

T = TypeVar("T")


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
    line = _yaml_line(root, loc) if root is not None else None
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
    renamed: dict[str, str] = {}
    for index, arm in enumerate(config.arms):
        own = _validated_sweep(arm.sweep, ("arms", index), source, root)
        matrix = {**own, **{k: v for k, v in top.items() if k not in own}}
        if not matrix:
            arms.append(arm.model_dump(exclude_unset=True, exclude={"sweep"}))
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
    data = config.model_dump(exclude_unset=True, exclude={"sweep", "arms"})
    data["arms"] = arms
    if config.baseline in renamed:
        data["baseline"] = renamed[config.baseline]
    try:
        return BakeoffFile.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(e["msg"] for e in exc.errors())
        raise ConfigError(f"{source}: after sweep expansion: {problems}") from None


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


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): data}


def _differences(a: Arm, b: Arm) -> dict[str, tuple[Any, Any]]:
    """Dotted keys whose values differ between two arms (name and sweep bookkeeping aside)."""
    skip = {"name", "sweep", "swept"}
    fa, fb = _flat(a.model_dump(mode="json", exclude=skip)), _flat(b.model_dump(mode="json", exclude=skip))
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
        fingerprint = launch_fingerprint(adapter, arm, effective_workload(workload, arm))
        first = seen.setdefault(fingerprint, arm)
        differ = _differences(first, arm) if first is not arm else {}
        if differ:
            keys = ", ".join(f"{k} ({v[0]!r} vs {v[1]!r})" for k, v in differ.items())
            where = method_key(adapter.capabilities, arm.speculative) or arm.speculative.method
            raise ConfigError(
                f"{', '.join(differ)} has no effect on {adapter.name} {where.replace('/', '-')}: arms "
                f"{first.name!r} and {arm.name!r} differ in {keys} but would launch the same command and send "
                f"the same requests")


class SharedEngine:
    """Keeps one engine up across consecutive arms with the same server key.

    ``use(key, open_engine)`` yields ``(value, fresh)``: the context value of ``open_engine()`` and
    whether it was started for this arm (warm-up is owed only then). A different key, an engine that
    died, an exception inside the block, or :meth:`close` stops the held engine.
    """

    def __init__(self, alive: Callable[[Any], bool] | None = None) -> None:
        self._stack: ExitStack | None = None
        self._key: str | None = None
        self._value: Any = None
        self._alive = alive or _engine_alive

    @contextmanager
    def use(self, key: str, open_engine: Callable[[], AbstractContextManager[T]]) -> Iterator[tuple[T, bool]]:
        fresh = self._stack is None or self._key != key or not self._alive(self._value)
        if fresh:
            self.close()
            stack = ExitStack()
            try:
                value = stack.enter_context(open_engine())
            except BaseException:
                stack.close()
                raise
            self._stack, self._key, self._value = stack, key, value
        try:
            yield self._value, fresh
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        stack, self._stack, self._key, self._value = self._stack, None, None, None
        if stack is not None:
            stack.close()


def _engine_alive(value: Any) -> bool:
    """``(base_url, Engine | None)`` from the protocol: attached servers count as alive."""
    engine = value[1] if isinstance(value, tuple) and len(value) > 1 else None
    return engine is None or bool(getattr(engine, "alive", True))
