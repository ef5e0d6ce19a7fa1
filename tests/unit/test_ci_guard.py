"""The real-engine tier cannot skip silently in CI (AUDIT H3): tests/conftest.py turns a skipped
integration/vllm test into a failure under CI=true and ends the output with the count of real-engine tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
SUITE = '''
import pytest

@pytest.mark.integration
def test_needs_llama_server():
    pytest.skip("llama-server is not installed")

@pytest.mark.integration
def test_ran_against_the_engine():
    pass

@pytest.mark.vllm
def test_ran_against_vllm():
    pass

def test_a_unit_test_may_skip():
    pytest.skip("not an engine test")
'''


def run_suite(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").symlink_to(TESTS / "conftest.py")  # the real hooks, with their fixtures dir
    (tmp_path / "fixtures").symlink_to(TESTS / "fixtures")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    integration: x\n    vllm: x\n")
    (tmp_path / "test_tier.py").write_text(SUITE)
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": ci} if ci else {})
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_a_skipped_engine_test_fails_and_the_count_ends_the_output(tmp_path: Path, ci: str) -> None:
    done = run_suite(tmp_path, ci)
    assert done.returncode == 1, done.stdout
    assert "skipped under CI=true, which needs every real-engine test to run" in done.stdout
    assert "llama-server is not installed" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1] == \
        "real-engine tests (integration/vllm markers): 2 passed, 1 failed, 0 skipped"


def test_outside_ci_it_is_a_skip_and_still_counted(tmp_path: Path) -> None:
    done = run_suite(tmp_path, None)
    assert done.returncode == 0, done.stdout
    assert done.stdout.rstrip().splitlines()[-1] == \
        "real-engine tests (integration/vllm markers): 2 passed, 0 failed, 1 skipped"
