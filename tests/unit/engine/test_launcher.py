"""Launcher: a fixed port that a stranger already answers on must not pass for our engine being ready."""

from __future__ import annotations

import http.server
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bakeoff.core import build_launch
from bakeoff.core.common.errors import EngineStartupError
from bakeoff.core.config.schema import Arm
from bakeoff.core.engine.contract import EngineAdapter
from bakeoff.core.engine.launcher import Engine, port_is_free

# An engine that, like vLLM, binds its port only after loading for a while, then fails to bind.
LATE_BINDER = "import time, sys; time.sleep(1.0); print('bind: Address already in use', flush=True); sys.exit(1)"


class _Healthy(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stranger() -> Iterator[int]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Healthy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _engine(fake_adapter: Callable[..., EngineAdapter], port: int, tmp_path: Path, port_taken: bool) -> Engine:
    adapter = fake_adapter("late-binder", argv=[sys.executable, "-c", LATE_BINDER])
    spec = build_launch(adapter, Arm(name="x", engine="late-binder", model="m"), port, tmp_path)
    return Engine(adapter, spec, f"http://127.0.0.1:{port}", tmp_path / "engine.log", boot_timeout_s=10,
                  port_taken=port_taken)


def test_port_is_free_sees_a_listener(stranger: int) -> None:
    assert not port_is_free("127.0.0.1", stranger)


def test_without_the_check_a_stranger_passes_for_ready(stranger: int, tmp_path: Path,
                                                       fake_adapter: Callable[..., EngineAdapter]) -> None:
    # The hazard itself: readiness polling alone is fooled by whatever answers on the port.
    engine = _engine(fake_adapter, stranger, tmp_path, port_taken=False)
    engine.start()
    try:
        assert engine.wait_ready() < 1.0
    finally:
        engine.stop()


def test_taken_port_waits_for_the_engine_and_quotes_its_failure(
        stranger: int, tmp_path: Path, fake_adapter: Callable[..., EngineAdapter]) -> None:
    engine = _engine(fake_adapter, stranger, tmp_path, port_taken=True)
    with pytest.raises(EngineStartupError) as err, engine:
        pass
    assert "already in use" in str(err.value)
    assert not engine.alive
