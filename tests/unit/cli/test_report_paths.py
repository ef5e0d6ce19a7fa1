"""Paths a user meets after a run (USER-3 #12): `report` of a run committed to git (the README's evidence/ example)
writes its files to a temporary directory it names, never into the checkout; bundles and `merge` write home
directories as ~, so a shared run does not name whose account made it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bakeoff.core.cli import app
from bakeoff.core.reports.merge import _build_difference
from bakeoff.core.results.bundle import bundle_run, home_relative, verify_bundle

SIM = """\
name: paths
arms:
  - {name: base, engine: sim, model: sim, options: {itl_ms: 2}}
  - {name: fast, engine: sim, model: sim, options: {itl_ms: 1}}
workload: {prompts: [prose], reps: 1, max_tokens: 8, warmup: 0, gates: []}
"""


def _run(where: Path, text: str = SIM) -> Path:
    (where / "sim.yaml").write_text(text)
    result = CliRunner().invoke(app, ["run", str(where / "sim.yaml"), "--out", str(where / "runs")],
                                env={"COLUMNS": "200", "BAKEOFF_RUNNING_DIR": str(where / "running"),
                                     "HOME": str(where)})
    assert result.exit_code == 0, result.output
    [run] = (where / "runs").iterdir()
    return run


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_report_of_a_committed_run_writes_outside_the_checkout(tmp_path: Path) -> None:
    run = _run(tmp_path)
    shutil.rmtree(run / "report")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "runs"], check=True)
    subprocess.run([*git, "commit", "-qm", "evidence"], check=True)
    before = _files(run)
    result = CliRunner().invoke(app, ["report", str(run)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert _files(run) == before  # nothing written into the committed run
    assert "the run is committed to git, so its report files go to a new temporary directory" in result.output
    [html] = re.findall(r"report: (\S+report\.html)", result.output)
    try:
        assert Path(html).is_file() and not Path(html).is_relative_to(tmp_path)
    finally:
        shutil.rmtree(Path(html).parent)
    out = tmp_path / "chosen"
    result = CliRunner().invoke(app, ["report", str(run), "--out", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and (out / "report.html").is_file()
    assert "temporary directory" not in result.output  # --out is where the user said


def test_report_of_the_users_own_run_writes_beside_it(tmp_path: Path) -> None:
    run = _run(tmp_path)
    shutil.rmtree(run / "report")
    result = CliRunner().invoke(app, ["report", str(run)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert (run / "report" / "report.html").is_file() and "temporary" not in result.output


def test_a_bundle_names_no_home_directory(tmp_path: Path) -> None:
    home = tmp_path / "home" / "ada"
    home.mkdir(parents=True)
    (home / "m.gguf").write_bytes(b"")
    run = _run(home, SIM.replace("model: sim, options: {itl_ms: 1}", "model: ./m.gguf, options: {itl_ms: 1}"))
    assert str(home) in (run / "run.json").read_text()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        target, _, manifest = bundle_run(run, tmp_path / "b.tar.gz")
    verified = verify_bundle(target)
    assert verified.ok, verified.problems
    import tarfile

    with tarfile.open(target) as tar:
        raw = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    texts = {name: data.decode() for name, data in raw.items() if not name.endswith(".png")}
    assert not [name for name, text in texts.items() if str(home) in text or str(tmp_path) + "/home" in text]
    assert "~/" in texts["run/run.json"] and "run.json" in manifest.masked


def test_homes_are_written_from_tilde_and_other_paths_are_left_alone() -> None:
    assert home_relative("/home/ada/.cache/llama-server and /root/x") == "~/.cache/llama-server and ~/x"
    assert home_relative('"/Users/bob/models/m.gguf"') == '"~/models/m.gguf"'
    assert home_relative("/data/home/ada/m.gguf /rootfs/m /opt/x") == "/data/home/ada/m.gguf /rootfs/m /opt/x"
    said = _build_difference({"versions": ["b1"], "binary": {"path": "/home/ada/bin/llama-server"}},
                             {"versions": ["b1"], "binary": {"path": "/root/bin/llama-server"}})
    assert said == "engine binary ~/bin/llama-server → ~/bin/llama-server (same version b1)"
