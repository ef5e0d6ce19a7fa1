"""Security rules of issue 5 that hold without running anything: loopback by default, no shell, and an
API key that travels as the name of an environment variable only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from bakeoff.core.config import Arm, Settings, parse_bakeoff
from bakeoff.core.errors import ConfigError
from bakeoff.core.protocol import _headers, plan_run

ROOT = Path(__file__).resolve().parents[2]


def _python_sources() -> list[Path]:
    return [p for d in ("core", "engines", "plugins") if (ROOT / d).is_dir() for p in (ROOT / d).rglob("*.py")]


def test_no_subprocess_call_uses_a_shell() -> None:
    offenders = []
    for path in _python_sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert len(_python_sources()) > 10
    assert offenders == []


def test_engines_bind_loopback_unless_told_otherwise(tmp_path: Path) -> None:
    assert Settings().host == "127.0.0.1"
    from bakeoff.engines.llamacpp import LlamaCppAdapter

    model = tmp_path / "m.gguf"
    model.write_bytes(b"")
    arm = Arm(name="x", engine="llamacpp", model=str(model), options={"binary": "/bin/true"})
    argv = LlamaCppAdapter().launch_spec(arm, 1234, tmp_path).argv
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    arm = Arm(name="x", engine="llamacpp", model=str(model), options={"binary": "/bin/true"},
              settings={"host": "0.0.0.0"})
    argv = LlamaCppAdapter().launch_spec(arm, 1234, tmp_path).argv
    assert argv[argv.index("--host") + 1] == "0.0.0.0"


def test_the_key_is_read_from_the_named_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BAKEOFF_T_KEY", "k-123")
    assert _headers(Arm(name="x", engine="sim", model="sim", api_key_env="BAKEOFF_T_KEY")) == {
        "Authorization": "Bearer k-123"}
    assert _headers(Arm(name="x", engine="sim", model="sim")) == {}


def test_a_named_key_variable_that_is_unset_stops_the_run_before_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BAKEOFF_T_UNSET", raising=False)
    config = parse_bakeoff("arms: [{name: x, engine: sim, model: sim, api_key_env: BAKEOFF_T_UNSET}]\n")
    with pytest.raises(ConfigError, match=r"\$BAKEOFF_T_UNSET, which is not set"):
        plan_run(config)
