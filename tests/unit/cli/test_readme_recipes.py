"""README recipes that run (issue 42 item 1, USER-3 #2): every command block of README.md either says in its first
line what it needs and how to get it, or runs on a fresh clone after the install step; the Python and pandas
blocks are executed here as written, on sim runs in place of the runs they name (the only edit: the file or
run directory). Output blocks are fenced as ``text``; the YAML blocks pass `bakeoff check`
(tests/unit/cli/test_check_command.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"^```(\w*)\n(.*?)^```", README, re.DOTALL | re.MULTILINE)
DECLARED = re.compile(r"^# (needs|the install step: needs) .*(install|PyPI|bakeoff |\.yaml)")
SIM = """\
name: readme
arms:
  - {name: spec-off, engine: sim, model: sim, options: {itl_ms: 2}}
  - {name: ngram, engine: sim, model: sim, speculative: {method: ngram}, options: {itl_ms: 1}}
workload: {prompts: [code_python, prose], max_tokens: 8, reps: 3, warmup: 0, gates: []}
"""
OPEN_LOOP = """\
name: readme-load
arms:
  - {name: spec-off, engine: sim, model: sim, options: {itl_ms: 2}}
  - {name: fast, engine: sim, model: sim, options: {itl_ms: 1}}
workload:
  prompts: [prose]
  max_tokens: 8
  warmup: 0
  gates: []
  arrival: {rates: [4], distribution: constant, requests: 6, max_in_flight: 2}
  slo: {interactive: {ttft_s: 1.0, tpot_s: 0.1}}
"""


def _bakeoff(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "BAKEOFF_WIDTH")}
    return subprocess.run([sys.executable, "-m", "bakeoff", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**env, "NO_COLOR": "1", "BAKEOFF_RUNNING_DIR": str(cwd / "running")})


def _python(cwd: Path, code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "BAKEOFF_RUNNING_DIR": str(cwd / "running")})
    assert done.returncode == 0, (code, done.stdout[-2000:], done.stderr[-2000:])
    return done.stdout


def _exported_run(cwd: Path, text: str) -> Path:
    (cwd / "f.yaml").write_text(text)
    done = _bakeoff(cwd, "run", "f.yaml", "--out", "runs")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [run] = (cwd / "runs").iterdir()
    done = _bakeoff(cwd, "export", str(run.relative_to(cwd)))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return run.relative_to(cwd)


def _with_run(block: str, run: Path) -> str:
    """The block with its `run = "..."` line naming ``run`` (the one edit)."""
    edited, n = re.subn(r'^run = "[^"]+"', f'run = "{run}"', block, flags=re.MULTILINE)
    assert n == 1, block
    return edited


def _python_blocks(needle: str) -> list[str]:
    found = [body for lang, body in BLOCKS if lang == "python" and needle in body]
    assert len(found) == 1, (needle, found)
    return found


def test_every_command_block_runs_or_says_first_what_it_needs() -> None:
    commands = [(lang, body) for lang, body in BLOCKS if lang not in ("text", "yaml")]
    assert len(commands) >= 6
    for lang, body in commands:
        first = body.splitlines()[0]
        assert DECLARED.match(first), f"a {lang or 'shell'} block not saying first what it needs: {first!r}"
    # what it needs is not what the install step gives: pandas is the analysis extra, named in Install
    assert "pip install -e '.[analysis]'" in README.split("## The demo")[0]
    assert all("head-to-head-cpu.yaml" not in body for _, body in BLOCKS)  # vLLM: not what the README installs


def test_the_python_block_runs_as_written(tmp_path: Path) -> None:
    [block] = _python_blocks("bakeoff.run(")
    (tmp_path / "sim.yaml").write_text(SIM)
    named = re.findall(r'bakeoff\.run\("([^"]+)"', block)
    assert named and (ROOT / named[0]).is_file()  # the file it names exists, and needs only llama.cpp
    assert {a["engine"] for a in yaml.safe_load((ROOT / named[0]).read_text())["arms"]} == {"llamacpp"}
    said = _python(tmp_path, block.replace(named[0], "sim.yaml") + "\nprint('read', len(same.arms))\n")
    assert re.search(r"^ngram \d+\.\d\dx \(\d+\.\d\d-\d+\.\d\d\) (faster|slower|equivalent|not separable|too few "
                     r"pairs)$", said, re.MULTILINE), said
    assert "read 2" in said


def test_the_pandas_blocks_run_on_an_exported_run(tmp_path: Path) -> None:
    pytest.importorskip("pandas")
    [samples] = _python_blocks("samples.csv")
    said = _python(tmp_path, _with_run(samples, _exported_run(tmp_path, SIM)))
    assert "spec-off" in said and "ngram" in said and "50%" in said, said
    [points] = _python_blocks("points.csv")
    load = tmp_path / "load"
    load.mkdir()
    said = _python(load, _with_run(points, _exported_run(load, OPEN_LOOP)))
    assert "per_user_tps" in said and "goodput.interactive" in said and "fast" in said, said


def test_every_install_hint_names_a_declared_extra_from_the_checkout() -> None:
    """USER-3 #2 and #8: the docs said `.[parquet]` where Install names `analysis`, and hints said
    `pip install 'bakeoff[parquet]'` or `pip install bakeoff`, which ask a package index that has no bakeoff.
    Every hint in the docs and the code installs from the checkout, naming an extra pyproject declares."""
    import tomllib

    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    texts = {p: p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md"),
                                        *(ROOT / "core").rglob("*.py"), *(ROOT / "engines").rglob("*.py")]}
    from_index = re.compile(r"pip install\s+['\"]?bakeoff(?![\w-])")
    named = re.compile(r"pip install (?:-e )?['\"]?\.\\?\[([\w,]+)\]")
    seen = set()
    for path, text in texts.items():
        assert not from_index.search(text), f"{path.relative_to(ROOT)}: {from_index.search(text)}"
        for group in named.findall(text):
            seen |= set(group.split(","))
    assert seen and seen <= extras, seen - extras
    assert "'.[parquet]'" not in (ROOT / "docs" / "guide.md").read_text()  # the analysis extra, as Install says
