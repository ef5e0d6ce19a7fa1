"""``bakeoff check FILE`` (issue 32): every example is checked without engines, downloads or synthesis; what the
machine lacks is a warning with its fix; errors in the file are listed one per line with exit 2."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bakeoff.core.cli import app
from bakeoff.core.cli.exit_codes import ExitCode
from bakeoff.core.engine import pypi, registry

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
runner = CliRunner()


@pytest.fixture
def bare_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache, no engine on PATH, and no process or download allowed while checking."""
    cache = tmp_path / "cache"
    cache.mkdir()
    for var in ("BAKEOFF_LLAMA_SERVER", "BAKEOFF_VLLM_PYTHON", "BAKEOFF_IK_LLAMA_SERVER", "BAKEOFF_TABBY_DIR",
                "BAKEOFF_COMPOSE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("BAKEOFF_CACHE", str(cache))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"bakeoff check ran or fetched something: {args[:1]}")

    monkeypatch.setattr(subprocess, "run", refused)
    monkeypatch.setattr(subprocess, "Popen", refused)
    monkeypatch.setattr(pypi, "download", refused)
    return cache


def check(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["check", *args], env={"COLUMNS": "250"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_is_valid_on_a_bare_machine(example: Path, bare_machine: Path) -> None:
    result = runner.invoke(app, ["check", str(example)], env={"COLUMNS": "250"})
    errors = [" ".join(line.split()) for line in result.stderr.splitlines()]
    # a model the reader supplies (an absolute path such as /models/...) is refused as the run refuses it, and
    # nothing else is wrong with the file
    theirs = re.compile(r"^(error: )?arm '[^']+': model '/[^']+': no such file or directory")
    if result.exit_code == ExitCode.CONFIG and errors and all(theirs.match(e) for e in errors):
        return
    code, out = result.exit_code, result.output
    assert code == ExitCode.OK, out
    assert "the file is valid" in out
    assert list(bare_machine.iterdir()) == []  # nothing downloaded, synthesized or converted


def test_what_the_machine_lacks_is_a_warning_with_its_fix(bare_machine: Path) -> None:
    code, out = check(str(ROOT / "examples" / "head-to-head-cpu.yaml"))
    assert code == ExitCode.OK, out
    assert "WARNING llamacpp-off, llamacpp-ngram: llama-server is not installed" in out
    assert "fix: bakeoff engines install llamacpp" in out
    assert "WARNING vllm-off, vllm-ngram: vLLM is not installed" in out and "fix: bakeoff engines install vllm" in out
    assert out.count("bakeoff engines install vllm") == 1  # the venv and the conversion: one fix, said once
    assert "model 'smollm2' is downloaded on the first run" in out


def test_calibration_is_planned_on_paper(bare_machine: Path) -> None:
    code, out = check(str(ROOT / "examples" / "calibrate-cpu.yaml"))
    assert code == ExitCode.OK, out
    assert "calibration: llamacpp mtp: n_max 1, 2, 3 × acceptance 0, 0.5, 0.85, 1 = 13 arms" in out
    assert "cal-llamacpp-mtp-n2-a0.85" in out and "synthesized at the first run" in out


def test_a_plugin_that_is_not_installed_says_how_to_install_it(tmp_path: Path, bare_machine: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.KNOWN_PLUGINS, "fakeplug", "pip install ./plugins/bakeoff-fakeplug")
    file = tmp_path / "b.yaml"
    file.write_text("arms:\n  - {name: a, engine: sim, model: x}\n  - {name: b, engine: fakeplug, model: m.gguf}\n")
    code, out = check(str(file))
    assert code == ExitCode.CONFIG, out  # the missing model below
    assert "WARNING b: the fakeplug plugin is not installed" in out
    assert "fix: pip install ./plugins/bakeoff-fakeplug" in out
    # a model file that is not there is the run's error, not a lack (read from the file's folder)
    assert f"arm 'b': model '{tmp_path / 'm.gguf'}': no such file or directory" in " ".join(out.split())


def test_errors_in_the_file_are_each_on_their_own_line_with_exit_2(tmp_path: Path, bare_machine: Path) -> None:
    file = tmp_path / "b.yaml"
    file.write_text("arms:\n"
                    "  - {name: a, engine: llama.cpp, model: smollm2}\n"
                    "  - {name: b, engine: sim, model: x, options: {itl: 3}}\n"
                    "  - {name: c, engine: llamacpp, model: smollm2, settings: {tensor_parallel: 2}}\n")
    result = runner.invoke(app, ["check", str(file)], env={"COLUMNS": "250"})
    assert result.exit_code == ExitCode.CONFIG
    errors = result.stderr.splitlines()
    from bakeoff.core.engine.registry import engine_names
    assert errors[0] == f"error: {file}: arms[0].engine: unknown engine 'llama.cpp'; did you mean 'llamacpp'? " \
                        f"Available: {', '.join(sorted(engine_names()))}"  # plugins installed here included
    assert errors[1] == f"  {file}:3: arms[1].options.itl: unknown key (not a field here; check the spelling); " \
                        "did you mean 'itl_ms'?"
    assert errors[2].startswith("  arm 'c': settings.tensor_parallel has no llamacpp flag")
    assert "  a  " in result.stdout and "  c  " in result.stdout  # the plan is still shown


def test_every_bakeoff_file_in_the_readme_is_valid(tmp_path: Path, bare_machine: Path) -> None:
    """The README's files are what a newcomer copies first: each passes `bakeoff check` as written (with the
    model file it names put beside it, as the README says)."""
    (tmp_path / "model.gguf").write_bytes(b"")
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    assert len(blocks) >= 2
    for i, block in enumerate(blocks):
        file = tmp_path / f"readme-{i}.yaml"
        file.write_text(block)
        code, out = check(str(file))
        assert code == ExitCode.OK, (block, out)
    assert len(blocks[0].strip().splitlines()) == 6  # "six lines"


def test_the_request_count_names_every_factor_and_is_what_the_run_plans(bare_machine: Path, tmp_path: Path) -> None:
    """USER-3 #4: '336 timed requests (2 prompt(s) × 1 mode(s) × 2 rep(s) × 1 pass(es) per arm)' multiplied to 24;
    arms, streams and depths multiplied unnamed. Every factor is named, and the count is the plan's."""
    from bakeoff.core.config.loader import load_bakeoff
    from bakeoff.core.run.plan import plan_run

    f = tmp_path / "b.yaml"
    f.write_text("arms:\n  - {name: a, engine: sim, model: x}\n  - {name: b, engine: sim, model: x}\n"
                 "  - {name: c, engine: sim, model: x}\n"
                 "workload: {prompts: [prose, code_python], reps: 2, passes: 3, concurrency: [1, 4]}\n")
    code, out = check(str(f))
    assert code == ExitCode.OK, out
    assert ("180 timed requests = 3 arm(s) × 3 pass(es) × 5 stream(s) (1+4) × 2 prompt(s) × 1 mode(s) × "
            "2 rep(s)") in out, out
    assert plan_run(load_bakeoff(f)).requests_total == 180
    g = tmp_path / "one.yaml"
    g.write_text("arms:\n  - {name: a, engine: sim, model: x}\n  - {name: b, engine: sim, model: x}\n"
                 "workload: {prompts: [prose], reps: 2, depths: [64, 128]}\n")
    _, out = check(str(g))  # the count is said even where the file has errors (the sim engine takes no depths)
    assert "8 timed requests = 2 arm(s) × 1 pass(es) × 2 depth(s) × 1 prompt(s) × 1 mode(s) × 2 rep(s)" in out, out


def _refused_like_the_run(out: str, said: str) -> bool:
    return said in " ".join(out.split())


def test_check_refuses_what_the_run_refuses(tmp_path: Path, bare_machine: Path) -> None:
    """USER-3 #6: a missing model file, gate arms that differ beyond the build and a fixed port already taken
    passed `check` (exit 0) and were then refused by the real command; now `check` exits 2 in the run's words."""
    import socket

    from bakeoff.core.config.loader import load_bakeoff
    from bakeoff.core.run.regression import gate_config

    missing = tmp_path / "model.gguf"
    f = tmp_path / "m.yaml"
    f.write_text("arms:\n  - {name: now, engine: sim, model: ./model.gguf}\n  - {name: b, engine: sim, model: sim}\n")
    result = runner.invoke(app, ["check", str(f)], env={"COLUMNS": "250"})
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert f"arm 'now': model '{missing}': no such file or directory" in result.stderr

    g = tmp_path / "g.yaml"
    g.write_text("arms:\n  - {name: ref, engine: sim, model: sim, options: {itl_ms: 2}}\n"
                 "  - {name: cand, engine: sim, model: sim, options: {itl_ms: 3}}\n"
                 "gate: {reference: ref, candidate: cand}\nworkload: {prompts: [prose], passes: 3}\n")
    with pytest.raises(Exception) as gate_error:  # the gate's own refusal, word for word
        gate_config(load_bakeoff(g))
    result = runner.invoke(app, ["check", str(g)], env={"COLUMNS": "250"})
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert _refused_like_the_run(result.stderr, str(gate_error.value)), result.stderr

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        p = tmp_path / "p.yaml"
        p.write_text(f"arms:\n  - {{name: now, engine: sim, model: sim, settings: {{port: {port}}}}}\n")
        result = runner.invoke(app, ["check", str(p)], env={"COLUMNS": "250"})
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert _refused_like_the_run(result.stderr, "sim would fail to start (port-in-use): the port is taken by "
                                 f"another process (settings.port {port} on 127.0.0.1)"), result.stderr
    result = runner.invoke(app, ["check", str(p)], env={"COLUMNS": "250"})  # the port is free again
    assert result.exit_code == ExitCode.OK, result.output


def test_check_refuses_a_structured_kind_the_engine_does_not_take(tmp_path: Path, bare_machine: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from bakeoff.core.config.loader import load_bakeoff
    from bakeoff.core.engine.registry import load_engine
    from bakeoff.core.run.plan import plan_run

    sim = type(load_engine("sim"))
    from bakeoff.core import StructuredOutputs

    monkeypatch.setattr(sim, "structured", StructuredOutputs(kinds=("json_schema",)))
    f = tmp_path / "s.yaml"
    f.write_text("arms:\n  - {name: a, engine: sim, model: sim}\n"
                 "workload: {prompts: [prose], structured: {kinds: [tool_call]}}\n")
    with pytest.raises(Exception) as run_error:
        plan_run(load_bakeoff(f))
    result = runner.invoke(app, ["check", str(f)], env={"COLUMNS": "250"})
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert _refused_like_the_run(result.stderr, str(run_error.value)), result.stderr


def test_check_says_what_tune_and_gate_will_do(tmp_path: Path, bare_machine: Path) -> None:
    """USER-3 #4: a tune: file was described as a plain run (no race, budget or verification), a gate: file as
    1 pass where the gate runs 3."""
    code, out = check(str(ROOT / "examples" / "tune-ngram-cpu.yaml"))
    said = " ".join(out.split())
    assert code == ExitCode.OK, out
    assert "tune: races 3 candidate(s) (tune-n_max2, tune-n_max4, tune-n_max8) against spec-off within " \
           "tune.budget_s 500 s" in said, said
    assert "tune: then verifies the named setting, the runner-up and spec-off at 4+1+2 streams" in said
    g = tmp_path / "g.yaml"
    g.write_text("arms:\n  - {name: ref, engine: sim, model: sim}\n  - {name: cand, engine: sim, model: sim}\n"
                 "  - {name: other, engine: sim, model: sim, options: {itl_ms: 9}}\n"
                 "gate: {reference: ref, candidate: cand, max_slowdown: 10%}\nworkload: {prompts: [prose], reps: 1}\n")
    code, out = check(str(g))
    said = " ".join(out.split())
    assert code == ExitCode.OK, out
    assert said.startswith(f"{g}: 6 timed requests = 2 arm(s) × 3 pass(es)"), said  # the gate's arms and passes
    assert "gate: runs ref and cand only; left out: other" in said
    assert "gate: cand against ref, 3 interleaved passes, one more while the verdict is inconclusive up to " \
           "gate.max_passes 8; exit 0 passed" in said
