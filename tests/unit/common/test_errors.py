"""Every error bakeoff raises on purpose is in core/common/errors.py, under BakeoffError, and drawn in its tree."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import bakeoff.core
import bakeoff.engines
from bakeoff.core.common import errors
from bakeoff.core.common.errors import BakeoffError

_EXCEPTION_NAME = re.compile(r"(Error|Exception)$")


def _exception_classes(path: Path) -> list[str]:
    """Classes in ``path`` that are exceptions by name or by base (read, not imported: some modules need extras)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ClassDef):
            bases = [b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else ""
                     for b in node.bases]
            if _EXCEPTION_NAME.search(node.name) or any(_EXCEPTION_NAME.search(b) for b in bases):
                out.append(node.name)
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
    roots = [Path(p) for package in (bakeoff.core, bakeoff.engines) for p in package.__path__]
    files = [f for root in roots for f in sorted(root.rglob("*.py"))]
    assert any(f.name == "registry.py" for f in files)  # the walk sees the package
    elsewhere = [f"{f.name}: {name}" for f in files if f != Path(errors.__file__) for name in _exception_classes(f)]
    assert elsewhere == []


def test_every_error_is_exported_under_bakeoff_error_and_drawn_where_it_sits() -> None:
    drawn = _drawing()
    classes = {name: getattr(errors, name) for name in errors.__all__}
    assert set(drawn) | {"BakeoffError"} == set(classes)
    for name, cls in classes.items():
        assert issubclass(cls, BakeoffError)
        if name != "BakeoffError":
            assert drawn[name] in [base.__name__ for base in cls.__bases__], name
