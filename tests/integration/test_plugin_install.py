"""A new engine through the entry point, from a real install: bakeoff and three plugin packages are pip-installed
into a fresh venv, and that venv's own ``bakeoff engines`` must list ``sglang`` and ``ikllama`` as available and
the broken plugin as unavailable with its import error, while the built-in engines stay available.

Speed: the venv is made without pip, the packages are installed by this interpreter's pip (``--python``)
with ``--no-deps``, and the dependencies come from this interpreter's site-packages through a ``.pth``
file. Their build backend (setuptools) comes from PyPI or pip's cache, as in any install. The test then
checks that ``bakeoff`` and ``bakeoff_sglang`` are imported from the new venv, not from here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def plugin_source(name: str, tmp: Path, under: Path = ROOT / "plugins") -> str:
    """A copy of a plugin's source: pip builds in the tree it is given, and the repository stays clean."""
    target = tmp / name
    shutil.copytree(under / name, target, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    return str(target)


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(COLUMNS="400", NO_COLOR="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False)


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("plugin-venv") / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    python = target / "bin" / "python"
    purelib = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    # dependencies (pydantic, stevedore, ...) from this interpreter; bakeoff itself is installed fresh below
    deps = [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]
    Path(purelib, "_bakeoff_test_deps.pth").write_text("\n".join(deps) + "\n")
    done = run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                str(ROOT), plugin_source("bakeoff-sglang", target.parent),
                plugin_source("bakeoff-ikllama", target.parent)])
    assert done.returncode == 0, done.stderr[-3000:]
    return target


def engines_rows(venv_dir: Path) -> dict[str, str]:
    """``bakeoff engines`` of that venv, as engine name -> the row's text (each cell's wrapped lines joined, then
    the cells)."""
    done = run([str(venv_dir / "bin" / "bakeoff"), "engines"])
    assert done.returncode == 0, done.stderr[-3000:]
    rows: dict[str, list[str]] = {}
    current = None
    for line in done.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) < 2 or set(line.strip()) <= set("┏┳┓┡╇┩└┴┘━─ "):
            continue
        if cells[0] and cells[0] != "engine":
            current = cells[0]
            rows[current] = [""] * (len(cells) - 1)
        if current:
            rows[current] = [f"{a} {b}".strip() for a, b in zip(rows[current], cells[1:], strict=True)]
    return {name: " ".join(c for c in cells if c) for name, cells in rows.items()}


def imported_from(venv_dir: Path, module: str) -> str:
    done = run([str(venv_dir / "bin" / "python"), "-c", f"import {module} as m; print(list(m.__path__)[0])"])
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_installed_plugin_is_listed_as_available(fresh_venv: Path) -> None:
    assert imported_from(fresh_venv, "bakeoff_sglang").startswith(str(fresh_venv))
    assert imported_from(fresh_venv, "bakeoff.core").startswith(str(fresh_venv))
    rows = engines_rows(fresh_venv)
    assert rows["sglang"].startswith("available"), rows
    assert "bakeoff-sglang" in rows["sglang"], "the 'from' column names the plugin's distribution"
    assert rows["llamacpp"].startswith("available")


def test_installed_ikllama_plugin_is_listed_as_available(fresh_venv: Path) -> None:
    assert imported_from(fresh_venv, "bakeoff_ikllama").startswith(str(fresh_venv))
    rows = engines_rows(fresh_venv)
    assert rows["ikllama"].startswith("available"), rows
    assert "bakeoff-ikllama" in rows["ikllama"], "the 'from' column names the plugin's distribution"
    assert "ngram" in rows["ikllama"] and "draft" in rows["ikllama"]


def test_broken_plugin_is_unavailable_with_its_error_and_builtins_still_work(fresh_venv: Path) -> None:
    broken = plugin_source("bakeoff-broken", fresh_venv.parent, ROOT / "tests" / "fixtures" / "plugins")
    done = run([sys.executable, "-m", "pip", "--python", str(fresh_venv / "bin" / "python"), "install", "--quiet",
                "--no-deps", broken])
    assert done.returncode == 0, done.stderr[-3000:]
    rows = engines_rows(fresh_venv)
    assert rows["broken"].startswith("unavailable"), rows
    assert re.search(r"ModuleNotFoundError: No module named\s+'bakeoff_broken_missing_dependency'", rows["broken"])
    assert rows["llamacpp"].startswith("available") and rows["sglang"].startswith("available")
    # a built-in still loads and builds a launch spec in that venv
    code = ("from bakeoff.core.engine.registry import load_engine; from bakeoff.core import Arm, build_launch; "
            "a = load_engine('llamacpp'); "
            "print(build_launch(a, Arm(name='x', engine='llamacpp', model='/dev/null', "
            "options={'binary': '/opt/llama-server'}), 8080, __import__('pathlib').Path('.')).argv[0])")
    done = run([str(fresh_venv / "bin" / "python"), "-c", code])
    assert done.returncode == 0 and done.stdout.strip() == "/opt/llama-server", done.stderr
