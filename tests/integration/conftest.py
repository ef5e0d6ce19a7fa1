"""Integration tier: real engines on the CPU. A missing engine skips with the command that installs it."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from bakeoff.core.engine.launcher import free_port
from bakeoff.core.engine.models import smollm2_gguf
from bakeoff.core.results.sample import Sample
from bakeoff.engines.llamacpp import LlamaCppAdapter, LlamaCppOptions


@pytest.fixture(scope="session")
def llama_server() -> Path:
    try:
        return Path(LlamaCppAdapter.installer.locate(LlamaCppOptions()).argv[0])
    except Exception as exc:  # EngineUnavailable
        pytest.skip(f"llama-server is not installed ({exc}); run `bakeoff engines install llamacpp`")


@pytest.fixture(scope="session")
def smollm2() -> Path:
    return smollm2_gguf()


@pytest.fixture(scope="session")
def bakeoff_cli() -> str:
    exe = shutil.which("bakeoff")
    assert exe, "the bakeoff console script is not installed (pip install -e .)"
    return exe


@pytest.fixture
def run_bakeoff(bakeoff_cli: str, tmp_path: Path) -> Callable[[Path], tuple[Path, list[Sample]]]:
    """``bakeoff run FILE`` as a user types it: it must exit 0; returns the run directory and its samples."""
    def run(cfg: Path) -> tuple[Path, list[Sample]]:
        out = tmp_path / "runs"
        ran = subprocess.run([bakeoff_cli, "run", str(cfg), "--out", str(out)], capture_output=True, text=True,
                             timeout=1200, env={**os.environ, "COLUMNS": "220"})
        assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
        (run_dir,) = [d for d in out.iterdir() if d.is_dir()]
        lines = (run_dir / "samples.jsonl").read_text().splitlines()
        return run_dir, [Sample.model_validate_json(line) for line in lines]
    return run


@pytest.fixture
def running_llama_server(llama_server: Path, smollm2: Path, tmp_path: Path) -> Iterator[str]:
    """A llama-server that bakeoff did NOT start, for attach mode."""
    port = free_port()
    env = {**os.environ, "LD_LIBRARY_PATH": str(llama_server.parent)}
    log = (tmp_path / "external.log").open("wb")
    proc = subprocess.Popen([str(llama_server), "-m", str(smollm2), "--host", "127.0.0.1", "--port", str(port),
                             "-np", "1", "-c", "2048", "-t", "2", "--metrics"],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        else:
            pytest.fail("external llama-server did not become ready")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
