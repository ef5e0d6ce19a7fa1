"""Every screen fits: the default output of demo, run, report, report --tables, check, runs, engines and merge,
piped at 80 columns, has no line wider than 80 characters and none ending in spaces; a table too wide for that
prints as records (one block per row), never with words broken letter by letter. Real sim runs, the real command
line (issue 42's done-when: one test, the eight commands)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from bakeoff.core.reports.layout import print_rows

BAKEOFF = [sys.executable, "-m", "bakeoff"]
FILE = """\
arms:
  - {name: spec-off, engine: sim, model: sim, options: {itl_ms: 2}}
  - {name: ngram-lookup-on-code, engine: sim, model: sim, speculative: {method: ngram}, options: {itl_ms: 1}}
workload: {prompts: [code_python, prose], max_tokens: 12, reps: 1, warmup: 0, passes: 3}
"""


def _bakeoff(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "BAKEOFF_WIDTH")}
    return subprocess.run([*BAKEOFF, *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**base, "NO_COLOR": "1", **env})


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[Path]]:
    cwd = tmp_path_factory.mktemp("width")
    (cwd / "f.yaml").write_text(FILE)
    outputs = []
    for _ in range(2):  # two runs: `runs` lists both, `merge` takes their bundles
        done = _bakeoff(["run", "f.yaml", "--out", "runs"], cwd, COLUMNS="80")
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        outputs.append(done.stdout)
    # relative, as a user types them: a path on a line of its own is as long as the user made it
    return cwd, outputs[0], sorted(d.relative_to(cwd) for d in (cwd / "runs").iterdir() if d.is_dir())


def _too_wide(text: str, width: int = 80) -> list[str]:
    return [f"{len(line)}: {line!r}" for line in text.splitlines() if len(line) > width or line != line.rstrip()]


def test_every_commands_default_output_fits_80_columns(runs: tuple[Path, str, list[Path]]) -> None:
    cwd, run_output, dirs = runs
    outputs = {"run": run_output}
    for name, args in (("report", ["report", str(dirs[0])]), ("report --tables", ["report", str(dirs[0]), "--tables"]),
                       ("check", ["check", "f.yaml"]), ("runs", ["runs", "runs"]), ("engines", ["engines"])):
        done = _bakeoff(args, cwd, COLUMNS="80")
        assert done.returncode == 0, (name, done.stdout[-2000:], done.stderr[-2000:])
        outputs[name] = done.stdout
    for i, d in enumerate(dirs):
        assert _bakeoff(["bundle", str(d), "--out", f"b{i}.tar.gz"], cwd).returncode == 0
    done = _bakeoff(["merge", "b0.tar.gz", "b1.tar.gz", "--out", "merged"], cwd, COLUMNS="80")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    outputs["merge"] = done.stdout
    done = _demo(cwd)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    outputs["demo"] = done.stdout
    assert set(outputs) == {"demo", "run", "report", "report --tables", "check", "merge", "engines", "runs"}
    for name, text in outputs.items():
        assert text.strip() and not _too_wide(text), (name, _too_wide(text))
    # whole run ids, the suggested command on its own line, merge leading with its bundles and verdict block
    assert all(d.name in outputs["runs"] for d in dirs)
    assert f"bakeoff report {dirs[0]} --tables" in run_output.splitlines()
    assert outputs["merge"].startswith("merged bundles (2)") and "each arm against" in outputs["merge"]
    assert "token accounting" not in outputs["merge"]  # every table is `merge --tables`, or the report's files
    assert "demo-llamacpp-cpu: each arm against spec-off" in outputs["demo"], outputs["demo"][-2000:]
    [demo_run] = (cwd / "demo-runs").iterdir()
    assert f"bakeoff report demo-runs/{demo_run.name} --tables" in outputs["demo"].splitlines()


def test_piped_output_is_80_wide_unless_columns_or_bakeoff_width_say_otherwise(
        runs: tuple[Path, str, list[Path]]) -> None:
    cwd, _, dirs = runs
    widths = {}
    for key, env in (("default", {}), ("COLUMNS", {"COLUMNS": "160"}),
                     ("BAKEOFF_WIDTH", {"COLUMNS": "80", "BAKEOFF_WIDTH": "160"})):
        done = _bakeoff(["report", str(dirs[0]), "--tables"], cwd, **env)
        assert done.returncode == 0, done.stderr[-2000:]
        widths[key] = max(len(line) for line in done.stdout.splitlines())
    assert widths["default"] <= 80 < widths["COLUMNS"] <= 160 and widths["BAKEOFF_WIDTH"] == widths["COLUMNS"]


def test_a_table_that_cannot_fit_prints_as_records_and_one_that_can_keeps_its_words() -> None:
    header = ["arm", "decode tok/s", "vs baseline", "Acceptance", "tok/J vs baseline", "equal work vs baseline"]
    row = ["ngram-lookup", "316.5 (312.9–318.1)", "1.63× (1.61–1.66) faster", "46.9% (180/384)", "1.20× (1.10–1.30)",
           "1.00× (0.99–1.01) equivalent"]
    out = Console(width=80, record=True, color_system=None)
    print_rows(out, "wide", header, [row, row])
    text = out.export_text()  # (a recording console pads; the command's console strips: the test above)
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
    assert len(re.findall(r"^arm +ngram-lookup *$", text, re.M)) == 2  # a record per row, a label per value
    assert len(re.findall(r"^  vs baseline +1\.63× \(1\.61–1\.66\) faster *$", text, re.M)) == 2
    narrow = Console(width=80, record=True, color_system=None)
    print_rows(narrow, "fits", header[:4], [row[:4]])
    words = {w for cell in [*header[:4], *row[:4]] for w in cell.split()}
    table = narrow.export_text()
    assert "┃" in table or "│" in table  # still a table
    cells = {w for line in table.splitlines() for w in line.replace("│", " ").replace("┃", " ").split()}
    assert words <= cells, words - cells  # every word whole on one line (rich's own squeeze breaks them)


def _sim_demo() -> str:
    """The demo's own file (bakeoff.engines/demo.yaml: its prompts, reps, passes and warm-up) on the sim engine."""
    from importlib.resources import files

    import yaml

    demo = yaml.safe_load(files("bakeoff.engines").joinpath("demo.yaml").read_text())
    for arm, itl in zip(demo["arms"], (2, 1), strict=True):
        arm.update(engine="sim", model="sim", options={"itl_ms": itl})
        arm.pop("settings", None)
        if "speculative" in arm:
            arm["speculative"] = {"method": "ngram"}
    demo["workload"]["max_tokens"] = 16
    return yaml.safe_dump(demo, sort_keys=False)


def _demo(cwd: Path) -> subprocess.CompletedProcess[str]:
    """`bakeoff demo` through the real command line, its file on the sim engine (the llama.cpp build and the
    model are what it cannot have here), into ``cwd/demo-runs``."""
    (cwd / "demo.yaml").write_text(_sim_demo())
    probe = ("import sys\nfrom pathlib import Path\nimport bakeoff.core.cli.demo as demo\n"
             "class Files:\n    def joinpath(self, name):\n        return Path('demo.yaml')\n"
             "demo.files = lambda package: Files()\n"
             "from bakeoff.core.cli import main\nsys.argv[0] = 'bakeoff'\nmain()\n")
    base = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "BAKEOFF_WIDTH")}
    return subprocess.run([sys.executable, "-c", probe, "demo", "--out", "demo-runs"], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env={**base, "NO_COLOR": "1", "COLUMNS": "80"})
