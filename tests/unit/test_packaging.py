"""An editable install and a built wheel expose the same import names (bakeoff.core, bakeoff.engines)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = ("import bakeoff.core, bakeoff.engines, bakeoff.engines.llamacpp, bakeoff.core.cli;"
         "import importlib.metadata as m;"
         "print(bakeoff.core.__file__); print(sorted({e.name for e in m.entry_points(group='bakeoff.engines')}))")


def test_wheel_and_editable_import_the_same_names(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                    "-w", str(tmp_path / "dist"), str(ROOT)], check=True)
    wheel = next((tmp_path / "dist").glob("bakeoff-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "bakeoff/core/config/schema.py" in names and "bakeoff/engines/llamacpp/adapter.py" in names
    assert "bakeoff/engines/demo.yaml" in names and "bakeoff/__main__.py" in names
    entry_points = zipfile.ZipFile(wheel).read("bakeoff-0.1.0.dist-info/entry_points.txt").decode()
    assert "[bakeoff.engines]" in entry_points and "llamacpp = bakeoff.engines.llamacpp:LlamaCppAdapter" in entry_points
    assert not any(n.startswith(("core/", "engines/", "tests/")) for n in names)

    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True)
    probe = f"import sys; sys.path.insert(0, {str(target)!r}); {PROBE}"
    from_wheel = subprocess.run([sys.executable, "-I", "-c", probe],
                                capture_output=True, text=True, check=True).stdout.splitlines()
    editable = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True,
                              cwd=tmp_path).stdout.splitlines()
    assert from_wheel[0].startswith(str(target))  # really imported from the wheel
    assert editable[0].startswith(str(ROOT / "core"))  # really the editable checkout
    assert "llamacpp" in from_wheel[1] and from_wheel[1] == editable[1]


def test_python_dash_m_bakeoff_runs_the_cli(tmp_path: Path) -> None:
    """``python -m bakeoff`` works like the ``bakeoff`` script, from any directory (issue 12 item 10)."""
    done = subprocess.run([sys.executable, "-m", "bakeoff", "run", "--help"], capture_output=True, text=True,
                          cwd=tmp_path, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "Usage: python -m bakeoff run" in done.stdout and "Exit codes" in done.stdout


def test_the_lazy_public_names_match_their_typed_imports() -> None:
    """bakeoff.core imports its public names on first use (so `bakeoff --help` stays light); the table it
    imports from and the imports type checkers read must name the same things, and every name must resolve."""
    import ast

    import bakeoff.core

    tree = ast.parse(Path(bakeoff.core.__file__).read_text())
    typed = {alias.name: node.module for block in tree.body if isinstance(block, ast.If)
             for node in block.body if isinstance(node, ast.ImportFrom) and node.module
             for alias in node.names}
    assert typed == bakeoff.core._EXPORTS
    for name in bakeoff.core.__all__:
        assert getattr(bakeoff.core, name) is not None, name
