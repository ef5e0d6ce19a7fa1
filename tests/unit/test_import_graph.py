"""The layers of ``bakeoff.core``, read from the source: no import circle, no import up a layer.

Every import statement of every module is read with ``ast`` (those inside functions and under
``TYPE_CHECKING`` too: a late import is still a dependency), so a layer cannot be broken quietly by
moving an import into a function. docs/architecture.md describes the same layers in words.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import bakeoff.core

CORE = Path(bakeoff.core.__file__).parent
PACKAGE = "bakeoff.core"

LAYER_LINE = re.compile(r"^Layer (\d+), (\w+):")
FACE = "face"  # bakeoff.core itself and any module directly in core/: above every layer folder


def _layers() -> dict[str, tuple[int, str]]:
    """Each folder of core/ -> (its number, its name), read from the first line of its ``__init__`` docstring.

    The folders are the layers: a folder declares where it stands ("Layer 3, config: ..."), so moving a module
    into another folder moves it to another layer, and no table elsewhere has to be kept in step.
    """
    found = {}
    for init in sorted(CORE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        match = LAYER_LINE.match(doc)
        assert match, f"{init}: the docstring must open with 'Layer N, name:' (the folder's place in the layers)"
        assert match.group(2) == init.parent.name, f"{init}: the layer is named {match.group(2)!r}, not its folder"
        found[init.parent.name] = (int(match.group(1)), match.group(2))
    return found


def _modules() -> dict[str, Path]:
    """Dotted name relative to bakeoff.core ("" for the package itself) -> file."""
    out = {}
    for path in sorted(CORE.rglob("*.py")):
        parts = list(path.relative_to(CORE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom reads from."""
    if not node.level:
        return node.module or ""
    base = f"{PACKAGE}.{module}".rstrip(".").split(".")
    if not is_package:
        base = base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, path: Path) -> Iterator[str]:
    """Every absolute module name this module imports (``from x import y`` yields x.y when y is a module)."""
    known = _modules()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, path.name == "__init__.py", node)
            sub = [f"{source}.{a.name}" for a in node.names
                   if f"{source}.{a.name}".removeprefix(f"{PACKAGE}.") in known]
            if len(sub) < len(node.names) or not sub:  # some names come from ``source`` itself
                yield source
            yield from sub


def _core_graph() -> dict[str, set[str]]:
    """bakeoff.core module -> the bakeoff.core modules it imports (relative names, "" = the package)."""
    known = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        deps = set()
        for target in _imports(module, path):
            if target == PACKAGE:
                deps.add("")
            elif target.startswith(f"{PACKAGE}."):
                name = target.removeprefix(f"{PACKAGE}.")
                while name and name not in known:  # bakeoff.core.engine.contract.Capabilities -> contract
                    name = name.rpartition(".")[0]
                deps.add(name)
        deps.discard(module)
        graph[module] = deps
    return graph


def _folder(module: str) -> str | None:
    """The layer folder a module lives in (a folder's own ``__init__`` included), None for the face."""
    head = module.split(".")[0]
    return head if head and (CORE / head).is_dir() else None


def _layer_of(module: str) -> int:
    """The layer number of a module: its folder's, or above them all for the face (core/ itself)."""
    folder = _folder(module)
    return _layers()[folder][0] if folder else max(number for number, _ in _layers().values()) + 1


def _layer_name(module: str) -> str:
    folder = _folder(module)
    return _layers()[folder][1] if folder else FACE


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _shown(module: str) -> str:
    return f"{PACKAGE}.{module}".rstrip(".")


def test_layers_are_folders_numbered_once_and_the_face_is_small() -> None:
    numbers = sorted(number for number, _ in _layers().values())
    assert numbers == list(range(1, len(numbers) + 1)), f"layer numbers must be 1..N, each once: {_layers()}"
    face = sorted(m for m in _modules() if _layer_name(m) == FACE)
    assert face == ["", "api"] or face == [""], f"only the package face may sit directly in core/: {face}"


def test_core_modules_import_each_other_without_a_circle() -> None:
    cycles = [[_shown(m) for m in c] for c in _cycles(_core_graph())]
    assert not cycles, f"import circles in bakeoff.core: {cycles}"


def test_no_core_module_imports_a_layer_above_its_own() -> None:
    upward = []
    for module, deps in _core_graph().items():
        for dep in deps:
            if _layer_of(dep) > _layer_of(module):
                upward.append(f"{_shown(module)} ({_layer_name(module)}) imports {_shown(dep)} ({_layer_name(dep)})")
    assert not upward, "imports that run up a layer:\n" + "\n".join(sorted(upward))


# Core modules that still import an engine module, each with why; the list may only shrink.
KNOWN_ENGINE_IMPORTS = {
    "config.calibration": "issue 15: calibration arms are built from engines/llamacpp/synth.py's model synthesizer; "
                 "belongs behind an adapter hook",
}


def test_core_never_imports_an_engine_or_a_plugin() -> None:
    found = {module: target for module, path in _modules().items() for target in _imports(module, path)
             if target.startswith(("bakeoff.engines", "bakeoff_")) or target == "bakeoff"}
    new = {_shown(m): t for m, t in found.items() if m not in KNOWN_ENGINE_IMPORTS}
    assert not new, f"core imports an engine or plugin module: {new}"
    assert set(found) == set(KNOWN_ENGINE_IMPORTS), "a known engine import is gone: drop it from KNOWN_ENGINE_IMPORTS"


def test_the_graph_reader_sees_late_and_relative_imports() -> None:
    """The reader itself: function-level imports and ``from . import x`` are edges (else the tests prove nothing)."""
    graph = _core_graph()
    assert "measure.definitions" in graph["run.arm"] and "measure.points" in graph["run.protocol"]
    assert "engine.compose" in graph["run.live"]  # imported inside a function
    assert "cli.lazy" in graph["cli"] and "config.schema" in graph[""]  # a package's own modules, and its __init__


CLI_HELPERS = {"cli", "cli.boundary", "cli.console", "cli.exit_codes", "cli.running", "cli.progress",  # shared
               "cli.commands", "cli.lazy", "cli.full_app", "cli.root"}  # the command line itself, not a command


def test_a_command_imports_no_other_command_and_no_run_loop() -> None:
    """The CLI is a shell: one module per command over the library (core/run/bakeoff.py, core/api.py); a
    command that imported another, or drove a run loop itself, would be orchestration in the CLI again."""
    graph = _core_graph()
    commands = [m for m in graph if m.startswith("cli.") and m not in CLI_HELPERS]
    assert "cli.run" in commands
    crossing = {m: sorted(d for d in graph[m] if d in commands) for m in commands}
    assert not any(crossing.values()), f"commands importing commands: {crossing}"
    loops = {"run.protocol", "run.phases", "run.arm", "run.block", "run.ray_executor"}
    driving = {m: sorted(graph[m] & loops) for m in [*commands, *CLI_HELPERS] if graph[m] & loops}
    assert not driving, f"the CLI drives a run loop itself: {driving}"
