"""The built-in engines are built on ``bakeoff.core``'s public names only, as the plugins are.

So a third-party adapter can do everything a built-in does: every name a module under engines/ takes from
bakeoff is exported by ``bakeoff.core`` (``__all__``); within its own package an engine imports relatively.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import bakeoff.core
import bakeoff.engines

ENGINES = Path(bakeoff.engines.__file__).parent
MODULES = sorted(ENGINES.rglob("*.py"))


def test_every_engine_module_is_checked() -> None:
    assert {p.parent.name for p in MODULES} >= {"llamacpp", "vllm", "exllama", "sim", "openai"}


@pytest.mark.parametrize("module", MODULES, ids=lambda p: str(p.relative_to(ENGINES)))
def test_engine_imports_only_bakeoff_core_public_names(module: Path) -> None:
    for node in ast.walk(ast.parse(module.read_text())):  # late imports inside functions too
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("bakeoff"):
            assert node.module == "bakeoff.core", f"{module.name} imports {node.module}"
            private = {a.name for a in node.names} - set(bakeoff.core.__all__)
            assert not private, f"{module.name} imports {private} from bakeoff.core, which does not export them"
        if isinstance(node, ast.ImportFrom) and node.level > 1:
            raise AssertionError(f"{module.name} imports from outside its engine's package ({'.' * node.level}"
                                 f"{node.module or ''})")
        if isinstance(node, ast.Import):
            assert not any(a.name.startswith("bakeoff") for a in node.names), module.name
