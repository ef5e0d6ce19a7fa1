"""The Python API: ``bakeoff.run`` runs a file and returns the typed summary; ``bakeoff.read_run`` reads one back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from interrupts import ctrl_c_at_rep

import bakeoff
from bakeoff.core.common.errors import ConfigError
from bakeoff.core.config.loader import parse_bakeoff
from bakeoff.core.results.store import RunDir

FILE = """name: api
arms:
  - {name: base, engine: sim, model: sim, options: {itl_ms: 2}}
  - {name: fast, engine: sim, model: sim, options: {itl_ms: 1}}
workload: {prompts: [prose, code_bash], max_tokens: 16, reps: 2, warmup: 0, gates: []}
baseline: base
"""


def test_run_a_file_and_read_its_directory_back(tmp_path: Path) -> None:
    path = tmp_path / "api.yaml"
    path.write_text(FILE)
    summary = bakeoff.run(path, out=tmp_path / "runs")
    assert summary.path is not None and summary.path.parent == tmp_path / "runs"
    assert [a.arm for a in summary.arms] == ["base", "fast"] and all(a.n == 4 for a in summary.arms)
    [fast] = summary.comparisons
    assert fast.arm == "fast" and fast.reference == "base" and fast.ratio.estimate > 1
    assert (summary.path / "report" / "summary.json").is_file()  # the same report files as `bakeoff run`
    again = bakeoff.read_run(summary.path)
    assert again.model_dump() == summary.model_dump()


def test_run_takes_a_loaded_file_too(tmp_path: Path) -> None:
    summary = bakeoff.run(parse_bakeoff(FILE), out=tmp_path, reports=False)
    assert summary.name == "api" and summary.path is not None and not (summary.path / "report").exists()


# -- USER-3 finding 3: a wrong path is an error, never an empty summary a script loops over ---------------------
def test_read_run_refuses_a_path_that_holds_no_run(tmp_path: Path) -> None:
    for path in (tmp_path / "no" / "such" / "run", tmp_path):  # a typo, and a directory that is no run
        with pytest.raises(ConfigError, match="is not a bakeoff run directory") as caught:
            bakeoff.read_run(path)
        assert str(path) in str(caught.value) and "run.json" in str(caught.value)


def test_read_run_refuses_a_regular_file_and_says_it_is_one(tmp_path: Path) -> None:
    path = tmp_path / "samples.jsonl"
    path.write_text("")
    with pytest.raises(ConfigError, match=r"samples.jsonl is not a bakeoff run directory: .* this is a file, not a "
                                          "directory"):
        bakeoff.read_run(path)


def test_read_run_still_reads_an_interrupted_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctrl_c_at_rep(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        bakeoff.run(parse_bakeoff(FILE), out=tmp_path, reports=False)
    [run] = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert RunDir.open(run).read_record().finished_at is None  # its record, but not finished
    summary = bakeoff.read_run(run)
    assert summary.name == "api" and 0 < sum(a.n for a in summary.arms) < 8


def test_importing_bakeoff_loads_nothing_of_the_run() -> None:
    code = "import sys, bakeoff; print(sorted(m for m in sys.modules if m.startswith('bakeoff.core')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(("kwargs", "flags", "message"), [
    ({"until_ci": -1.0}, ["--until-ci", "-1"], "--until-ci -1 (until_ci): the interval half-width to stop at is a "
                                                "fraction between 0 and 1"),
    ({"until_ci": float("nan")}, ["--until-ci", "nan"], "--until-ci nan (until_ci)"),
    ({"until_ci": 0.03, "max_passes": 0}, ["--until-ci", "3%", "--max-passes", "0"],
     "--max-passes 0 (max_passes): at least 1 pass"),
])
def test_the_api_refuses_the_stopping_rule_the_command_line_refuses_in_the_same_words(
        tmp_path: Path, kwargs: dict[str, float], flags: list[str], message: str) -> None:
    from typer.testing import CliRunner

    from bakeoff.core.cli import app

    path = tmp_path / "api.yaml"
    path.write_text(FILE)
    with pytest.raises(ConfigError) as caught:
        bakeoff.run(path, out=tmp_path / "runs", **kwargs)  # type: ignore[arg-type]
    assert str(caught.value).startswith(message)
    res = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "runs"), *flags])
    assert res.exit_code == 2 and " ".join(str(caught.value).split()) in " ".join(res.output.split()), res.output
    assert not (tmp_path / "runs").exists()  # nothing ran, either way
