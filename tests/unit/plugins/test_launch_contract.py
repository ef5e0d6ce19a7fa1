"""The launch contract, for the built-in adapters and both plugins (this folder puts the plugins' sources on
the path): core resolves the engine's program and the models once, before launch, and hands them
to ``launch_spec``, which only translates (no file is read or written there); installing goes through the
adapter's ``Installer``."""

from __future__ import annotations

import builtins
import io
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from bakeoff.core import (
    Arm,
    ConfigError,
    EngineAdapter,
    EngineUnavailable,
    Installer,
    LaunchInputs,
    LaunchSpec,
    NoOptions,
    Program,
    resolve_launch,
)
from bakeoff.core.cli import engines as engines_cli
from bakeoff.engines.exllama import ExllamaAdapter
from bakeoff.engines.llamacpp import LlamaCppAdapter
from bakeoff.engines.sim.adapter import SimAdapter
from bakeoff.engines.vllm import VllmAdapter
from bakeoff_ikllama.adapter import IkLlamaAdapter
from bakeoff_sglang.adapter import SglangAdapter

NOWHERE = Path("/nonexistent/bakeoff-launch")


@contextmanager
def no_file_access() -> Iterator[list[str]]:
    """Every stat, directory listing and open fails the test (and is recorded): what launch_spec must not do."""
    touched: list[str] = []

    def refuse(name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            touched.append(f"{name}({args[0] if args else ''})")
            raise AssertionError(f"launch_spec did I/O: {name}({args[0] if args else ''})")
        return call

    saved = {name: getattr(os, name) for name in ("stat", "lstat", "scandir", "listdir", "open", "access")}
    saved_open = builtins.open, io.open
    try:
        for name in saved:
            setattr(os, name, refuse(f"os.{name}"))
        builtins.open = io.open = refuse("open")
        yield touched
    finally:
        for name, fn in saved.items():
            setattr(os, name, fn)
        builtins.open, io.open = saved_open


# (adapter, arm fields, program core found) — every built-in that launches, and both plugins
CASES: list[tuple[EngineAdapter, dict[str, Any], Program | None]] = [
    (LlamaCppAdapter(), {"engine": "llamacpp", "speculative": {"method": "draft", "draft_model": "d.gguf"}},
     Program(("/opt/llama/llama-server",), env={"LD_LIBRARY_PATH": "/opt/llama"})),
    (LlamaCppAdapter(), {"engine": "llamacpp", "speculative": {"method": "ngram", "n_max": 8}},
     Program(("/opt/llama/llama-server",))),
    (VllmAdapter(), {"engine": "vllm", "speculative": {"method": "draft", "draft_model": "d", "n_max": 3}},
     Program(("/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server"))),
    (VllmAdapter(), {"engine": "vllm", "launch": "docker"}, None),
    (ExllamaAdapter(), {"engine": "exllama", "speculative": {"method": "draft", "draft_model": "d"}},
     Program(("/opt/tabby/python", "/opt/tabby/main.py"))),
    (ExllamaAdapter(), {"engine": "exllama", "launch": "docker"}, None),
    (SimAdapter(), {"engine": "sim", "options": {"launch_speeds": [1.0, 0.5]}}, None),
    (IkLlamaAdapter(), {"engine": "ikllama", "speculative": {"method": "draft", "draft_model": "d.gguf"}},
     Program(("/opt/ik/llama-server",))),
    (SglangAdapter(), {"engine": "sglang", "speculative": {"method": "eagle3", "draft_model": "d"}},
     Program(("/opt/sglang/python", "-m", "sglang.launch_server"))),
]


@pytest.mark.parametrize(("adapter", "fields", "program"), CASES,
                         ids=[f"{a.name}-{f.get('launch', 'native')}-{i}" for i, (a, f, _) in enumerate(CASES)])
def test_launch_spec_translates_what_core_resolved_without_touching_a_file(
        adapter: EngineAdapter, fields: dict[str, Any], program: Program | None) -> None:
    arm = Arm.model_validate({"name": "a", "model": "m", **fields})
    model = "/models/resolved/tgt-7"
    draft = "/models/resolved/dft-7" if arm.speculative.draft_model else None
    launch = LaunchInputs(port=18123, workdir=NOWHERE, model=model, draft_model=draft, program=program)
    with no_file_access() as touched:
        spec = adapter.launch_spec(arm, launch)
    assert not touched
    text = " ".join(spec.argv)
    if program is not None:
        assert spec.argv[:len(program.argv)] == list(program.argv)  # the program core found, as found
        assert all(spec.env[k] == v for k, v in program.env.items())
    shown = f"{text} {spec.files}"  # TabbyAPI takes its models and port in config.yml
    if adapter.name != "sim":  # the sim loads no model
        assert "tgt-7" in shown  # as resolved (or where its container mounts it)
    if draft is not None:
        assert "dft-7" in shown
        assert "d.gguf" not in shown and " d " not in f"{shown} "  # never the arm's bare draft name
    assert "18123" in shown


def test_core_resolves_the_program_for_a_native_launch_only_and_the_models_always(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    monkeypatch.setenv("BAKEOFF_LLAMA_SERVER", "/opt/llama/llama-server")
    native = Arm(name="a", engine="llamacpp", model=str(model))
    launch = resolve_launch(LlamaCppAdapter(), native, 8080, tmp_path)
    assert launch.program is not None and launch.program.argv == ("/opt/llama/llama-server",)
    assert launch.program.found_in == "$BAKEOFF_LLAMA_SERVER"
    assert (launch.model, launch.port, launch.workdir) == (str(model), 8080, tmp_path)
    compose = native.model_copy(update={"launch": "compose"})
    assert resolve_launch(LlamaCppAdapter(), compose, 8080, tmp_path).program is None  # the image has it


def test_resolving_keeps_the_errors_that_name_the_field_and_the_path(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BAKEOFF_LLAMA_SERVER", "/opt/llama/llama-server")
    arm = Arm(name="a", engine="llamacpp", model=str(tmp_path / "gone.gguf"))
    with pytest.raises(ConfigError, match=r"model '.*gone\.gguf': no such file or directory, and not a built-in"):
        resolve_launch(LlamaCppAdapter(), arm, 8080, tmp_path)
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    drafted = Arm.model_validate({"name": "a", "engine": "llamacpp", "model": str(tmp_path / "m.gguf"),
                                  "speculative": {"method": "draft", "draft_model": "no-draft.gguf"}})
    with pytest.raises(ConfigError, match=r"model 'no-draft\.gguf': no such file"):
        resolve_launch(LlamaCppAdapter(), drafted, 8080, tmp_path)
    monkeypatch.delenv("BAKEOFF_LLAMA_SERVER")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("BAKEOFF_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(EngineUnavailable, match=r"llama-server not found \(options.binary.*bakeoff engines install"):
        resolve_launch(LlamaCppAdapter(), drafted, 8080, tmp_path)


# -- installing goes through the adapter's Installer ------------------------------------------------
class _RecordingInstaller(Installer[NoOptions]):
    engine = "fakeinst"
    backends = ("cpu",)

    def __init__(self) -> None:
        self.calls: list[str | None] = []

    def install(self, log: Callable[[str], None], backend: str | None = None) -> str:
        self.calls.append(backend)
        log("building")
        return "/cache/fakeinst"


class _Installable(EngineAdapter):
    name = "fakeinst"
    installer: ClassVar[_RecordingInstaller] = _RecordingInstaller()

    def launch_spec(self, arm: Arm, launch: LaunchInputs) -> LaunchSpec:
        return LaunchSpec(argv=["serve"])


class _NotInstallable(EngineAdapter):
    name = "fakeinst"  # no installer: the base class's None

    def launch_spec(self, arm: Arm, launch: LaunchInputs) -> LaunchSpec:
        return LaunchSpec(argv=["serve"])


def test_engines_install_goes_through_the_installer(monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = _Installable()
    monkeypatch.setattr(engines_cli, "load_engine", lambda name: adapter)
    runner = CliRunner()
    done = runner.invoke(engines_cli.app, ["install", "fakeinst", "--backend", "cpu"])
    assert done.exit_code == 0 and "fakeinst: installed at /cache/fakeinst" in done.output, done.output
    assert adapter.installer.calls == ["cpu"]
    refused = runner.invoke(engines_cli.app, ["install", "fakeinst", "--backend", "cuda"])
    # the CLI's boundary prints the refusal and exits 2, or (run alone) the ConfigError reaches the runner
    assert refused.exit_code != 0
    assert "--backend 'cuda': fakeinst builds for cpu" in refused.output + str(refused.exception)
    assert adapter.installer.calls == ["cpu"]  # a refused backend builds nothing
    monkeypatch.setattr(engines_cli, "load_engine", lambda name: _NotInstallable())
    none = runner.invoke(engines_cli.app, ["install", "fakeinst"])
    assert none.exit_code != 0 and "fakeinst has no installer" in none.output + str(none.exception)


def test_the_adapter_class_no_longer_carries_install_methods() -> None:
    for name in ("install", "installed", "install_hint", "find_binary", "binary_choice", "launcher"):
        assert not any(hasattr(cls, name) for cls in (EngineAdapter, LlamaCppAdapter, VllmAdapter, ExllamaAdapter,
                                                      IkLlamaAdapter, SglangAdapter)), name
    assert LlamaCppAdapter.installer is not None and LlamaCppAdapter.installer.backends == ("auto", "cpu", "cuda")


def test_an_adapter_written_against_the_earlier_contract_fails_where_it_is_defined() -> None:
    with pytest.raises(TypeError, match=r"launch_spec\(arm, port, workdir\): it is launch_spec\(arm, launch\) now"):
        class _Old(EngineAdapter):
            def launch_spec(self, arm: Arm, port: int, workdir: Path) -> LaunchSpec:  # type: ignore[override]
                return LaunchSpec(argv=[])
    with pytest.raises(TypeError, match=r"_OldCompose.compose_service: this hook was replaced by a ComposeImage"):
        class _OldCompose(_Installable):
            def compose_service(self, arm: Arm, port: int) -> dict[str, Any]:
                return {}
    with pytest.raises(TypeError, match=r"_OldInstall.install: this hook was replaced by an Installer"):
        class _OldInstall(_Installable):
            def install(self, log: Callable[[str], None]) -> str:
                return ""


@pytest.mark.parametrize("adapter", [LlamaCppAdapter(), VllmAdapter(), ExllamaAdapter(), SimAdapter(),
                                     IkLlamaAdapter(), SglangAdapter()], ids=lambda a: a.name)
def test_compose_is_declared_exactly_where_the_launch_mode_is(adapter: EngineAdapter) -> None:
    assert ("compose" in adapter.capabilities.launch_modes) == (adapter.compose is not None)
