"""Every speculative path of llama.cpp for real, on tiny synthesized models: `bakeoff run` with MTP, DFlash,
DFlash2, DSpark and EAGLE3 arms, checked against the acceptance their weights force (0 for random
weights, ~1 for agreeing ones, a chosen fraction for MTP), and `bakeoff selftest llamacpp`."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from bakeoff.core.results.store import read_samples
from bakeoff.core.run.selftest import run_case
from bakeoff.engines.llamacpp import LlamaCppAdapter
from bakeoff.engines.llamacpp.selftest import selftest_cases
from bakeoff.engines.llamacpp.synth import SynthSpec, expected_mtp_acceptance, synth_pair, synthesize

pytestmark = pytest.mark.integration

REQUESTS = 2
MAX_TOKENS = 128


def _arms() -> tuple[list[dict[str, Any]], dict[str, Callable[[int, int], None]]]:
    """The arms of the bakeoff and, per arm, a check of its drafted/accepted totals."""
    arms: list[dict[str, Any]] = []
    checks: dict[str, Callable[[int, int], None]] = {}

    def add(name: str, model: Path, check: Callable[[int, int], None], **spec: Any) -> None:
        arms.append({"name": name, "engine": "llamacpp", "model": str(model), "speculative": spec,
                     "settings": {"ctx": 1024, "threads": 2}})
        checks[name] = check

    def none_accepted(drafted: int, accepted: int) -> None:
        assert drafted > 0 and accepted == 0

    def all_accepted(drafted: int, accepted: int) -> None:
        assert drafted > 0 and accepted / drafted >= 0.99

    def fraction(expected: float) -> Callable[[int, int], None]:
        def check(drafted: int, accepted: int) -> None:
            assert drafted > 0 and abs(accepted / drafted - expected) <= 0.1, (accepted, drafted, expected)
        return check

    add("mtp-random", synthesize(SynthSpec("mtp")), none_accepted, method="mtp", n_max=2)
    add("mtp-agree", synthesize(SynthSpec("mtp", agree=True)), all_accepted, method="mtp", n_max=2)
    add("mtp-a0.7", synthesize(SynthSpec("mtp", agree=True, acceptance=0.7)), fraction(0.7), method="mtp", n_max=1)
    add("mtp-a0.5-n2", synthesize(SynthSpec("mtp", agree=True, acceptance=0.5)),
        fraction(expected_mtp_acceptance(0.5, 2)), method="mtp", n_max=2)
    for kind in ("dflash", "dflash2", "dspark", "eagle3"):
        method = "dflash" if kind == "dflash2" else kind  # DFlash2 is a dflash draft to llama.cpp
        for agree, check in ((False, none_accepted), (True, all_accepted)):
            target, draft = synth_pair(kind, agree=agree)
            add(f"{kind}-{'agree' if agree else 'random'}", target, check, method=method, draft_model=str(draft),
                n_max=3)
    return arms, checks


@pytest.fixture(scope="module")
def spec_run(llama_server: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    arms, checks = _arms()
    tmp = tmp_path_factory.mktemp("spec-paths")
    config = {"name": "spec-paths", "arms": arms,
              "workload": {"suite": [{"name": "count", "messages": [
                  {"role": "user", "content": "Count from one to twenty."}]}],
                           "max_tokens": MAX_TOKENS, "reps": REQUESTS, "warmup": 0}}
    (tmp / "spec.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    exe = shutil.which("bakeoff")
    assert exe, "the bakeoff console script is not installed (pip install -e .)"
    proc = subprocess.run([exe, "run", str(tmp / "spec.yaml"), "--out", str(tmp / "runs")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = next(d for d in (tmp / "runs").iterdir() if d.is_dir())
    return run_dir, checks


ARM_NAMES = ["mtp-random", "mtp-agree", "mtp-a0.7", "mtp-a0.5-n2"] + [
    f"{kind}-{w}" for kind in ("dflash", "dflash2", "dspark", "eagle3") for w in ("random", "agree")]


@pytest.mark.parametrize("arm", ARM_NAMES)
def test_drafted_and_accepted_match_what_the_weights_force(spec_run: tuple[Path, dict[str, Any]], arm: str) -> None:
    run_dir, checks = spec_run
    record = json.loads((run_dir / "run.json").read_text())["arm_records"][arm][0]
    assert record["status"] == "ok", record.get("error")
    assert record["effective"]["speculative"] is True  # /slots: speculation really active
    assert not record["mismatches"]
    samples = [s for s in read_samples(run_dir) if s.arm == arm]
    assert len(samples) == REQUESTS
    for s in samples:
        assert s.status == "ok" and s.completion_tokens == MAX_TOKENS
        assert s.drafted is not None and s.accepted is not None
        assert not [f for f in s.flags if "mismatch" in f], s.flags  # timings, /metrics and log agree
    checks[arm](sum(s.drafted or 0 for s in samples), sum(s.accepted or 0 for s in samples))


def test_normal_draft_memory_fitting_error_line_does_not_fail_a_start(spec_run: tuple[Path, dict[str, Any]]) -> None:
    run_dir, _ = spec_run
    log = (run_dir / "arms" / "dflash-agree" / "engine-pass0.log").read_text(errors="replace")
    assert "requires ctx_other to be set" in log  # llama.cpp's E line while fitting draft memory ...
    assert LlamaCppAdapter().classify_startup_failure(log) is None  # ... is not a startup failure


def test_selftest_passes_on_the_installed_build(llama_server: Path, tmp_path: Path, bakeoff_cli: str) -> None:
    proc = subprocess.run([bakeoff_cli, "selftest", "llamacpp", "--keep", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "250"})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    for method in ("none", "mtp", "dflash", "dflash2", "dspark", "eagle3", "draft", "ngram-mod", "ngram-simple",
                   "ngram-map-k", "ngram-map-k4v", "ngram-cache"):
        assert f"│ {method} " in proc.stdout
    assert "draft-mtp" in proc.stdout and "FAILED" not in proc.stdout


def test_selftest_fails_loudly_when_llama_server_rejects_a_flag(llama_server: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # A llama-server that renamed a speculative type: the wrapper hands the real binary a name it lacks.
    wrapper = tmp_path / "llama-server"
    wrapper.write_text(f"""#!/bin/bash
args=()
for a in "$@"; do [ "$a" = draft-dspark ] && a=draft-dspark-v2; args+=("$a"); done
export LD_LIBRARY_PATH={llama_server.parent}
exec {llama_server} "${{args[@]}}"
""")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("BAKEOFF_LLAMA_SERVER", str(wrapper))
    cases, _ = selftest_cases()
    row = run_case(next(c for c in cases if c.label == "dspark"), tmp_path / "runs")
    assert not row.ok and not row.started
    assert "draft-dspark-v2" in " ".join(row.problems)  # llama-server's own line is quoted
