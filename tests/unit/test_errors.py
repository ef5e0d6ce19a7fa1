"""Every error bakeoff raises on purpose is in core/errors.py, under BakeoffError, and drawn in its tree."""

from __future__ import annotations

import importlib
import pkgutil
import re
from types import ModuleType

import bakeoff.core
import bakeoff.engines
from bakeoff.core import errors
from bakeoff.core.errors import BakeoffError


def _modules() -> list[ModuleType]:
    out = []
    for package in (bakeoff.core, bakeoff.engines):
        out.append(package)
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            out.append(importlib.import_module(info.name))
    return out


def _drawing() -> dict[str, str]:
    """Child -> parent, read from the tree in the module docstring (four columns per level)."""
    parents: dict[str, str] = {}
    stack: list[str] = []
    for line in (errors.__doc__ or "").splitlines():
        m = re.match(r"^ {4}((?:[│ ] {3})*)(?:[├└]── )?([A-Z]\w+)\b", line)
        if not m:
            continue
        depth = len(m.group(1)) // 4 + (1 if "──" in line else 0)
        del stack[depth:]
        if stack:
            parents[m.group(2)] = stack[-1]
        stack.append(m.group(2))
    return parents


def test_no_module_defines_its_own_exception_class() -> None:
    """main: StoreError and DuplicateSampleError in db.py, RunDirError in store.py, UnknownEngineError in
    registry.py, PromoteError, NewerSchemaError, RunRecordError ... each beside its raiser."""
    elsewhere = sorted(f"{m.__name__}.{name}" for m in _modules() if m is not errors
                       for name, obj in vars(m).items()
                       if isinstance(obj, type) and issubclass(obj, BaseException) and obj.__module__ == m.__name__)
    assert elsewhere == []


def test_every_error_is_exported_under_bakeoff_error_and_drawn_where_it_sits() -> None:
    drawn = _drawing()
    classes = {name: getattr(errors, name) for name in errors.__all__}
    assert set(drawn) | {"BakeoffError"} == set(classes)
    for name, cls in classes.items():
        assert issubclass(cls, BakeoffError)
        if name != "BakeoffError":
            assert drawn[name] in [base.__name__ for base in cls.__bases__], name
