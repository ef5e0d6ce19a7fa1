"""`bakeoff calibrate`: a calibration from a file's calibrate: section or from flags, run exactly as `bakeoff run`
runs a file holding only that section (core/cli/run.py run_loaded); bad flags are one-line errors naming the flag.

Synthesis is replaced by a recorder and run_loaded by a catcher: what is checked here is the config the command
hands to the shared runner. The real run is tests/integration/test_calibrate_llamacpp.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bakeoff.core.cli import app
from bakeoff.core.cli import calibrate as calibrate_cli
from bakeoff.core.cli.exit_codes import ExitCode
from bakeoff.core.config.loader import load_bakeoff
from bakeoff.core.config.schema import BakeoffFile
from bakeoff.engines.llamacpp import synth as llamacpp_synth

runner = CliRunner()

SECTION_FILE = """
name: calibrate-llamacpp-mtp
arms: []
calibrate:
  - engine: llamacpp
    method: mtp
    n_max: [1, 2]
    acceptance: [0.5, 1.0]
    settings: {ctx: 1024, threads: 2}
workload: {prompts: [code_python], max_tokens: 64, reps: 2, warmup: 1, gates: []}
"""


@pytest.fixture
def handed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[BakeoffFile, Path, bool]]:
    """What the command hands to the runner `bakeoff run` uses; synthesis recorded, not done."""
    calls: list[tuple[BakeoffFile, Path, bool]] = []
    monkeypatch.setattr(llamacpp_synth, "synthesize", lambda spec, *a, **k: Path(f"/synth/{spec.name}.gguf"))
    monkeypatch.setattr(calibrate_cli, "run_loaded",
                        lambda config, out, dry_run=False, tables=False: calls.append((config, out, dry_run)))
    return calls


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["calibrate", *args], env={"COLUMNS": "250"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def test_flags_make_the_same_run_as_the_file_they_stand_for(tmp_path: Path, handed: list[Any]) -> None:
    code, out = invoke("--engine", "llamacpp", "--method", "mtp", "--n-max", "1,2", "--acceptance", "0.5, 1.0",
                       "--threads", "2", "--max-tokens", "64", "--reps", "2", "--out", str(tmp_path / "runs"))
    assert code == ExitCode.OK, out
    [(from_flags, out_dir, dry)] = handed
    assert out_dir == tmp_path / "runs" and not dry
    (tmp_path / "cal.yaml").write_text(SECTION_FILE)
    from_file = load_bakeoff(tmp_path / "cal.yaml")
    assert from_flags.model_dump(mode="json") == from_file.model_dump(mode="json")
    assert [a.name for a in from_flags.arms] == ["cal-llamacpp-mtp-off", "cal-llamacpp-mtp-n1-a0.50",
                                                 "cal-llamacpp-mtp-n1-a1.00", "cal-llamacpp-mtp-n2-a0.50",
                                                 "cal-llamacpp-mtp-n2-a1.00"]


def test_a_file_is_run_as_loaded_and_dry_run_is_passed_on(tmp_path: Path, handed: list[Any]) -> None:
    (tmp_path / "cal.yaml").write_text(SECTION_FILE)
    code, out = invoke(str(tmp_path / "cal.yaml"), "--dry-run")
    assert code == ExitCode.OK, out
    [(config, _, dry)] = handed
    assert dry and config.name == "calibrate-llamacpp-mtp" and len(config.arms) == 5


def test_defaults_pick_the_method_and_shape_is_parsed(handed: list[Any]) -> None:
    code, out = invoke("--engine", "llamacpp", "--shape", "hidden=96,layers=2", "--acceptance", "0,1")
    assert code == ExitCode.OK, out
    [(config, _, _)] = handed
    [section] = config.calibrate
    assert section.method == "mtp" and section.shape == {"hidden": 96, "layers": 2} and section.n_max == [1, 2, 3]
    code, out = invoke("--engine", "vllm", "--n-max", "2", "--acceptance", "0.7")
    assert code == ExitCode.OK, out
    assert handed[1][0].calibrate[0].method == "ngram" and handed[1][0].arms[1].options["speculative_extra"][
        "rejection_sample_method"] == "synthetic"


@pytest.mark.parametrize(("args", "message"), [
    (["--n-max", "1,x", "--engine", "llamacpp"], "--n-max '1,x': give comma-separated integers"),
    (["--acceptance", "0.5,high", "--engine", "llamacpp"], "--acceptance '0.5,high': give comma-separated numbers"),
    (["--engine", "llamacpp", "--acceptance", "1.5"], "acceptance"),
    (["--engine", "llamacpp", "--shape", "hidden:96"], "--shape 'hidden:96': give tiny or key=integer pairs"),
    (["--engine", "llamacpp", "--method", "ngram"], "method 'ngram' cannot be calibrated on llamacpp"),
    (["--engine", "sglang"], "engine"),
    ([], "give a FILE with a calibrate: section, or --engine llamacpp|vllm"),
])
def test_bad_flags_are_one_line_errors_naming_the_flag(args: list[str], message: str, handed: list[Any]) -> None:
    code, out = invoke(*args)
    assert code == ExitCode.CONFIG, out
    assert message in out and "Traceback" not in out, out
    assert handed == []


def test_a_file_and_flags_together_or_a_file_without_the_section_are_refused(tmp_path: Path,
                                                                              handed: list[Any]) -> None:
    (tmp_path / "cal.yaml").write_text(SECTION_FILE)
    code, out = invoke(str(tmp_path / "cal.yaml"), "--engine", "vllm", "--reps", "4")
    assert code == ExitCode.CONFIG and "--engine, --reps: give either a FILE or flags, not both" in out, out
    (tmp_path / "plain.yaml").write_text("name: p\narms: [{name: a, engine: llamacpp, model: m.gguf}]\n")
    code, out = invoke(str(tmp_path / "plain.yaml"))
    assert code == ExitCode.CONFIG and "no calibrate: section; `bakeoff run" in out, out
    assert handed == []
